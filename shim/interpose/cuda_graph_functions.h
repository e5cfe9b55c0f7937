// The CUDA graph functions the shim intercepts, X(name, (parameters), (arguments)) as in
// cuda_functions.h, but wrapped for cudart 12 and 13 only: 11's cudaGraphInstantiate and
// cudaGraphExecUpdate take other arguments under the same names. What is recorded: graphs.h.
#pragma once

#include <cuda_runtime_api.h>

extern "C" {
cudaError_t cudaGraphInstantiateWithParams_ptsz(cudaGraphExec_t*, cudaGraph_t, cudaGraphInstantiateParams*);
cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t, cudaStream_t);
cudaError_t cudaStreamBeginCaptureToGraph_ptsz(cudaStream_t, cudaGraph_t, const cudaGraphNode_t*,
                                               const cudaGraphEdgeData*, size_t, cudaStreamCaptureMode);
// cudart 12.3+'s name for what cudart 13 calls cudaGraphAddNode (cuda_hooks.cc wraps both, and 12.2's).
cudaError_t cudaGraphAddNode_v2(cudaGraphNode_t*, cudaGraph_t, const cudaGraphNode_t*, const cudaGraphEdgeData*,
                                size_t, cudaGraphNodeParams*);
}

#define P2PTRACE_CUDA_GRAPH_FUNCTIONS(X)                                                                   \
  X(cudaGraphInstantiate, (cudaGraphExec_t* e, cudaGraph_t g, unsigned long long f), (e, g, f))           \
  X(cudaGraphInstantiateWithFlags, (cudaGraphExec_t* e, cudaGraph_t g, unsigned long long f), (e, g, f))  \
  X(cudaGraphInstantiateWithParams, (cudaGraphExec_t* e, cudaGraph_t g, cudaGraphInstantiateParams* p),   \
    (e, g, p))                                                                                             \
  X(cudaGraphInstantiateWithParams_ptsz,                                                                   \
    (cudaGraphExec_t* e, cudaGraph_t g, cudaGraphInstantiateParams* p), (e, g, p))                         \
  X(cudaGraphExecUpdate, (cudaGraphExec_t e, cudaGraph_t g, cudaGraphExecUpdateResultInfo* i), (e, g, i)) \
  X(cudaGraphExecDestroy, (cudaGraphExec_t e), (e))                                                        \
  X(cudaGraphDestroy, (cudaGraph_t g), (g))                                                                \
  X(cudaGraphLaunch, (cudaGraphExec_t e, cudaStream_t s), (e, s))                                          \
  X(cudaGraphLaunch_ptsz, (cudaGraphExec_t e, cudaStream_t s), (e, s))                                     \
  X(cudaGraphAddMemcpyNode,                                                                                \
    (cudaGraphNode_t * n, cudaGraph_t g, const cudaGraphNode_t* d, size_t nd, const cudaMemcpy3DParms* p),  \
    (n, g, d, nd, p))                                                                                      \
  X(cudaGraphAddMemcpyNode1D,                                                                              \
    (cudaGraphNode_t * n, cudaGraph_t g, const cudaGraphNode_t* d, size_t nd, void* dst, const void* src,   \
     size_t count, cudaMemcpyKind kind),                                                                   \
    (n, g, d, nd, dst, src, count, kind))                                                                  \
  X(cudaGraphAddChildGraphNode,                                                                            \
    (cudaGraphNode_t * n, cudaGraph_t g, const cudaGraphNode_t* d, size_t nd, cudaGraph_t child),           \
    (n, g, d, nd, child))                                                                                  \
  X(cudaGraphClone, (cudaGraph_t * clone, cudaGraph_t g), (clone, g))                                      \
  X(cudaGraphCreate, (cudaGraph_t * g, unsigned int flags), (g, flags))                                     \
  /* CUDA 12.3+: a capture that appends to the program's graph */                                          \
  X(cudaStreamBeginCaptureToGraph,                                                                         \
    (cudaStream_t s, cudaGraph_t g, const cudaGraphNode_t* d, const cudaGraphEdgeData* e, size_t n,        \
     cudaStreamCaptureMode m),                                                                             \
    (s, g, d, e, n, m))                                                                                    \
  X(cudaStreamBeginCaptureToGraph_ptsz,                                                                    \
    (cudaStream_t s, cudaGraph_t g, const cudaGraphNode_t* d, const cudaGraphEdgeData* e, size_t n,        \
     cudaStreamCaptureMode m),                                                                             \
    (s, g, d, e, n, m))                                                                                    \
  /* changes to nodes of recorded graphs (graphs.h NodeAltered) */                                         \
  X(cudaGraphExecMemcpyNodeSetParams, (cudaGraphExec_t e, cudaGraphNode_t n, const cudaMemcpy3DParms* p),  \
    (e, n, p))                                                                                             \
  X(cudaGraphExecMemcpyNodeSetParams1D,                                                                    \
    (cudaGraphExec_t e, cudaGraphNode_t n, void* dst, const void* src, size_t count, cudaMemcpyKind kind), \
    (e, n, dst, src, count, kind))                                                                         \
  X(cudaGraphExecNodeSetParams, (cudaGraphExec_t e, cudaGraphNode_t n, cudaGraphNodeParams* p), (e, n, p)) \
  X(cudaGraphExecChildGraphNodeSetParams, (cudaGraphExec_t e, cudaGraphNode_t n, cudaGraph_t child),       \
    (e, n, child))                                                                                         \
  X(cudaGraphNodeSetEnabled, (cudaGraphExec_t e, cudaGraphNode_t n, unsigned int on), (e, n, on))          \
  X(cudaGraphMemcpyNodeSetParams, (cudaGraphNode_t n, const cudaMemcpy3DParms* p), (n, p))                 \
  X(cudaGraphMemcpyNodeSetParams1D,                                                                        \
    (cudaGraphNode_t n, void* dst, const void* src, size_t count, cudaMemcpyKind kind),                    \
    (n, dst, src, count, kind))                                                                            \
  X(cudaGraphNodeSetParams, (cudaGraphNode_t n, cudaGraphNodeParams* p), (n, p))                           \
  X(cudaGraphDestroyNode, (cudaGraphNode_t n), (n))
