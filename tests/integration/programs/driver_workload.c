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
 *
 * With the argument `graph`, see Graphs(): copies captured into CUDA graphs through the driver;
 * `nodes`, see Nodes(): graphs built node by node; `tograph`, see ToGraph(): captures into a graph
 * the program made; `altered`, see Altered(): recorded nodes changed afterwards; `addnode`, see
 * AddNodes(): the generic node calls.
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/support/driver_check.h"

static void Fill(CUdeviceptr p, unsigned seed) { FillWith(cuMemcpyHtoD, p, seed); }
/* Whether [dst+doff, +n) equals [src+soff, +n). */
static void Same(const char* what, CUdeviceptr dst, size_t doff, CUdeviceptr src, size_t soff, size_t n) {
  SameWith(cuMemcpyDtoH, what, dst + doff, src + soff, n);
}

/* cuInit, then each of 3 GPUs' primary context and a SIZE buffer filled with the pattern of seed
 * d * mul + add; leaves GPU 0's context current (driver and runtime: cudaSetDevice(0)). */
static void SetUp3(CUcontext ctx[3], CUdeviceptr buf[3], unsigned mul, unsigned add) {
  Check("cuInit", cuInit(0));
  for (int d = 0; d < 3; ++d) {
    Check("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain(&ctx[d], d));
    Check("cuCtxSetCurrent", cuCtxSetCurrent(ctx[d]));
    Check("cuMemAlloc", cuMemAlloc(&buf[d], SIZE));
    Fill(buf[d], (unsigned)d * mul + add);
  }
  Check("cuCtxSetCurrent", cuCtxSetCurrent(ctx[0]));
  Check("cudaSetDevice", cudaSetDevice(0));
}

/* Frees SetUp3's buffers and says how the run went. */
static int Done(CUdeviceptr buf[3]) {
  for (int d = 0; d < 3; ++d) Check("cuMemFree", cuMemFree(buf[d]));
  printf("%s\n", g_failed ? "FAILED" : "done");
  return g_failed;
}

typedef CUresult (*PeerAsyncFn)(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t, CUstream);
typedef CUresult (*DtoDFn)(CUdeviceptr, CUdeviceptr, size_t);
typedef CUresult (*DtoDAsyncFn)(CUdeviceptr, CUdeviceptr, size_t, CUstream);

/* The legacy five-argument instantiate, still exported (cuda.h now names cuGraphInstantiate the
 * three-argument WithFlags form). */
CUresult cuGraphInstantiate_v2(CUgraphExec* exec, CUgraph graph, CUgraphNode* error_node, char* log, size_t log_size);
/* CUDA 12.2's generic node call keeps the plain name (cuda.h gives it to the 12.3 form, _v2). */
CUresult cuGraphAddNode122(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, CUgraphNodeParams*) __asm__("cuGraphAddNode");

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
  /* Memory the program maps or takes from pools: out-parameters must stay as the driver left them. */
  CUmemGenericAllocationHandle h = 7;
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  printf("cuMemCreate %d %llu\n", (int)cuMemCreate(&h, 2 << 20, &prop, 0), (unsigned long long)h);
  printf("cuMemMap %d\n", (int)cuMemMap(0x200000, 2 << 20, 0, h, 0));
  printf("cuMemUnmap %d\n", (int)cuMemUnmap(0x200000, 2 << 20));
  CUmemAccessDesc access;
  memset(&access, 0, sizeof access);
  printf("cuMemSetAccess %d\n", (int)cuMemSetAccess(0x200000, 2 << 20, &access, 1));
  CUdeviceptr a = 9;
  printf("cuMemAllocAsync %d %llu\n", (int)cuMemAllocAsync(&a, 4096, NULL), (unsigned long long)a);
  CUmemoryPool pool = (CUmemoryPool)&p;
  printf("cuMemAllocFromPoolAsync %d %llu\n", (int)cuMemAllocFromPoolAsync(&a, 4096, pool, NULL), (unsigned long long)a);
  printf("cuMemFreeAsync %d\n", (int)cuMemFreeAsync(a, NULL));
  CUmemPoolProps pool_props;
  memset(&pool_props, 0, sizeof pool_props);
  printf("cuMemPoolCreate %d %s\n", (int)cuMemPoolCreate(&pool, &pool_props), pool == (CUmemoryPool)&p ? "untouched" : "set");
  printf("cuMemPoolDestroy %d\n", (int)cuMemPoolDestroy(NULL));
  printf("cuDeviceGetDefaultMemPool %d\n", (int)cuDeviceGetDefaultMemPool(&pool, 0));
  printf("cuDeviceGetMemPool %d\n", (int)cuDeviceGetMemPool(&pool, 0));
  printf("cuMemPoolSetAccess %d\n", (int)cuMemPoolSetAccess(NULL, &access, 1));
  CUstream st = (CUstream)&p;
  printf("cuStreamCreate %d %s\n", (int)cuStreamCreate(&st, 0), st == (CUstream)&p ? "untouched" : "set");
  printf("cuStreamCreateWithPriority %d\n", (int)cuStreamCreateWithPriority(&st, 0, 0));
  printf("cuStreamDestroy %d\n", (int)cuStreamDestroy(NULL));
  printf("cuStreamBeginCapture %d\n", (int)cuStreamBeginCapture(NULL, CU_STREAM_CAPTURE_MODE_GLOBAL));
  printf("cuStreamBeginCaptureToGraph %d\n",
         (int)cuStreamBeginCaptureToGraph(NULL, NULL, NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_GLOBAL));
  printf("cuGraphExecMemcpyNodeSetParams %d\n", (int)cuGraphExecMemcpyNodeSetParams(NULL, NULL, NULL, NULL));
  printf("cuGraphExecNodeSetParams %d\n", (int)cuGraphExecNodeSetParams(NULL, NULL, NULL));
  printf("cuGraphExecChildGraphNodeSetParams %d\n", (int)cuGraphExecChildGraphNodeSetParams(NULL, NULL, NULL));
  printf("cuGraphNodeSetEnabled %d\n", (int)cuGraphNodeSetEnabled(NULL, NULL, 0));
  printf("cuGraphMemcpyNodeSetParams %d\n", (int)cuGraphMemcpyNodeSetParams(NULL, NULL));
  printf("cuGraphNodeSetParams %d\n", (int)cuGraphNodeSetParams(NULL, NULL));
  printf("cuGraphDestroyNode %d\n", (int)cuGraphDestroyNode(NULL));
  printf("cuGraphAddNode %d\n", (int)cuGraphAddNode(NULL, NULL, NULL, NULL, 0, NULL));
  printf("cuGraphAddNode (12.2) %d\n", (int)cuGraphAddNode122(NULL, NULL, NULL, 0, NULL));
  CUgraph g = (CUgraph)&p;
  printf("cuStreamEndCapture %d %s\n", (int)cuStreamEndCapture(NULL, &g), g == (CUgraph)&p ? "untouched" : "set");
  CUgraphExec x = (CUgraphExec)&p;
  printf("cuGraphInstantiate %d %s\n", (int)cuGraphInstantiate(&x, NULL, 0), x == (CUgraphExec)&p ? "untouched" : "set");
  printf("cuGraphInstantiate_v2 %d\n", (int)cuGraphInstantiate_v2(&x, NULL, NULL, NULL, 0));
  CUDA_GRAPH_INSTANTIATE_PARAMS ip;
  memset(&ip, 0, sizeof ip);
  printf("cuGraphInstantiateWithParams %d\n", (int)cuGraphInstantiateWithParams(&x, NULL, &ip));
  CUgraphExecUpdateResultInfo info;
  printf("cuGraphExecUpdate %d\n", (int)cuGraphExecUpdate(NULL, NULL, &info));
  printf("cuGraphExecDestroy %d\n", (int)cuGraphExecDestroy(NULL));
  printf("cuGraphDestroy %d\n", (int)cuGraphDestroy(NULL));
  printf("cuGraphLaunch %d\n", (int)cuGraphLaunch(NULL, NULL));
  void* fn = (void*)&Errors;
  CUdriverProcAddressQueryResult q = CU_GET_PROC_ADDRESS_SUCCESS;
  printf("cuGetProcAddress %d %s %d\n", (int)cuGetProcAddress("cuMemcpyPeer", &fn, 12000, 0, &q),
         fn == NULL ? "null" : fn == (void*)&Errors ? "untouched" : "set", (int)q);
  return 0;
}

typedef CUresult (*GraphLaunchFn)(CUgraphExec, CUstream);

/* `graph` (3 GPUs): copies captured into graphs through the driver and launched many times, as
 * XLA's command buffers do. What each launch moves (driver_test.cc asserts it, times the launches):
 *   A  driver capture (cuStreamBeginCapture_v2) on a driver stream: cuMemcpyPeerAsync 0->1 64 KiB,
 *      cuMemcpyDtoDAsync 1->2 32 KiB; instantiated with cuGraphInstantiateWithFlags; launched 4 times
 *      with cuGraphLaunch and once through cuGetProcAddress("cuGraphLaunch", per-thread flag): 5.
 *   B  runtime capture (cudaStreamBeginCapture) on the same kind of stream: a driver cuMemcpyAsync
 *      2->0 16 KiB and a runtime cudaMemcpyPeerAsync 0->2 8 KiB; cudaGraphInstantiate,
 *      cudaGraphLaunch 3 times.
 *   C  driver capture: a runtime cudaMemcpyPeerAsync 1->0 4 KiB; the legacy cuGraphInstantiate_v2,
 *      cuGraphLaunch twice, then cuGraphExecUpdate_v2 from a second capture of the same shape
 *      (1->0 2 KiB) and one more launch.
 * Then a capture invalidated (cuStreamQuery on a capturing stream is illegal) ends with no
 * graph, and everything is destroyed. Each destination is checked after the launches. */
static int Graphs(void) {
  CUcontext ctx[3];
  CUdeviceptr buf[3];
  SetUp3(ctx, buf, 17u, 3u);
  CUstream s;
  Check("cuStreamCreate", cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

  /* A */
  CUgraph ga = NULL;
  CUgraphExec xa = NULL;
  Check("cuStreamBeginCapture", cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  Check("cuMemcpyPeerAsync (captured)", cuMemcpyPeerAsync(buf[1], ctx[1], buf[0], ctx[0], 64 * KiB, s));
  Check("cuMemcpyDtoDAsync (captured)", cuMemcpyDtoDAsync(buf[2], buf[1] + 64 * KiB, 32 * KiB, s));
  Check("cuStreamEndCapture", cuStreamEndCapture(s, &ga));
  Check("cuGraphInstantiate", cuGraphInstantiate(&xa, ga, 0));
  for (int i = 0; i < 4; ++i) Check("cuGraphLaunch", cuGraphLaunch(xa, s));
  GraphLaunchFn launch = NULL;
  CUdriverProcAddressQueryResult q;
  Check("cuGetProcAddress cuGraphLaunch",
        cuGetProcAddress("cuGraphLaunch", (void**)&launch, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &q));
  Check("cuGraphLaunch (entry point)", launch != NULL ? launch(xa, s) : 1);
  Check("cuStreamSynchronize", cuStreamSynchronize(s));
  Same("A 0->1", buf[1], 0, buf[0], 0, 64 * KiB);
  Same("A 1->2", buf[2], 0, buf[1], 64 * KiB, 32 * KiB);

  /* B */
  CUstream s2;
  Check("cuStreamCreate", cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  cudaGraph_t gb = NULL;
  cudaGraphExec_t xb = NULL;
  Check("cudaStreamBeginCapture", cudaStreamBeginCapture((cudaStream_t)s2, cudaStreamCaptureModeThreadLocal));
  Check("cuMemcpyAsync (captured)", cuMemcpyAsync(buf[0] + MiB, buf[2] + MiB, 16 * KiB, s2));
  Check("cudaMemcpyPeerAsync (captured)",
        cudaMemcpyPeerAsync((void*)(buf[2] + 1280 * KiB), 2, (const void*)(buf[0] + 1280 * KiB), 0, 8 * KiB,
                            (cudaStream_t)s2));
  Check("cudaStreamEndCapture", cudaStreamEndCapture((cudaStream_t)s2, &gb));
  Check("cudaGraphInstantiate", cudaGraphInstantiate(&xb, gb, 0));
  for (int i = 0; i < 3; ++i) Check("cudaGraphLaunch", cudaGraphLaunch(xb, (cudaStream_t)s2));
  Check("cuStreamSynchronize", cuStreamSynchronize(s2));
  Same("B 2->0", buf[0], MiB, buf[2], MiB, 16 * KiB);
  Same("B 0->2", buf[2], 1280 * KiB, buf[0], 1280 * KiB, 8 * KiB);

  /* C */
  CUgraph gc = NULL, gc2 = NULL;
  CUgraphExec xc = NULL;
  Check("cuStreamBeginCapture", cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
  Check("cudaMemcpyPeerAsync (captured)",
        cudaMemcpyPeerAsync((void*)(buf[0] + 1536 * KiB), 0, (const void*)(buf[1] + 1536 * KiB), 1, 4 * KiB,
                            (cudaStream_t)s));
  Check("cuStreamEndCapture", cuStreamEndCapture(s, &gc));
  CUgraphNode error_node = (CUgraphNode)&error_node;
  char log[16] = "untouched";
  Check("cuGraphInstantiate_v2", cuGraphInstantiate_v2(&xc, gc, &error_node, log, sizeof log));
  printf("instantiate error node %s log '%s'\n", error_node == NULL ? "null" : "set", log);
  for (int i = 0; i < 2; ++i) Check("cuGraphLaunch", cuGraphLaunch(xc, s));
  Check("cuStreamBeginCapture", cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  Check("cudaMemcpyPeerAsync (captured)",
        cudaMemcpyPeerAsync((void*)(buf[0] + 1600 * KiB), 0, (const void*)(buf[1] + 1600 * KiB), 1, 2 * KiB,
                            (cudaStream_t)s));
  Check("cuStreamEndCapture", cuStreamEndCapture(s, &gc2));
  CUgraphExecUpdateResultInfo info;
  Check("cuGraphExecUpdate", cuGraphExecUpdate(xc, gc2, &info));
  printf("update result %d\n", (int)info.result);
  Check("cuGraphLaunch", cuGraphLaunch(xc, s));
  Check("cuStreamSynchronize", cuStreamSynchronize(s));
  Same("C 1->0", buf[0], 1536 * KiB, buf[1], 1536 * KiB, 4 * KiB);
  Same("C' 1->0", buf[0], 1600 * KiB, buf[1], 1600 * KiB, 2 * KiB);

  /* An invalidated capture: querying a capturing stream is illegal; the capture ends without a graph. */
  CUgraph gd = (CUgraph)&gd;
  Check("cuStreamBeginCapture", cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
  Check("cuMemcpyPeerAsync (captured, then invalidated)", cuMemcpyPeerAsync(buf[2], ctx[2], buf[0], ctx[0], 4 * KiB, s));
  printf("cuStreamQuery while capturing %d\n", (int)cuStreamQuery(s));
  int ended = (int)cuStreamEndCapture(s, &gd);
  printf("cuStreamEndCapture invalidated %d %s\n", ended, gd == NULL ? "null" : "set");

  Check("cuGraphExecDestroy", cuGraphExecDestroy(xa));
  Check("cudaGraphExecDestroy", cudaGraphExecDestroy(xb));
  Check("cuGraphExecDestroy", cuGraphExecDestroy(xc));
  Check("cuGraphDestroy", cuGraphDestroy(ga));
  Check("cudaGraphDestroy", cudaGraphDestroy(gb));
  Check("cuGraphDestroy", cuGraphDestroy(gc));
  Check("cuGraphDestroy", cuGraphDestroy(gc2));
  Check("cuStreamDestroy", cuStreamDestroy(s));
  Check("cuStreamDestroy", cuStreamDestroy(s2));
  return Done(buf);
}

/* `nodes` (3 GPUs): graphs built node by node, through both APIs. What each launch moves
 * (driver_test.cc asserts the totals):
 *   G1  cudaGraphCreate; a host->device 1D node (not GPU to GPU); cudaGraphAddMemcpyNode1D 0->1 8 KiB;
 *       cudaGraphAddMemcpyNode (3D parameters, pitched, 1024 x 4) 2->1 4 KiB. Exec x1, launched twice.
 *       Then a 1D node 0->2 2 KiB is added (x1 keeps the two copies it was made with); exec x2 of
 *       the grown graph launched 3 times, x1 once more.
 *   G2  cudaGraphClone of G1 (its three copies), instantiated and launched once.
 *   G3  cuGraphCreate; cuGraphAddMemcpyNode 1->0 16 KiB; cuGraphAddChildGraphNode with G1 as the
 *       child twice (its three copies, twice); cuGraphInstantiate, cuGraphLaunch twice.
 *   G4  cuGraphClone of G2 (a clone of a clone), launched once.
 *   G5  a capture into which G2's exec is launched (cudaGraphLaunch on the capturing stream: the
 *       new graph holds G2's work), instantiated and launched once.
 * Totals: 0->1 13 x 8 KiB, 2->1 13 x 4 KiB, 0->2 10 x 2 KiB, 1->0 2 x 16 KiB. */
static int Nodes(void) {
  CUcontext ctx[3];
  CUdeviceptr buf[3];
  SetUp3(ctx, buf, 23u, 5u);
  CUstream s;
  Check("cuStreamCreate", cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  static unsigned char host[KiB];
  memset(host, 9, sizeof host);

  /* G1 */
  cudaGraph_t g1 = NULL;
  cudaGraphNode_t n = NULL;
  Check("cudaGraphCreate", cudaGraphCreate(&g1, 0));
  Check("cudaGraphAddMemcpyNode1D h2d", cudaGraphAddMemcpyNode1D(&n, g1, NULL, 0, (void*)(buf[0] + 1900 * KiB), host,
                                                                 sizeof host, cudaMemcpyHostToDevice));
  Check("cudaGraphAddMemcpyNode1D", cudaGraphAddMemcpyNode1D(&n, g1, NULL, 0, (void*)buf[1], (const void*)buf[0],
                                                             8 * KiB, cudaMemcpyDefault));
  struct cudaMemcpy3DParms p3;
  memset(&p3, 0, sizeof p3);
  p3.srcPtr.ptr = (void*)(buf[2] + 64 * KiB);
  p3.dstPtr.ptr = (void*)(buf[1] + 64 * KiB);
  p3.srcPtr.pitch = p3.dstPtr.pitch = 1024;
  p3.srcPtr.xsize = p3.dstPtr.xsize = 1024;
  p3.srcPtr.ysize = p3.dstPtr.ysize = 4;
  p3.extent.width = 1024;
  p3.extent.height = 4;
  p3.extent.depth = 1;
  p3.kind = cudaMemcpyDeviceToDevice;
  Check("cudaGraphAddMemcpyNode", cudaGraphAddMemcpyNode(&n, g1, NULL, 0, &p3));
  cudaGraphExec_t x1 = NULL, x2 = NULL;
  Check("cudaGraphInstantiate", cudaGraphInstantiate(&x1, g1, 0));
  for (int i = 0; i < 2; ++i) Check("cudaGraphLaunch", cudaGraphLaunch(x1, (cudaStream_t)s));
  Check("cudaGraphAddMemcpyNode1D (after instantiating)",
        cudaGraphAddMemcpyNode1D(&n, g1, NULL, 0, (void*)(buf[2] + 128 * KiB), (const void*)(buf[0] + 128 * KiB),
                                 2 * KiB, cudaMemcpyDeviceToDevice));
  Check("cudaGraphInstantiate", cudaGraphInstantiate(&x2, g1, 0));
  for (int i = 0; i < 3; ++i) Check("cudaGraphLaunch", cudaGraphLaunch(x2, (cudaStream_t)s));
  Check("cudaGraphLaunch (the first exec)", cudaGraphLaunch(x1, (cudaStream_t)s));
  Check("cuStreamSynchronize", cuStreamSynchronize(s));
  Same("G1 0->1", buf[1], 0, buf[0], 0, 8 * KiB);
  Same("G1 2->1", buf[1], 64 * KiB, buf[2], 64 * KiB, 4 * KiB);
  Same("G1 0->2", buf[2], 128 * KiB, buf[0], 128 * KiB, 2 * KiB);

  /* G2 */
  cudaGraph_t g2 = NULL;
  cudaGraphExec_t x3 = NULL;
  Check("cudaGraphClone", cudaGraphClone(&g2, g1));
  Check("cudaGraphInstantiate", cudaGraphInstantiate(&x3, g2, 0));
  Check("cudaGraphLaunch", cudaGraphLaunch(x3, (cudaStream_t)s));

  /* G3 */
  CUgraph g3 = NULL;
  CUgraphNode cn = NULL;
  Check("cuGraphCreate", cuGraphCreate(&g3, 0));
  CUDA_MEMCPY3D c3;
  memset(&c3, 0, sizeof c3);
  c3.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  c3.srcDevice = buf[1] + 256 * KiB;
  c3.srcPitch = 16 * KiB;
  c3.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c3.dstDevice = buf[0] + 256 * KiB;
  c3.dstPitch = 16 * KiB;
  c3.WidthInBytes = 16 * KiB;
  c3.Height = 1;
  c3.Depth = 1;
  Check("cuGraphAddMemcpyNode", cuGraphAddMemcpyNode(&cn, g3, NULL, 0, &c3, ctx[0]));
  Check("cuGraphAddChildGraphNode", cuGraphAddChildGraphNode(&cn, g3, NULL, 0, (CUgraph)g1));
  Check("cuGraphAddChildGraphNode (again)", cuGraphAddChildGraphNode(&cn, g3, NULL, 0, (CUgraph)g1));
  CUgraphExec x4 = NULL;
  Check("cuGraphInstantiate", cuGraphInstantiate(&x4, g3, 0));
  for (int i = 0; i < 2; ++i) Check("cuGraphLaunch", cuGraphLaunch(x4, s));
  Check("cuStreamSynchronize", cuStreamSynchronize(s));
  Same("G3 1->0", buf[0], 256 * KiB, buf[1], 256 * KiB, 16 * KiB);

  /* G4: a clone of the clone; G5: a capture into which G2's exec is launched. */
  CUgraph g4 = NULL, g5 = NULL;
  CUgraphExec x5 = NULL, x6 = NULL;
  Check("cuGraphClone", cuGraphClone(&g4, (CUgraph)g2));
  Check("cuGraphInstantiate", cuGraphInstantiate(&x5, g4, 0));
  Check("cuGraphLaunch", cuGraphLaunch(x5, s));
  Check("cuStreamBeginCapture", cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  Check("cudaGraphLaunch (captured)", cudaGraphLaunch(x3, (cudaStream_t)s));
  Check("cuStreamEndCapture", cuStreamEndCapture(s, &g5));
  Check("cuGraphInstantiate", cuGraphInstantiate(&x6, g5, 0));
  Check("cuGraphLaunch", cuGraphLaunch(x6, s));
  Check("cuStreamSynchronize", cuStreamSynchronize(s));
  Check("cuGraphExecDestroy", cuGraphExecDestroy(x5));
  Check("cuGraphExecDestroy", cuGraphExecDestroy(x6));
  Check("cuGraphDestroy", cuGraphDestroy(g4));
  Check("cuGraphDestroy", cuGraphDestroy(g5));

  Check("cudaGraphExecDestroy", cudaGraphExecDestroy(x1));
  Check("cudaGraphExecDestroy", cudaGraphExecDestroy(x2));
  Check("cudaGraphExecDestroy", cudaGraphExecDestroy(x3));
  Check("cuGraphExecDestroy", cuGraphExecDestroy(x4));
  Check("cudaGraphDestroy", cudaGraphDestroy(g1));
  Check("cudaGraphDestroy", cudaGraphDestroy(g2));
  Check("cuGraphDestroy", cuGraphDestroy(g3));
  Check("cuStreamDestroy", cuStreamDestroy(s));
  return Done(buf);
}

/* `tograph` (3 GPUs): captures that append to a graph the program made (cudaStreamBeginCaptureToGraph,
 * CUDA 12.3+), through both APIs. What each launch moves (driver_test.cc asserts the totals):
 *   G   cudaGraphCreate; a 1D node 0->1 8 KiB; then a runtime capture into G
 *       (cudaStreamBeginCaptureToGraph) of a cudaMemcpyAsync 1->2 4 KiB: the end call returns G.
 *       Exec x1 (both copies), launched 3 times.
 *   G'  a driver capture into G again (cuStreamBeginCaptureToGraph, x1 keeps what it was made with)
 *       of a cuMemcpyAsync 2->0 2 KiB; exec x2 (three copies) launched twice, x1 once more.
 *   H   a capture into a new empty graph H, invalidated (cuStreamQuery while capturing): its copy
 *       0->2 never runs; H is still the program's graph (empty) and is destroyed.
 * Totals: 0->1 6 x 8 KiB, 1->2 6 x 4 KiB, 2->0 2 x 2 KiB. */
static int ToGraph(void) {
  CUcontext ctx[3];
  CUdeviceptr buf[3];
  SetUp3(ctx, buf, 29u, 7u);
  cudaStream_t s;
  Check("cudaStreamCreateWithFlags", cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  cudaGraph_t g = NULL, ended = NULL;
  cudaGraphNode_t n = NULL;
  Check("cudaGraphCreate", cudaGraphCreate(&g, 0));
  Check("cudaGraphAddMemcpyNode1D", cudaGraphAddMemcpyNode1D(&n, g, NULL, 0, (void*)buf[1], (const void*)buf[0],
                                                             8 * KiB, cudaMemcpyDefault));
  Check("cudaStreamBeginCaptureToGraph", cudaStreamBeginCaptureToGraph(s, g, &n, NULL, 1, cudaStreamCaptureModeGlobal));
  Check("cudaMemcpyAsync (captured)",
        cudaMemcpyAsync((void*)(buf[2] + 64 * KiB), (const void*)(buf[1] + 64 * KiB), 4 * KiB, cudaMemcpyDefault, s));
  Check("cudaStreamEndCapture", cudaStreamEndCapture(s, &ended));
  printf("end capture returned %s\n", ended == g ? "the program's graph" : "ANOTHER GRAPH");
  cudaGraphExec_t x1 = NULL, x2 = NULL;
  Check("cudaGraphInstantiate", cudaGraphInstantiate(&x1, g, 0));
  for (int i = 0; i < 3; ++i) Check("cudaGraphLaunch", cudaGraphLaunch(x1, s));
  Check("cudaStreamSynchronize", cudaStreamSynchronize(s));
  Same("G 0->1", buf[1], 0, buf[0], 0, 8 * KiB);
  Same("G 1->2", buf[2], 64 * KiB, buf[1], 64 * KiB, 4 * KiB);

  CUgraph cg = NULL;
  Check("cuStreamBeginCaptureToGraph",
        cuStreamBeginCaptureToGraph((CUstream)s, (CUgraph)g, NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_RELAXED));
  Check("cuMemcpyAsync (captured)", cuMemcpyAsync(buf[0] + 128 * KiB, buf[2] + 128 * KiB, 2 * KiB, (CUstream)s));
  Check("cuStreamEndCapture", cuStreamEndCapture((CUstream)s, &cg));
  printf("end capture returned %s\n", (cudaGraph_t)cg == g ? "the program's graph" : "ANOTHER GRAPH");
  Check("cudaGraphInstantiate", cudaGraphInstantiate(&x2, g, 0));
  for (int i = 0; i < 2; ++i) Check("cudaGraphLaunch", cudaGraphLaunch(x2, s));
  Check("cudaGraphLaunch (the first exec)", cudaGraphLaunch(x1, s));
  Check("cudaStreamSynchronize", cudaStreamSynchronize(s));
  Same("G' 2->0", buf[0], 128 * KiB, buf[2], 128 * KiB, 2 * KiB);

  cudaGraph_t h = NULL, hended = (cudaGraph_t)&hended;
  Check("cudaGraphCreate", cudaGraphCreate(&h, 0));
  Check("cudaStreamBeginCaptureToGraph", cudaStreamBeginCaptureToGraph(s, h, NULL, NULL, 0, cudaStreamCaptureModeGlobal));
  Check("cudaMemcpyAsync (captured, then invalidated)",
        cudaMemcpyAsync((void*)(buf[2] + 256 * KiB), (const void*)(buf[0] + 256 * KiB), 4 * KiB, cudaMemcpyDefault, s));
  printf("cuStreamQuery while capturing %d\n", (int)cuStreamQuery((CUstream)s));
  int r = (int)cudaStreamEndCapture(s, &hended);
  printf("cudaStreamEndCapture invalidated %d %s\n", r, hended == NULL ? "null" : "set");
  size_t count = 99;
  Check("cudaGraphGetNodes", cudaGraphGetNodes(h, NULL, &count));
  printf("H keeps %zu nodes\n", count);

  Check("cudaGraphExecDestroy", cudaGraphExecDestroy(x1));
  Check("cudaGraphExecDestroy", cudaGraphExecDestroy(x2));
  Check("cudaGraphDestroy", cudaGraphDestroy(g));
  Check("cudaGraphDestroy", cudaGraphDestroy(h));
  Check("cudaStreamDestroy", cudaStreamDestroy(s));
  return Done(buf);
}

/* `altered` (3 GPUs): nodes of a recorded graph changed after it was recorded, through both APIs.
 * G holds three copy nodes: 1D 0->1 8 KiB (n1), 1D 1->2 4 KiB (n2), cuGraphAddMemcpyNode 2->0 2 KiB
 * (n3). Exec x is launched twice as made, then, changed in place, once after each of:
 * cudaGraphExecMemcpyNodeSetParams1D (n1: 16 KiB), cudaGraphNodeSetEnabled (n2 off),
 * cuGraphExecMemcpyNodeSetParams (n3: 1 KiB), cuGraphNodeSetEnabled (n2 on again): 6 launches.
 * Then G's own nodes: cudaGraphMemcpyNodeSetParams1D (n1), cuGraphMemcpyNodeSetParams (n3),
 * cudaGraphDestroyNode (n2); exec y of the changed G launched once. The replays p2ptrace counts stay
 * the recorded copies (0->1 7 x 8 KiB, 1->2 7 x 4 KiB, 2->0 7 x 2 KiB), and its report says why they
 * may be off. Last, H (a host-to-device node only: nothing recorded) has its node disabled in its
 * exec: that changes nothing p2ptrace counts and is not reported. */
static int Altered(void) {
  CUcontext ctx[3];
  CUdeviceptr buf[3];
  SetUp3(ctx, buf, 31u, 9u);
  cudaStream_t s;
  Check("cudaStreamCreateWithFlags", cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  cudaGraph_t g = NULL;
  cudaGraphNode_t n1 = NULL, n2 = NULL;
  CUgraphNode n3 = NULL;
  Check("cudaGraphCreate", cudaGraphCreate(&g, 0));
  Check("cudaGraphAddMemcpyNode1D n1", cudaGraphAddMemcpyNode1D(&n1, g, NULL, 0, (void*)buf[1], (const void*)buf[0],
                                                                8 * KiB, cudaMemcpyDefault));
  Check("cudaGraphAddMemcpyNode1D n2", cudaGraphAddMemcpyNode1D(&n2, g, NULL, 0, (void*)(buf[2] + 64 * KiB),
                                                                (const void*)(buf[1] + 64 * KiB), 4 * KiB,
                                                                cudaMemcpyDefault));
  CUDA_MEMCPY3D c3;
  memset(&c3, 0, sizeof c3);
  c3.srcMemoryType = c3.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c3.srcDevice = buf[2] + 128 * KiB;
  c3.dstDevice = buf[0] + 128 * KiB;
  c3.WidthInBytes = 2 * KiB;
  c3.Height = c3.Depth = 1;
  Check("cuGraphAddMemcpyNode n3", cuGraphAddMemcpyNode(&n3, (CUgraph)g, NULL, 0, &c3, ctx[0]));
  enum cudaGraphNodeType type = cudaGraphNodeTypeCount;
  Check("cudaGraphNodeGetType", cudaGraphNodeGetType(n1, &type));
  printf("n1 is a %s node\n", type == cudaGraphNodeTypeMemcpy ? "memcpy" : "DIFFERENT");
  cudaGraphExec_t x = NULL, y = NULL;
  Check("cudaGraphInstantiate", cudaGraphInstantiate(&x, g, 0));
  for (int i = 0; i < 2; ++i) Check("cudaGraphLaunch", cudaGraphLaunch(x, s));
  Check("cudaGraphExecMemcpyNodeSetParams1D",
        cudaGraphExecMemcpyNodeSetParams1D(x, n1, (void*)buf[1], (const void*)buf[0], 16 * KiB, cudaMemcpyDefault));
  Check("cudaGraphLaunch", cudaGraphLaunch(x, s));
  Check("cudaGraphNodeSetEnabled off", cudaGraphNodeSetEnabled(x, n2, 0));
  Check("cudaGraphLaunch", cudaGraphLaunch(x, s));
  c3.WidthInBytes = KiB;
  Check("cuGraphExecMemcpyNodeSetParams", cuGraphExecMemcpyNodeSetParams((CUgraphExec)x, n3, &c3, ctx[0]));
  Check("cudaGraphLaunch", cudaGraphLaunch(x, s));
  Check("cuGraphNodeSetEnabled on", cuGraphNodeSetEnabled((CUgraphExec)x, (CUgraphNode)n2, 1));
  Check("cudaGraphLaunch", cudaGraphLaunch(x, s));
  Check("cudaStreamSynchronize", cudaStreamSynchronize(s));
  Same("x 0->1 (16 KiB)", buf[1], 0, buf[0], 0, 16 * KiB);

  Check("cudaGraphMemcpyNodeSetParams1D", cudaGraphMemcpyNodeSetParams1D(n1, (void*)buf[1], (const void*)buf[0],
                                                                         4 * KiB, cudaMemcpyDefault));
  Check("cuGraphMemcpyNodeSetParams", cuGraphMemcpyNodeSetParams(n3, &c3));
  Check("cudaGraphDestroyNode", cudaGraphDestroyNode(n2));
  size_t count = 0;
  Check("cudaGraphGetNodes", cudaGraphGetNodes(g, NULL, &count));
  printf("G holds %zu nodes\n", count);
  Check("cudaGraphInstantiate", cudaGraphInstantiate(&y, g, 0));
  Check("cudaGraphLaunch", cudaGraphLaunch(y, s));
  Check("cudaStreamSynchronize", cudaStreamSynchronize(s));

  static unsigned char host[KiB];
  memset(host, 3, sizeof host);
  cudaGraph_t h = NULL;
  cudaGraphNode_t hn = NULL;
  cudaGraphExec_t hx = NULL;
  Check("cudaGraphCreate", cudaGraphCreate(&h, 0));
  Check("cudaGraphAddMemcpyNode1D h2d", cudaGraphAddMemcpyNode1D(&hn, h, NULL, 0, (void*)(buf[0] + 1900 * KiB), host,
                                                                 sizeof host, cudaMemcpyHostToDevice));
  Check("cudaGraphInstantiate", cudaGraphInstantiate(&hx, h, 0));
  Check("cudaGraphNodeSetEnabled (untracked)", cudaGraphNodeSetEnabled(hx, hn, 0));
  Check("cudaGraphLaunch", cudaGraphLaunch(hx, s));
  Check("cudaStreamSynchronize", cudaStreamSynchronize(s));

  Check("cudaGraphExecDestroy", cudaGraphExecDestroy(x));
  Check("cudaGraphExecDestroy", cudaGraphExecDestroy(y));
  Check("cudaGraphExecDestroy", cudaGraphExecDestroy(hx));
  Check("cudaGraphDestroy", cudaGraphDestroy(g));
  Check("cudaGraphDestroy", cudaGraphDestroy(h));
  Check("cudaStreamDestroy", cudaStreamDestroy(s));
  return Done(buf);
}

/* cudart 12's generic node calls: 12.2's form under the plain name, 12.3's as _v2. */
typedef cudaError_t (*AddNode122Fn)(cudaGraphNode_t*, cudaGraph_t, const cudaGraphNode_t*, size_t,
                                    struct cudaGraphNodeParams*);
typedef cudaError_t (*AddNode123Fn)(cudaGraphNode_t*, cudaGraph_t, const cudaGraphNode_t*, const cudaGraphEdgeData*,
                                    size_t, struct cudaGraphNodeParams*);

/* A 1D device-to-device copy as a generic node's parameters. */
static struct cudaGraphNodeParams CopyParams(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  struct cudaGraphNodeParams p;
  memset(&p, 0, sizeof p);
  p.type = cudaGraphNodeTypeMemcpy;
  p.memcpy.copyParams.srcPtr.ptr = (void*)src;
  p.memcpy.copyParams.dstPtr.ptr = (void*)dst;
  p.memcpy.copyParams.srcPtr.pitch = p.memcpy.copyParams.dstPtr.pitch = n;
  p.memcpy.copyParams.srcPtr.xsize = p.memcpy.copyParams.dstPtr.xsize = n;
  p.memcpy.copyParams.srcPtr.ysize = p.memcpy.copyParams.dstPtr.ysize = 1;
  p.memcpy.copyParams.extent.width = n;
  p.memcpy.copyParams.extent.height = p.memcpy.copyParams.extent.depth = 1;
  p.memcpy.copyParams.kind = cudaMemcpyDeviceToDevice;
  return p;
}

/* The same copy as the driver's generic node parameters, made in `ctx`. */
static CUgraphNodeParams DrvCopyParams(CUcontext ctx, CUdeviceptr dst, CUdeviceptr src, size_t n) {
  CUgraphNodeParams dp;
  memset(&dp, 0, sizeof dp);
  dp.type = CU_GRAPH_NODE_TYPE_MEMCPY;
  dp.memcpy.copyCtx = ctx;
  dp.memcpy.copyParams.srcMemoryType = dp.memcpy.copyParams.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  dp.memcpy.copyParams.srcDevice = src;
  dp.memcpy.copyParams.dstDevice = dst;
  dp.memcpy.copyParams.WidthInBytes = n;
  dp.memcpy.copyParams.Height = dp.memcpy.copyParams.Depth = 1;
  return dp;
}

/* `addnode` (3 GPUs): one graph built with the generic node calls of every ABI (CUDA 12.2+):
 *   cudaGraphAddNode (cudart 13) copy 0->1 8 KiB; a child graph node (type graph) whose child holds
 *   a 1D node 1->2 4 KiB; cuGraphAddNode_v2 (cuda.h's cuGraphAddNode) copy 2->0 2 KiB; 12.2's
 *   cuGraphAddNode copy 1->0 1 KiB. Exec launched 3 times.
 * Then, through cudart 12 opened with dlopen (its cudaGraphAddNode is 12.2's form, its _v2 12.3's):
 *   a graph of two copies 0->2 512 B (cudaGraphAddNode) and 2->1 256 B (cudaGraphAddNode_v2),
 *   launched twice. */
static int AddNodes(void) {
  CUcontext ctx[3];
  CUdeviceptr buf[3];
  SetUp3(ctx, buf, 37u, 11u);
  cudaStream_t s;
  Check("cudaStreamCreateWithFlags", cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  cudaGraph_t g = NULL, child = NULL;
  cudaGraphNode_t n = NULL;
  Check("cudaGraphCreate", cudaGraphCreate(&g, 0));
  struct cudaGraphNodeParams p = CopyParams(buf[1], buf[0], 8 * KiB);
  Check("cudaGraphAddNode copy", cudaGraphAddNode(&n, g, NULL, NULL, 0, &p));
  Check("cudaGraphCreate child", cudaGraphCreate(&child, 0));
  Check("cudaGraphAddMemcpyNode1D (child)", cudaGraphAddMemcpyNode1D(&n, child, NULL, 0, (void*)(buf[2] + 64 * KiB),
                                                                     (const void*)(buf[1] + 64 * KiB), 4 * KiB,
                                                                     cudaMemcpyDefault));
  struct cudaGraphNodeParams cp;
  memset(&cp, 0, sizeof cp);
  cp.type = cudaGraphNodeTypeGraph;
  cp.graph.graph = child;
  Check("cudaGraphAddNode child graph", cudaGraphAddNode(&n, g, NULL, NULL, 0, &cp));
  CUgraphNodeParams dp = DrvCopyParams(ctx[0], buf[0] + 128 * KiB, buf[2] + 128 * KiB, 2 * KiB);
  CUgraphNode cn = NULL;
  Check("cuGraphAddNode (12.3)", cuGraphAddNode(&cn, (CUgraph)g, NULL, NULL, 0, &dp));
  dp.memcpy.copyParams.srcDevice = buf[1] + 192 * KiB;
  dp.memcpy.copyParams.dstDevice = buf[0] + 192 * KiB;
  dp.memcpy.copyParams.WidthInBytes = KiB;
  Check("cuGraphAddNode (12.2)", cuGraphAddNode122(&cn, (CUgraph)g, NULL, 0, &dp));
  cudaGraphExec_t x = NULL;
  Check("cudaGraphInstantiate", cudaGraphInstantiate(&x, g, 0));
  for (int i = 0; i < 3; ++i) Check("cudaGraphLaunch", cudaGraphLaunch(x, s));
  Check("cudaStreamSynchronize", cudaStreamSynchronize(s));
  Same("0->1", buf[1], 0, buf[0], 0, 8 * KiB);
  Same("1->2 (child)", buf[2], 64 * KiB, buf[1], 64 * KiB, 4 * KiB);
  Same("2->0", buf[0], 128 * KiB, buf[2], 128 * KiB, 2 * KiB);
  Same("1->0", buf[0], 192 * KiB, buf[1], 192 * KiB, KiB);
  Check("cudaGraphExecDestroy", cudaGraphExecDestroy(x));
  Check("cudaGraphDestroy", cudaGraphDestroy(g));
  Check("cudaGraphDestroy", cudaGraphDestroy(child));

  void* rt12 = dlopen("libcudart.so.12", RTLD_NOW | RTLD_LOCAL);
  if (rt12 == NULL) {
    printf("dlopen libcudart.so.12 failed: %s\n", dlerror());
    return 1;
  }
  cudaError_t (*set_device)(int) = (cudaError_t (*)(int))dlsym(rt12, "cudaSetDevice");
  cudaError_t (*create)(cudaGraph_t*, unsigned) = (cudaError_t (*)(cudaGraph_t*, unsigned))dlsym(rt12, "cudaGraphCreate");
  AddNode122Fn add122 = (AddNode122Fn)dlsym(rt12, "cudaGraphAddNode");
  AddNode123Fn add123 = (AddNode123Fn)dlsym(rt12, "cudaGraphAddNode_v2");
  cudaError_t (*instantiate)(cudaGraphExec_t*, cudaGraph_t, unsigned long long) =
      (cudaError_t (*)(cudaGraphExec_t*, cudaGraph_t, unsigned long long))dlsym(rt12, "cudaGraphInstantiate");
  cudaError_t (*launch)(cudaGraphExec_t, cudaStream_t) =
      (cudaError_t (*)(cudaGraphExec_t, cudaStream_t))dlsym(rt12, "cudaGraphLaunch");
  cudaError_t (*sync)(void) = (cudaError_t (*)(void))dlsym(rt12, "cudaDeviceSynchronize");
  cudaError_t (*exec_destroy)(cudaGraphExec_t) = (cudaError_t (*)(cudaGraphExec_t))dlsym(rt12, "cudaGraphExecDestroy");
  cudaError_t (*destroy)(cudaGraph_t) = (cudaError_t (*)(cudaGraph_t))dlsym(rt12, "cudaGraphDestroy");
  if (!set_device || !create || !add122 || !add123 || !instantiate || !launch || !sync || !exec_destroy || !destroy) {
    printf("cudart 12 lacks a graph function\n");
    return 1;
  }
  cudaGraph_t g12 = NULL;
  cudaGraphExec_t x12 = NULL;
  Check("cudart 12 cudaSetDevice", set_device(0));
  Check("cudart 12 cudaGraphCreate", create(&g12, 0));
  p = CopyParams(buf[2] + 256 * KiB, buf[0] + 256 * KiB, 512);
  Check("cudart 12 cudaGraphAddNode (12.2)", add122(&n, g12, NULL, 0, &p));
  p = CopyParams(buf[1] + 320 * KiB, buf[2] + 320 * KiB, 256);
  Check("cudart 12 cudaGraphAddNode_v2", add123(&n, g12, NULL, NULL, 0, &p));
  Check("cudart 12 cudaGraphInstantiate", instantiate(&x12, g12, 0));
  for (int i = 0; i < 2; ++i) Check("cudart 12 cudaGraphLaunch", launch(x12, NULL));
  Check("cudart 12 cudaDeviceSynchronize", sync());
  Same("cudart 12 0->2", buf[2], 256 * KiB, buf[0], 256 * KiB, 512);
  Same("cudart 12 2->1", buf[1], 320 * KiB, buf[2], 320 * KiB, 256);
  Check("cudart 12 cudaGraphExecDestroy", exec_destroy(x12));
  Check("cudart 12 cudaGraphDestroy", destroy(g12));

  Check("cudaStreamDestroy", cudaStreamDestroy(s));
  return Done(buf);
}

/* `setparams` (3 GPUs): the generic calls that change nodes (CUDA 12.2+), on a graph of a copy node
 * n 0->1 8 KiB and a child graph node c (its child: 1->2 4 KiB); exec x launched once, then:
 *   cudaGraphExecNodeSetParams(x, n: 0->1 16 KiB), launch; cudaGraphExecChildGraphNodeSetParams(x, c,
 *   a child of 1->2 2 KiB at another offset), launch; cuGraphExecNodeSetParams(x, n: 0->1 4 KiB),
 *   cuGraphExecChildGraphNodeSetParams(x, c, the first child), launch; cudaGraphNodeSetParams(n:
 *   0->1 1 KiB) and cuGraphNodeSetParams(n: 0->1 2 KiB) on the graph, then a new exec y of it,
 *   launched once. Each launch's bytes checked where they land. */
static int SetParams(void) {
  CUcontext ctx[3];
  CUdeviceptr buf[3];
  SetUp3(ctx, buf, 41u, 13u);
  cudaStream_t s;
  Check("cudaStreamCreateWithFlags", cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t g = NULL, child = NULL, child2 = NULL;
  cudaGraphNode_t n = NULL, c = NULL, inner = NULL;
  Check("cudaGraphCreate", cudaGraphCreate(&g, 0));
  struct cudaGraphNodeParams p = CopyParams(buf[1], buf[0], 8 * KiB);
  Check("cudaGraphAddNode copy", cudaGraphAddNode(&n, g, NULL, NULL, 0, &p));
  Check("cudaGraphCreate child", cudaGraphCreate(&child, 0));
  Check("cudaGraphAddMemcpyNode1D (child)", cudaGraphAddMemcpyNode1D(&inner, child, NULL, 0, (void*)(buf[2] + 64 * KiB),
                                                                     (const void*)(buf[1] + 64 * KiB), 4 * KiB,
                                                                     cudaMemcpyDefault));
  Check("cudaGraphAddChildGraphNode", cudaGraphAddChildGraphNode(&c, g, NULL, 0, child));
  Check("cudaGraphCreate child2", cudaGraphCreate(&child2, 0));
  Check("cudaGraphAddMemcpyNode1D (child2)", cudaGraphAddMemcpyNode1D(&inner, child2, NULL, 0, (void*)(buf[2] + 96 * KiB),
                                                                      (const void*)(buf[1] + 96 * KiB), 2 * KiB,
                                                                      cudaMemcpyDefault));
  cudaGraphExec_t x = NULL, y = NULL;
  Check("cudaGraphInstantiate", cudaGraphInstantiate(&x, g, 0));
  Check("cudaGraphLaunch", cudaGraphLaunch(x, s));
  p = CopyParams(buf[1] + 256 * KiB, buf[0] + 256 * KiB, 16 * KiB);
  Check("cudaGraphExecNodeSetParams", cudaGraphExecNodeSetParams(x, n, &p));
  Check("cudaGraphLaunch", cudaGraphLaunch(x, s));
  Check("cudaGraphExecChildGraphNodeSetParams", cudaGraphExecChildGraphNodeSetParams(x, c, child2));
  Check("cudaGraphLaunch", cudaGraphLaunch(x, s));
  Check("cudaStreamSynchronize", cudaStreamSynchronize(s));
  Same("x 0->1 (16 KiB, set in the exec)", buf[1], 256 * KiB, buf[0], 256 * KiB, 16 * KiB);
  Same("x 1->2 (child2)", buf[2], 96 * KiB, buf[1], 96 * KiB, 2 * KiB);
  CUgraphNodeParams dp = DrvCopyParams(ctx[0], buf[1] + 512 * KiB, buf[0] + 512 * KiB, 4 * KiB);
  Check("cuGraphExecNodeSetParams", cuGraphExecNodeSetParams((CUgraphExec)x, (CUgraphNode)n, &dp));
  Check("cuGraphExecChildGraphNodeSetParams",
        cuGraphExecChildGraphNodeSetParams((CUgraphExec)x, (CUgraphNode)c, (CUgraph)child));
  Check("cudaGraphLaunch", cudaGraphLaunch(x, s));
  Check("cudaStreamSynchronize", cudaStreamSynchronize(s));
  Same("x 0->1 (4 KiB, set by the driver)", buf[1], 512 * KiB, buf[0], 512 * KiB, 4 * KiB);
  p = CopyParams(buf[1] + 768 * KiB, buf[0] + 768 * KiB, KiB);
  Check("cudaGraphNodeSetParams", cudaGraphNodeSetParams(n, &p));
  dp = DrvCopyParams(ctx[0], buf[1] + 1024 * KiB, buf[0] + 1024 * KiB, 2 * KiB);
  Check("cuGraphNodeSetParams", cuGraphNodeSetParams((CUgraphNode)n, &dp));
  Check("cudaGraphInstantiate y", cudaGraphInstantiate(&y, g, 0));
  Check("cudaGraphLaunch y", cudaGraphLaunch(y, s));
  Check("cudaStreamSynchronize", cudaStreamSynchronize(s));
  Same("y 0->1 (2 KiB, set in the graph)", buf[1], 1024 * KiB, buf[0], 1024 * KiB, 2 * KiB);
  Check("cudaGraphExecDestroy", cudaGraphExecDestroy(x));
  Check("cudaGraphExecDestroy", cudaGraphExecDestroy(y));
  Check("cudaGraphDestroy", cudaGraphDestroy(g));
  Check("cudaGraphDestroy", cudaGraphDestroy(child));
  Check("cudaGraphDestroy", cudaGraphDestroy(child2));
  Check("cudaStreamDestroy", cudaStreamDestroy(s));
  return Done(buf);
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc > 1 && strcmp(argv[1], "errors") == 0) return Errors();
  if (argc > 1 && strcmp(argv[1], "graph") == 0) return Graphs();
  if (argc > 1 && strcmp(argv[1], "nodes") == 0) return Nodes();
  if (argc > 1 && strcmp(argv[1], "tograph") == 0) return ToGraph();
  if (argc > 1 && strcmp(argv[1], "altered") == 0) return Altered();
  if (argc > 1 && strcmp(argv[1], "addnode") == 0) return AddNodes();
  if (argc > 1 && strcmp(argv[1], "setparams") == 0) return SetParams();
  Check("cuInit", cuInit(0));
  int n = 0;
  Check("cuDeviceGetCount", cuDeviceGetCount(&n));
  if (n < 3) {
    printf("needs 3 GPUs, has %d\n", n);
    return 2;
  }
  CUcontext ctx[3];
  CUdeviceptr buf[3];
  SetUp3(ctx, buf, 31u, 1u);
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
  return Done(buf);
}
