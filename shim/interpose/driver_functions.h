// Every CUDA driver (libcuda.so.1) function the shim intercepts: X(name, (parameters), (arguments)),
// by the exact name libcuda exports (cuMemcpyDtoD_v2: cuda.h's cuMemcpyDtoD; the legacy unsuffixed
// names of 32-bit CUdeviceptr days are not wrapped). All return CUresult. The wrappers
// (driver_hooks.cc), the version script and the handing out through cuGetProcAddress are all made
// from this list. libcuda has no symbol versions: the wrappers are exported unversioned.
#pragma once

#include <cuda.h>

// cuda.h renames entry points to their newest forms; the shim wraps each form by its own name.
#undef cuGetProcAddress
#undef cuStreamBeginCapture
#undef cuStreamDestroy
#undef cuStreamEndCapture
#undef cuGraphInstantiate
#undef cuGraphInstantiateWithParams
#undef cuGraphExecUpdate
#undef cuGraphLaunch
#undef cuGraphAddNode
#undef cuMemAllocAsync
#undef cuMemAllocFromPoolAsync
#undef cuMemFreeAsync

#define P2PTRACE_DRIVER_FUNCTIONS(X)                                                                          \
  /* bookkeeping: which device owns a pointer */                                                             \
  X(cuMemAlloc_v2, (CUdeviceptr * p, size_t n), (p, n))                                                      \
  X(cuMemFree_v2, (CUdeviceptr p), (p))                                                                      \
  /* memory the program maps (VMM) or takes from pools, and access granted to it (device_memory.h) */        \
  X(cuMemCreate, (CUmemGenericAllocationHandle * h, size_t n, const CUmemAllocationProp* prop, unsigned long long f), \
    (h, n, prop, f))                                                                                         \
  X(cuMemMap, (CUdeviceptr p, size_t n, size_t offset, CUmemGenericAllocationHandle h, unsigned long long f), \
    (p, n, offset, h, f))                                                                                    \
  X(cuMemUnmap, (CUdeviceptr p, size_t n), (p, n))                                                           \
  X(cuMemSetAccess, (CUdeviceptr p, size_t n, const CUmemAccessDesc* d, size_t count), (p, n, d, count))     \
  X(cuMemAllocAsync, (CUdeviceptr * p, size_t n, CUstream s), (p, n, s))                                     \
  X(cuMemAllocAsync_ptsz, (CUdeviceptr * p, size_t n, CUstream s), (p, n, s))                                \
  X(cuMemAllocFromPoolAsync, (CUdeviceptr * p, size_t n, CUmemoryPool pool, CUstream s), (p, n, pool, s))    \
  X(cuMemAllocFromPoolAsync_ptsz, (CUdeviceptr * p, size_t n, CUmemoryPool pool, CUstream s), (p, n, pool, s)) \
  X(cuMemFreeAsync, (CUdeviceptr p, CUstream s), (p, s))                                                     \
  X(cuMemFreeAsync_ptsz, (CUdeviceptr p, CUstream s), (p, s))                                                \
  X(cuMemPoolCreate, (CUmemoryPool * pool, const CUmemPoolProps* props), (pool, props))                      \
  X(cuMemPoolDestroy, (CUmemoryPool pool), (pool))                                                           \
  X(cuDeviceGetDefaultMemPool, (CUmemoryPool * pool, CUdevice dev), (pool, dev))                             \
  X(cuDeviceGetMemPool, (CUmemoryPool * pool, CUdevice dev), (pool, dev))                                    \
  X(cuMemPoolSetAccess, (CUmemoryPool pool, const CUmemAccessDesc* d, size_t count), (pool, d, count))       \
  /* peer capability and access */                                                                           \
  X(cuDeviceCanAccessPeer, (int* can, CUdevice dev, CUdevice peer), (can, dev, peer))                        \
  X(cuDeviceGetP2PAttribute, (int* v, CUdevice_P2PAttribute a, CUdevice src, CUdevice dst), (v, a, src, dst)) \
  X(cuCtxEnablePeerAccess, (CUcontext peer, unsigned int flags), (peer, flags))                              \
  X(cuCtxDisablePeerAccess, (CUcontext peer), (peer))                                                        \
  /* copies */                                                                                               \
  X(cuMemcpyPeer, (CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n),                  \
    (dst, dc, src, sc, n))                                                                                   \
  X(cuMemcpyPeer_ptds, (CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n),             \
    (dst, dc, src, sc, n))                                                                                   \
  X(cuMemcpyPeerAsync, (CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n, CUstream s), \
    (dst, dc, src, sc, n, s))                                                                                \
  X(cuMemcpyPeerAsync_ptsz,                                                                                  \
    (CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n, CUstream s),                    \
    (dst, dc, src, sc, n, s))                                                                                \
  X(cuMemcpy, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n))                                   \
  X(cuMemcpy_ptds, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n))                              \
  X(cuMemcpyAsync, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s))               \
  X(cuMemcpyAsync_ptsz, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s))          \
  X(cuMemcpyDtoD_v2, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n))                            \
  X(cuMemcpyDtoD_v2_ptds, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n))                       \
  X(cuMemcpyDtoDAsync_v2, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s))        \
  X(cuMemcpyDtoDAsync_v2_ptsz, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s))   \
  X(cuMemcpy3DPeer, (const CUDA_MEMCPY3D_PEER* p), (p))                                                      \
  X(cuMemcpy3DPeer_ptds, (const CUDA_MEMCPY3D_PEER* p), (p))                                                 \
  X(cuMemcpy3DPeerAsync, (const CUDA_MEMCPY3D_PEER* p, CUstream s), (p, s))                                  \
  X(cuMemcpy3DPeerAsync_ptsz, (const CUDA_MEMCPY3D_PEER* p, CUstream s), (p, s))                             \
  /* streams: their device, for timing */                                                                     \
  X(cuStreamCreate, (CUstream * s, unsigned int flags), (s, flags))                                          \
  X(cuStreamCreateWithPriority, (CUstream * s, unsigned int flags, int priority), (s, flags, priority))      \
  X(cuStreamDestroy, (CUstream s), (s))                                                                      \
  X(cuStreamDestroy_v2, (CUstream s), (s))                                                                   \
  /* stream capture and graphs (graphs.h); the legacy forms keep their own arguments */                     \
  X(cuStreamBeginCapture, (CUstream s), (s))                                                                 \
  X(cuStreamBeginCapture_ptsz, (CUstream s), (s))                                                            \
  X(cuStreamBeginCapture_v2, (CUstream s, CUstreamCaptureMode m), (s, m))                                   \
  X(cuStreamBeginCapture_v2_ptsz, (CUstream s, CUstreamCaptureMode m), (s, m))                              \
  X(cuStreamBeginCaptureToGraph,                                                                             \
    (CUstream s, CUgraph g, const CUgraphNode* d, const CUgraphEdgeData* e, size_t n, CUstreamCaptureMode m), \
    (s, g, d, e, n, m))                                                                                      \
  X(cuStreamBeginCaptureToGraph_ptsz,                                                                        \
    (CUstream s, CUgraph g, const CUgraphNode* d, const CUgraphEdgeData* e, size_t n, CUstreamCaptureMode m), \
    (s, g, d, e, n, m))                                                                                      \
  X(cuStreamEndCapture, (CUstream s, CUgraph * g), (s, g))                                                   \
  X(cuStreamEndCapture_ptsz, (CUstream s, CUgraph * g), (s, g))                                              \
  X(cuGraphInstantiate, (CUgraphExec * x, CUgraph g, CUgraphNode * e, char* log, size_t n), (x, g, e, log, n)) \
  X(cuGraphInstantiate_v2, (CUgraphExec * x, CUgraph g, CUgraphNode * e, char* log, size_t n),               \
    (x, g, e, log, n))                                                                                       \
  X(cuGraphInstantiateWithFlags, (CUgraphExec * x, CUgraph g, unsigned long long f), (x, g, f))              \
  X(cuGraphInstantiateWithParams, (CUgraphExec * x, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS * p), (x, g, p)) \
  X(cuGraphInstantiateWithParams_ptsz, (CUgraphExec * x, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS * p),      \
    (x, g, p))                                                                                               \
  X(cuGraphExecUpdate, (CUgraphExec x, CUgraph g, CUgraphNode * e, CUgraphExecUpdateResult * u), (x, g, e, u)) \
  X(cuGraphExecUpdate_v2, (CUgraphExec x, CUgraph g, CUgraphExecUpdateResultInfo * i), (x, g, i))            \
  X(cuGraphExecDestroy, (CUgraphExec x), (x))                                                                \
  X(cuGraphDestroy, (CUgraph g), (g))                                                                        \
  X(cuGraphLaunch, (CUgraphExec x, CUstream s), (x, s))                                                      \
  X(cuGraphLaunch_ptsz, (CUgraphExec x, CUstream s), (x, s))                                                 \
  X(cuGraphAddMemcpyNode,                                                                                    \
    (CUgraphNode * n, CUgraph g, const CUgraphNode* d, size_t nd, const CUDA_MEMCPY3D* p, CUcontext ctx),     \
    (n, g, d, nd, p, ctx))                                                                                   \
  X(cuGraphAddChildGraphNode, (CUgraphNode * n, CUgraph g, const CUgraphNode* d, size_t nd, CUgraph child),  \
    (n, g, d, nd, child))                                                                                    \
  X(cuGraphClone, (CUgraph * clone, CUgraph g), (clone, g))                                                  \
  X(cuGraphCreate, (CUgraph * g, unsigned int flags), (g, flags))                                            \
  /* the generic node call: CUDA 12.2's form, and 12.3's with edge data (cuda.h's cuGraphAddNode) */          \
  X(cuGraphAddNode, (CUgraphNode * n, CUgraph g, const CUgraphNode* d, size_t nd, CUgraphNodeParams* p),      \
    (n, g, d, nd, p))                                                                                        \
  X(cuGraphAddNode_v2,                                                                                       \
    (CUgraphNode * n, CUgraph g, const CUgraphNode* d, const CUgraphEdgeData* e, size_t nd, CUgraphNodeParams* p), \
    (n, g, d, e, nd, p))                                                                                     \
  /* changes to nodes of recorded graphs (graphs.h NodeAltered) */                                           \
  X(cuGraphExecMemcpyNodeSetParams, (CUgraphExec x, CUgraphNode n, const CUDA_MEMCPY3D* p, CUcontext ctx),   \
    (x, n, p, ctx))                                                                                          \
  X(cuGraphExecNodeSetParams, (CUgraphExec x, CUgraphNode n, CUgraphNodeParams * p), (x, n, p))              \
  X(cuGraphExecChildGraphNodeSetParams, (CUgraphExec x, CUgraphNode n, CUgraph child), (x, n, child))        \
  X(cuGraphNodeSetEnabled, (CUgraphExec x, CUgraphNode n, unsigned int on), (x, n, on))                      \
  X(cuGraphMemcpyNodeSetParams, (CUgraphNode n, const CUDA_MEMCPY3D* p), (n, p))                             \
  X(cuGraphNodeSetParams, (CUgraphNode n, CUgraphNodeParams * p), (n, p))                                    \
  X(cuGraphDestroyNode, (CUgraphNode n), (n))                                                                \
  /* entry points: hand out the wrappers above instead of the functions they wrap */                         \
  X(cuGetProcAddress, (const char* sym, void** pfn, int version, cuuint64_t flags), (sym, pfn, version, flags)) \
  X(cuGetProcAddress_v2,                                                                                     \
    (const char* sym, void** pfn, int version, cuuint64_t flags, CUdriverProcAddressQueryResult* status),    \
    (sym, pfn, version, flags, status))
