/* A program that moves data between GPUs through the CUDA driver API, as JAX/XLA does: linked
 * libcuda calls, a function taken with cuGetProcAddress, one with cudaGetDriverEntryPointByVersion,
 * one with dlsym on an RTLD_LOCAL libcuda handle, and one runtime peer copy (which the runtime
 * carries out through the driver: it must be counted once). Every result is printed and every
 * destination is checked byte for byte against the host's pattern.
 *
 * With the argument `errors`, see Errors(). Otherwise it needs 3 GPUs. What it copies (driver_test.cc asserts exactly this):
 *   GPU 0 -> 1  cuMemcpyPeer 1 MiB; cuMemcpyPeerAsync (cuGetProcAddress) 2 x 128 KiB   direct (peer access on)
 *   GPU 0 -> 2  cuMemcpyDtoD 512 KiB                                                    host-staged
 *   GPU 2 -> 0  cuMemcpyAsync 256 KiB                                                   host-staged
 *   GPU 1 -> 2  cuMemcpyDtoD (cudaGetDriverEntryPointByVersion) 64 KiB;
 *               cudaMemcpyPeer 32 KiB                                                   host-staged
 *   GPU 2 -> 1  cuMemcpy3DPeer 1024 x 4 x 2 = 8 KiB                                     host-staged
 *   GPU 1 -> 0  cuMemcpyDtoDAsync (dlsym on libcuda, RTLD_LOCAL) 16 KiB                 direct
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KiB 1024u
#define MiB (1024u * 1024u)
#define SIZE (2u * MiB)

static int g_failed = 0;

static void Check(const char* what, int r) {
  printf("%s %d\n", what, r);
  if (r != 0) g_failed = 1;
}

/* Fills device memory of the current context with a byte pattern seeded by `seed`. */
static void Fill(CUdeviceptr p, unsigned seed) {
  unsigned char* h = malloc(SIZE);
  for (unsigned i = 0; i < SIZE; ++i) h[i] = (unsigned char)(i * 7u + seed);
  Check("fill", cuMemcpyHtoD(p, h, SIZE));
  free(h);
}

/* Whether [dst+doff, +n) equals [src+soff, +n), read back through the host. */
static void Same(const char* what, CUdeviceptr dst, size_t doff, CUdeviceptr src, size_t soff, size_t n) {
  unsigned char* a = malloc(n);
  unsigned char* b = malloc(n);
  int r = cuMemcpyDtoH(a, dst + doff, n) | cuMemcpyDtoH(b, src + soff, n);
  int same = r == 0 && memcmp(a, b, n) == 0;
  printf("%s %s\n", what, same ? "same" : "DIFFERENT");
  if (!same) g_failed = 1;
  free(a);
  free(b);
}

typedef CUresult (*PeerAsyncFn)(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t, CUstream);
typedef CUresult (*DtoDFn)(CUdeviceptr, CUdeviceptr, size_t);
typedef CUresult (*DtoDAsyncFn)(CUdeviceptr, CUdeviceptr, size_t, CUstream);

/* `errors`: every wrapped driver function once, with arguments a driver refuses or that need no GPU,
 * each result printed (the toolkit's stub libcuda answers 34 to all; the shim must pass each on). */
static int Errors(void) {
  printf("cuInit %d\n", (int)cuInit(0));
  CUdeviceptr p = 0;
  printf("cuMemAlloc %d\n", (int)cuMemAlloc(&p, 1 << 20));
  printf("cuMemFree %d\n", (int)cuMemFree(p));
  int can = -7;
  printf("cuDeviceCanAccessPeer %d %d\n", (int)cuDeviceCanAccessPeer(&can, 0, 1), can);
  int v = -7;
  printf("cuDeviceGetP2PAttribute %d %d\n",
         (int)cuDeviceGetP2PAttribute(&v, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 0, 1), v);
  printf("cuCtxEnablePeerAccess %d\n", (int)cuCtxEnablePeerAccess(NULL, 0));
  printf("cuCtxDisablePeerAccess %d\n", (int)cuCtxDisablePeerAccess(NULL));
  printf("cuMemcpyPeer %d\n", (int)cuMemcpyPeer(0x1000, NULL, 0x2000, NULL, 64));
  printf("cuMemcpyPeerAsync %d\n", (int)cuMemcpyPeerAsync(0x1000, NULL, 0x2000, NULL, 64, NULL));
  printf("cuMemcpy %d\n", (int)cuMemcpy(0x1000, 0x2000, 64));
  printf("cuMemcpyAsync %d\n", (int)cuMemcpyAsync(0x1000, 0x2000, 64, NULL));
  printf("cuMemcpyDtoD %d\n", (int)cuMemcpyDtoD(0x1000, 0x2000, 64));
  printf("cuMemcpyDtoDAsync %d\n", (int)cuMemcpyDtoDAsync(0x1000, 0x2000, 64, NULL));
  printf("cuMemcpy3DPeer %d\n", (int)cuMemcpy3DPeer(NULL));
  printf("cuMemcpy3DPeerAsync %d\n", (int)cuMemcpy3DPeerAsync(NULL, NULL));
  void* fn = (void*)&Errors;
  CUdriverProcAddressQueryResult q = CU_GET_PROC_ADDRESS_SUCCESS;
  printf("cuGetProcAddress %d %s %d\n", (int)cuGetProcAddress("cuMemcpyPeer", &fn, 12000, 0, &q),
         fn == NULL ? "null" : fn == (void*)&Errors ? "untouched" : "set", (int)q);
  return 0;
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc > 1 && strcmp(argv[1], "errors") == 0) return Errors();
  Check("cuInit", cuInit(0));
  int n = 0;
  Check("cuDeviceGetCount", cuDeviceGetCount(&n));
  if (n < 3) {
    printf("needs 3 GPUs, has %d\n", n);
    return 2;
  }
  CUcontext ctx[3];
  CUdeviceptr buf[3];
  for (int d = 0; d < 3; ++d) {
    Check("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain(&ctx[d], d));
    Check("cuCtxSetCurrent", cuCtxSetCurrent(ctx[d]));
    Check("cuMemAlloc", cuMemAlloc(&buf[d], SIZE));
    Fill(buf[d], (unsigned)d * 31u + 1u);
  }
  int can = -1;
  Check("cuDeviceCanAccessPeer", cuDeviceCanAccessPeer(&can, 0, 1));
  printf("can 0->1 %d\n", can);
  Check("cuCtxSetCurrent", cuCtxSetCurrent(ctx[0]));
  Check("cuCtxEnablePeerAccess", cuCtxEnablePeerAccess(ctx[1], 0));
  Check("cuCtxEnablePeerAccess again", cuCtxEnablePeerAccess(ctx[1], 0) == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED ? 0 : 1);

  Check("cuMemcpyPeer", cuMemcpyPeer(buf[1], ctx[1], buf[0], ctx[0], 1 * MiB));
  Same("0->1 peer", buf[1], 0, buf[0], 0, 1 * MiB);

  PeerAsyncFn peer_async = NULL;
  CUdriverProcAddressQueryResult status;
  Check("cuGetProcAddress", cuGetProcAddress("cuMemcpyPeerAsync", (void**)&peer_async, 12000,
                                             CU_GET_PROC_ADDRESS_DEFAULT, &status));
  for (int i = 0; i < 2 && peer_async != NULL; ++i)
    Check("cuMemcpyPeerAsync", peer_async(buf[1] + MiB, ctx[1], buf[0] + (size_t)i * 128 * KiB, ctx[0], 128 * KiB, NULL));
  Check("cuCtxSynchronize", cuCtxSynchronize());
  Same("0->1 peer async", buf[1], MiB, buf[0], 128 * KiB, 128 * KiB);

  Check("cuMemcpyDtoD", cuMemcpyDtoD(buf[2], buf[0], 512 * KiB));
  Same("0->2 dtod", buf[2], 0, buf[0], 0, 512 * KiB);

  CUstream s;
  Check("cuStreamCreate", cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  Check("cuMemcpyAsync", cuMemcpyAsync(buf[0] + MiB, buf[2] + MiB, 256 * KiB, s));
  Check("cuStreamSynchronize", cuStreamSynchronize(s));
  Same("2->0 async", buf[0], MiB, buf[2], MiB, 256 * KiB);

  DtoDFn dtod = NULL;
  enum cudaDriverEntryPointQueryResult rs;
  Check("cudaGetDriverEntryPointByVersion",
        cudaGetDriverEntryPointByVersion("cuMemcpyDtoD", (void**)&dtod, 12000, cudaEnableDefault, &rs));
  if (dtod != NULL) {
    Check("cuMemcpyDtoD (entry point)", dtod(buf[2] + MiB + 512 * KiB, buf[1] + 512 * KiB, 64 * KiB));
    Same("1->2 dtod", buf[2], MiB + 512 * KiB, buf[1], 512 * KiB, 64 * KiB);
  }

  Check("cudaMemcpyPeer", cudaMemcpyPeer((void*)(buf[2] + 1536 * KiB), 2, (const void*)(buf[1] + 256 * KiB), 1, 32 * KiB));
  Same("1->2 runtime", buf[2], 1536 * KiB, buf[1], 256 * KiB, 32 * KiB);

  CUDA_MEMCPY3D_PEER p;
  memset(&p, 0, sizeof p);
  p.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  p.srcDevice = buf[2];
  p.srcContext = ctx[2];
  p.srcPitch = 1024;
  p.srcHeight = 4;
  p.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  p.dstDevice = buf[1] + 1536 * KiB;
  p.dstContext = ctx[1];
  p.dstPitch = 1024;
  p.dstHeight = 4;
  p.WidthInBytes = 1024;
  p.Height = 4;
  p.Depth = 2;
  Check("cuMemcpy3DPeer", cuMemcpy3DPeer(&p));
  Same("2->1 3d", buf[1], 1536 * KiB, buf[2], 0, 8 * KiB);

  void* local = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  DtoDAsyncFn dtod_async = local ? (DtoDAsyncFn)dlsym(local, "cuMemcpyDtoDAsync_v2") : NULL;
  Check("dlsym cuMemcpyDtoDAsync_v2", dtod_async == NULL);
  if (dtod_async != NULL) {
    Check("cuMemcpyDtoDAsync (dlsym)", dtod_async(buf[0] + 1792 * KiB, buf[1], 16 * KiB, s));
    Check("cuStreamSynchronize", cuStreamSynchronize(s));
    Same("1->0 dlsym", buf[0], 1792 * KiB, buf[1], 0, 16 * KiB);
  }

  /* Errors pass through as the driver returns them. */
  printf("cuMemcpyPeer bad context %d\n", (int)cuMemcpyPeer(buf[1], NULL, buf[0], ctx[0], 4 * KiB));
  Check("cuStreamDestroy", cuStreamDestroy(s));
  for (int d = 0; d < 3; ++d) Check("cuMemFree", cuMemFree(buf[d]));
  printf("%s\n", g_failed ? "FAILED" : "done");
  return g_failed;
}
