/* A program that allocates and moves GPU memory as JAX/XLA 0.11+ does: every driver function taken
 * with dlsym on an RTLD_LOCAL libcuda handle (XLA's stubs), device memory from the virtual memory
 * API (cuMemCreate, cuMemAddressReserve, cuMemMap, cuMemSetAccess for its own device and the peers
 * it grants) and from stream-ordered pools (cuMemAllocFromPoolAsync after cuMemPoolSetAccess, as
 * XLA's cuda_async allocator; the runtime's cudaMallocAsync, as PyTorch's). No context peer access
 * is ever enabled: the grants alone open a pair. Every destination is checked byte for byte.
 *
 * Needs 3 GPUs (0-1 and 1-2 peer-capable). What it copies (driver_test.cc's Vmm suite asserts it):
 *   GPU 0 -> 1  cuMemcpyPeerAsync 256 KiB, VMM to VMM, each granted to the other      direct
 *   GPU 1 -> 0  cuMemcpyDtoDAsync_v2 128 KiB, VMM to VMM                               direct
 *   GPU 0 -> 2  cuMemcpyPeerAsync 64 KiB, VMM to VMM, nothing granted                  host-staged
 *   GPU 1 -> 2  cudaMemcpyAsync 32 KiB, pool of GPU 1 granted to 2 -> cudaMallocAsync  direct
 * With the argument `onegpu`: one VMM buffer on GPU 0, filled and read back; no pair. `alloc`: see Alloc().
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/support/driver_check.h"

static void* g_cuda = NULL;

/* XLA's way: the driver's function by its exact name from its own handle. */
static void* Sym(const char* name) {
  void* f = g_cuda ? dlsym(g_cuda, name) : NULL;
  if (f == NULL) {
    printf("no %s\n", name);
    exit(2);
  }
  return f;
}
#define DRIVER(name, type) type name##_ = (type)Sym(#name)

typedef CUresult (*InitFn)(unsigned);
typedef CUresult (*RetainFn)(CUcontext*, CUdevice);
typedef CUresult (*SetCurrentFn)(CUcontext);
typedef CUresult (*CreateFn)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*, unsigned long long);
typedef CUresult (*ReserveFn)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long);
typedef CUresult (*MapFn)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
typedef CUresult (*SetAccessFn)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t);
typedef CUresult (*UnmapFn)(CUdeviceptr, size_t);
typedef CUresult (*ReleaseFn)(CUmemGenericAllocationHandle);
typedef CUresult (*AddressFreeFn)(CUdeviceptr, size_t);
typedef CUresult (*PeerAsyncFn)(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t, CUstream);
typedef CUresult (*DtoDAsyncFn)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
typedef CUresult (*SyncFn)(void);
typedef CUresult (*DefaultPoolFn)(CUmemoryPool*, CUdevice);
typedef CUresult (*PoolSetAccessFn)(CUmemoryPool, const CUmemAccessDesc*, size_t);
typedef CUresult (*AllocFromPoolFn)(CUdeviceptr*, size_t, CUmemoryPool, CUstream);
typedef CUresult (*FreeAsyncFn)(CUdeviceptr, CUstream);

struct Vmm {
  CUdeviceptr ptr;
  CUmemGenericAllocationHandle handle;
};

static CUmemAccessDesc Access(int device) {
  CUmemAccessDesc d;
  memset(&d, 0, sizeof d);
  d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  d.location.id = device;
  d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return d;
}

/* SIZE bytes of `device`, readable and writable by it and by `peer` (-1: none), as XLA maps them. */
static struct Vmm Map(int device, int peer) {
  DRIVER(cuMemCreate, CreateFn);
  DRIVER(cuMemAddressReserve, ReserveFn);
  DRIVER(cuMemMap, MapFn);
  DRIVER(cuMemSetAccess, SetAccessFn);
  struct Vmm v = {0, 0};
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  Check("cuMemCreate", cuMemCreate_(&v.handle, SIZE, &prop, 0));
  Check("cuMemAddressReserve", cuMemAddressReserve_(&v.ptr, SIZE, 0, 0, 0));
  Check("cuMemMap", cuMemMap_(v.ptr, SIZE, 0, v.handle, 0));
  CUmemAccessDesc d[2] = {Access(device), Access(peer)};
  Check("cuMemSetAccess", cuMemSetAccess_(v.ptr, SIZE, d, peer >= 0 ? 2 : 1));
  return v;
}

static void Unmap(struct Vmm v) {
  DRIVER(cuMemUnmap, UnmapFn);
  DRIVER(cuMemRelease, ReleaseFn);
  DRIVER(cuMemAddressFree, AddressFreeFn);
  Check("cuMemUnmap", cuMemUnmap_(v.ptr, SIZE));
  Check("cuMemRelease", cuMemRelease_(v.handle));
  Check("cuMemAddressFree", cuMemAddressFree_(v.ptr, SIZE));
}

static void Fill(CUdeviceptr p, unsigned seed) {
  DRIVER(cuMemcpyHtoD_v2, HtoDFn);
  FillWith(cuMemcpyHtoD_v2_, p, seed);
}

static void Same(const char* what, CUdeviceptr dst, CUdeviceptr src, size_t n) {
  DRIVER(cuMemcpyDtoH_v2, DtoHFn);
  SameWith(cuMemcpyDtoH_v2_, what, dst, src, n);
}

static int OneGpu(void) {
  DRIVER(cuDevicePrimaryCtxRetain, RetainFn);
  DRIVER(cuCtxSetCurrent, SetCurrentFn);
  CUcontext ctx;
  Check("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain_(&ctx, 0));
  Check("cuCtxSetCurrent", cuCtxSetCurrent_(ctx));
  struct Vmm v = Map(0, -1);
  Fill(v.ptr, 5);
  Same("round trip", v.ptr, v.ptr, SIZE);
  Unmap(v);
  printf("%s\n", g_failed ? "FAILED" : "done");
  return g_failed;
}

/* `alloc`: cuMemAlloc and cuMemFree only, as a runtime linked statically into a module (CuPy's)
 * allocates through the driver: the process used CUDA. */
typedef CUresult (*AllocFn)(CUdeviceptr*, size_t);
typedef CUresult (*FreeFn)(CUdeviceptr);
static int Alloc(void) {
  DRIVER(cuDevicePrimaryCtxRetain, RetainFn);
  DRIVER(cuCtxSetCurrent, SetCurrentFn);
  DRIVER(cuMemAlloc_v2, AllocFn);
  DRIVER(cuMemFree_v2, FreeFn);
  CUcontext ctx;
  CUdeviceptr p = 0;
  Check("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain_(&ctx, 0));
  Check("cuCtxSetCurrent", cuCtxSetCurrent_(ctx));
  Check("cuMemAlloc", cuMemAlloc_v2_(&p, SIZE));
  Check("cuMemFree", cuMemFree_v2_(p));
  printf("%s\n", g_failed ? "FAILED" : "done");
  return g_failed;
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  g_cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  DRIVER(cuInit, InitFn);
  Check("cuInit", cuInit_(0));
  if (argc > 1 && strcmp(argv[1], "onegpu") == 0) return OneGpu();
  if (argc > 1 && strcmp(argv[1], "alloc") == 0) return Alloc();
  DRIVER(cuDevicePrimaryCtxRetain, RetainFn);
  DRIVER(cuCtxSetCurrent, SetCurrentFn);
  DRIVER(cuMemcpyPeerAsync, PeerAsyncFn);
  DRIVER(cuMemcpyDtoDAsync_v2, DtoDAsyncFn);
  DRIVER(cuCtxSynchronize, SyncFn);
  CUcontext ctx[3];
  struct Vmm v[3];
  for (int d = 0; d < 3; ++d) {
    Check("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain_(&ctx[d], d));
    Check("cuCtxSetCurrent", cuCtxSetCurrent_(ctx[d]));
    v[d] = Map(d, d == 0 ? 1 : d == 1 ? 0 : -1);
    Fill(v[d].ptr, 17u * (unsigned)d + 3u);
  }
  Check("cuCtxSetCurrent", cuCtxSetCurrent_(ctx[0]));
  Check("cuMemcpyPeerAsync 0->1", cuMemcpyPeerAsync_(v[1].ptr, ctx[1], v[0].ptr, ctx[0], 256 * KiB, NULL));
  Check("cuMemcpyDtoDAsync 1->0", cuMemcpyDtoDAsync_v2_(v[0].ptr + MiB, v[1].ptr + MiB, 128 * KiB, NULL));
  Check("cuMemcpyPeerAsync 0->2", cuMemcpyPeerAsync_(v[2].ptr, ctx[2], v[0].ptr + 512 * KiB, ctx[0], 64 * KiB, NULL));
  Check("cuCtxSynchronize", cuCtxSynchronize_());
  Same("0->1", v[1].ptr, v[0].ptr, 256 * KiB);
  Same("1->0", v[0].ptr + MiB, v[1].ptr + MiB, 128 * KiB);
  Same("0->2", v[2].ptr, v[0].ptr + 512 * KiB, 64 * KiB);

  /* Pools: GPU 1's default pool granted to GPU 2 (XLA's cuda_async), GPU 2's memory from the
   * runtime's cudaMallocAsync (PyTorch's cudaMallocAsync backend). */
  DRIVER(cuDeviceGetDefaultMemPool, DefaultPoolFn);
  DRIVER(cuMemPoolSetAccess, PoolSetAccessFn);
  DRIVER(cuMemAllocFromPoolAsync, AllocFromPoolFn);
  DRIVER(cuMemFreeAsync, FreeAsyncFn);
  CUmemoryPool pool1;
  Check("cuDeviceGetDefaultMemPool", cuDeviceGetDefaultMemPool_(&pool1, 1));
  CUmemAccessDesc to2 = Access(2);
  Check("cuMemPoolSetAccess", cuMemPoolSetAccess_(pool1, &to2, 1));
  CUdeviceptr from_pool = 0;
  Check("cuCtxSetCurrent", cuCtxSetCurrent_(ctx[1]));
  Check("cuMemAllocFromPoolAsync", cuMemAllocFromPoolAsync_(&from_pool, SIZE, pool1, NULL));
  Check("cuMemcpyDtoDAsync fill", cuMemcpyDtoDAsync_v2_(from_pool, v[1].ptr, SIZE, NULL));
  Check("cudaSetDevice", cudaSetDevice(2));
  void* on2 = NULL;
  Check("cudaMallocAsync", cudaMallocAsync(&on2, SIZE, NULL));
  Check("cudaMemcpyAsync 1->2", cudaMemcpyAsync(on2, (void*)from_pool, 32 * KiB, cudaMemcpyDefault, NULL));
  Check("cudaDeviceSynchronize", cudaDeviceSynchronize());
  Same("1->2", (CUdeviceptr)on2, from_pool, 32 * KiB);
  Check("cudaFreeAsync", cudaFreeAsync(on2, NULL));
  Check("cudaDeviceSynchronize", cudaDeviceSynchronize());
  Check("cuCtxSetCurrent", cuCtxSetCurrent_(ctx[1]));
  Check("cuMemFreeAsync", cuMemFreeAsync_(from_pool, NULL));
  Check("cuCtxSynchronize", cuCtxSynchronize_());
  for (int d = 0; d < 3; ++d) Unmap(v[d]);
  printf("%s\n", g_failed ? "FAILED" : "done");
  return g_failed;
}
