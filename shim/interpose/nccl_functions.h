// Every NCCL function the shim intercepts: X(name, (parameters), (arguments)); all return
// ncclResult_t. The shim defines ncclX and calls the library's pncclX (the strong alias every
// NCCL since 2.16 exports; ncclX itself where pncclX does not exist).
#pragma once

#include <nccl.h>

#define P2PTRACE_NCCL_FUNCTIONS(X)                                                                          \
  X(ncclCommInitRank, (ncclComm_t * comm, int nranks, ncclUniqueId id, int rank), (comm, nranks, id, rank)) \
  X(ncclCommInitRankConfig, (ncclComm_t * comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config), \
    (comm, nranks, id, rank, config))                                                                       \
  X(ncclCommInitAll, (ncclComm_t * comm, int ndev, const int* devlist), (comm, ndev, devlist))              \
  X(ncclCommInitRankScalable,                                                                               \
    (ncclComm_t * comm, int nranks, int rank, int nids, ncclUniqueId* ids, ncclConfig_t* config),           \
    (comm, nranks, rank, nids, ids, config))                                                                \
  X(ncclCommSplit, (ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config),        \
    (comm, color, key, newcomm, config))                                                                    \
  X(ncclCommFinalize, (ncclComm_t comm), (comm))                                                            \
  X(ncclCommDestroy, (ncclComm_t comm), (comm))                                                             \
  X(ncclCommAbort, (ncclComm_t comm), (comm))                                                               \
  X(ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t* error), (comm, error))                           \
  X(ncclGroupStart, (), ())                                                                                 \
  X(ncclGroupEnd, (), ())                                                                                   \
  X(ncclGetUniqueId, (ncclUniqueId * id), (id))                                                             \
  X(ncclGetVersion, (int* version), (version))                                                              \
  X(ncclAllReduce,                                                                                          \
    (const void* sb, void* rb, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t comm, cudaStream_t s), \
    (sb, rb, n, t, op, comm, s))                                                                            \
  X(ncclBroadcast,                                                                                          \
    (const void* sb, void* rb, size_t n, ncclDataType_t t, int root, ncclComm_t comm, cudaStream_t s),      \
    (sb, rb, n, t, root, comm, s))                                                                          \
  X(ncclBcast, (void* b, size_t n, ncclDataType_t t, int root, ncclComm_t comm, cudaStream_t s),            \
    (b, n, t, root, comm, s))                                                                               \
  X(ncclReduce,                                                                                             \
    (const void* sb, void* rb, size_t n, ncclDataType_t t, ncclRedOp_t op, int root, ncclComm_t comm,       \
     cudaStream_t s),                                                                                       \
    (sb, rb, n, t, op, root, comm, s))                                                                      \
  X(ncclAllGather, (const void* sb, void* rb, size_t n, ncclDataType_t t, ncclComm_t comm, cudaStream_t s), \
    (sb, rb, n, t, comm, s))                                                                                \
  X(ncclReduceScatter,                                                                                      \
    (const void* sb, void* rb, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t comm, cudaStream_t s), \
    (sb, rb, n, t, op, comm, s))                                                                            \
  X(ncclAlltoAll, (const void* sb, void* rb, size_t n, ncclDataType_t t, ncclComm_t comm, cudaStream_t s),  \
    (sb, rb, n, t, comm, s))                                                                                \
  X(ncclSend, (const void* sb, size_t n, ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t s),      \
    (sb, n, t, peer, comm, s))                                                                              \
  X(ncclRecv, (void* rb, size_t n, ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t s),            \
    (rb, n, t, peer, comm, s))                                                                              \
  P2PTRACE_NCCL_FUNCTIONS_2_28(X)

// NCCL 2.28's collectives with a root (nccl-tests' gather and scatter call them from 2.28 on).
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
#define P2PTRACE_NCCL_FUNCTIONS_2_28(X)                                                                     \
  X(ncclGather,                                                                                             \
    (const void* sb, void* rb, size_t n, ncclDataType_t t, int root, ncclComm_t comm, cudaStream_t s),      \
    (sb, rb, n, t, root, comm, s))                                                                          \
  X(ncclScatter,                                                                                            \
    (const void* sb, void* rb, size_t n, ncclDataType_t t, int root, ncclComm_t comm, cudaStream_t s),      \
    (sb, rb, n, t, root, comm, s))
#else
#define P2PTRACE_NCCL_FUNCTIONS_2_28(X)
#endif
