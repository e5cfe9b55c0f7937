// The CUDA graph functions the shim intercepts, X(name, (parameters), (arguments)) as in
// cuda_functions.h, but wrapped for cudart 12 and 13 only: 11's cudaGraphInstantiate and
// cudaGraphExecUpdate take other arguments under the same names. What is recorded: graphs.h.
#pragma once

#include <cuda_runtime_api.h>

extern "C" {
cudaError_t cudaGraphInstantiateWithParams_ptsz(cudaGraphExec_t*, cudaGraph_t, cudaGraphInstantiateParams*);
cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t, cudaStream_t);
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
  X(cudaGraphLaunch_ptsz, (cudaGraphExec_t e, cudaStream_t s), (e, s))
