/* p2ptrace vocabulary (DESIGN.md §5): transport classes of a GPU pair and the intercepted APIs.
 * Stable numbers: they are stored in trace files. Append only. */
#ifndef P2PTRACE_VOCABULARY_H_
#define P2PTRACE_VOCABULARY_H_

#ifdef __cplusplus
extern "C" {
#endif

/* How bytes moved between two GPUs, best first. */
enum p2ptrace_transport {
  P2PTRACE_TRANSPORT_UNKNOWN = 0,
  P2PTRACE_TRANSPORT_NVLINK = 1,       /* direct P2P over NVLink/NVSwitch */
  P2PTRACE_TRANSPORT_PCIE_P2P = 2,     /* direct P2P over PCIe */
  P2PTRACE_TRANSPORT_P2P = 3,          /* direct P2P, link type unknown (no NVML, no probe) */
  P2PTRACE_TRANSPORT_P2P_INDIRECT = 4, /* through another GPU */
  P2PTRACE_TRANSPORT_SHM = 5,          /* NCCL SHM: host memory on the same node */
  P2PTRACE_TRANSPORT_HOST_STAGED = 6,  /* a CUDA peer copy the driver staged through the host */
  P2PTRACE_TRANSPORT_NET_GDR = 7,
  P2PTRACE_TRANSPORT_NET_IB = 8,
  P2PTRACE_TRANSPORT_NET_SOCKET = 9,
  P2PTRACE_TRANSPORT_NVLS = 10,
  P2PTRACE_TRANSPORT_COLLNET = 11,
  P2PTRACE_TRANSPORT_SAME_DEVICE = 12, /* both ends on one GPU: not a pair */
  P2PTRACE_TRANSPORT_COUNT_
};

/* The CUDA runtime and driver calls the shim records (a driver name stands for all its versions:
 * cuMemcpyDtoD for cuMemcpyDtoD_v2 and cuMemcpyDtoD_v2_ptds; the per-thread-stream forms are told
 * apart by P2PTRACE_COPY_PER_THREAD_STREAM). */
enum p2ptrace_api {
  P2PTRACE_API_UNKNOWN = 0,
  P2PTRACE_API_cudaDeviceCanAccessPeer = 1,
  P2PTRACE_API_cudaDeviceGetP2PAttribute = 2,
  P2PTRACE_API_cudaDeviceEnablePeerAccess = 3,
  P2PTRACE_API_cudaDeviceDisablePeerAccess = 4,
  P2PTRACE_API_cudaMemPoolSetAccess = 5,
  P2PTRACE_API_cudaMemcpyPeer = 6,
  P2PTRACE_API_cudaMemcpyPeerAsync = 7,
  P2PTRACE_API_cudaMemcpy = 8,
  P2PTRACE_API_cudaMemcpyAsync = 9,
  P2PTRACE_API_cudaMemcpy2D = 10,
  P2PTRACE_API_cudaMemcpy2DAsync = 11,
  P2PTRACE_API_cudaMemcpy3DPeer = 12,
  P2PTRACE_API_cudaMemcpy3DPeerAsync = 13,
  P2PTRACE_API_cudaIpcGetMemHandle = 14,
  P2PTRACE_API_cudaIpcOpenMemHandle = 15,
  P2PTRACE_API_cudaIpcCloseMemHandle = 16,
  /* trace 1.5: the driver API */
  P2PTRACE_API_cuDeviceCanAccessPeer = 17,
  P2PTRACE_API_cuDeviceGetP2PAttribute = 18,
  P2PTRACE_API_cuCtxEnablePeerAccess = 19,
  P2PTRACE_API_cuCtxDisablePeerAccess = 20,
  P2PTRACE_API_cuMemcpyPeer = 21,
  P2PTRACE_API_cuMemcpyPeerAsync = 22,
  P2PTRACE_API_cuMemcpy = 23,
  P2PTRACE_API_cuMemcpyAsync = 24,
  P2PTRACE_API_cuMemcpyDtoD = 25,
  P2PTRACE_API_cuMemcpyDtoDAsync = 26,
  P2PTRACE_API_cuMemcpy3DPeer = 27,
  P2PTRACE_API_cuMemcpy3DPeerAsync = 28,
  /* trace 1.6: copies added to a graph as nodes (recorded like captured copies) */
  P2PTRACE_API_cudaGraphAddMemcpyNode = 29,
  P2PTRACE_API_cudaGraphAddMemcpyNode1D = 30,
  P2PTRACE_API_cuGraphAddMemcpyNode = 31,
  /* trace 1.7: calls that change recorded graph nodes (GRAPH ALTERED records) */
  P2PTRACE_API_cudaGraphExecMemcpyNodeSetParams = 32,
  P2PTRACE_API_cudaGraphExecMemcpyNodeSetParams1D = 33,
  P2PTRACE_API_cudaGraphExecNodeSetParams = 34,
  P2PTRACE_API_cudaGraphExecChildGraphNodeSetParams = 35,
  P2PTRACE_API_cudaGraphNodeSetEnabled = 36,
  P2PTRACE_API_cudaGraphMemcpyNodeSetParams = 37,
  P2PTRACE_API_cudaGraphMemcpyNodeSetParams1D = 38,
  P2PTRACE_API_cudaGraphNodeSetParams = 39,
  P2PTRACE_API_cudaGraphDestroyNode = 40,
  P2PTRACE_API_cuGraphExecMemcpyNodeSetParams = 41,
  P2PTRACE_API_cuGraphExecNodeSetParams = 42,
  P2PTRACE_API_cuGraphExecChildGraphNodeSetParams = 43,
  P2PTRACE_API_cuGraphNodeSetEnabled = 44,
  P2PTRACE_API_cuGraphMemcpyNodeSetParams = 45,
  P2PTRACE_API_cuGraphNodeSetParams = 46,
  P2PTRACE_API_cuGraphDestroyNode = 47,
  /* trace 1.7: copy nodes added with the generic node call (recorded like cudaGraphAddMemcpyNode's) */
  P2PTRACE_API_cudaGraphAddNode = 48,
  P2PTRACE_API_cuGraphAddNode = 49,
  /* trace 1.8: access granted to mapped memory (VMM) and to a driver API pool (peer records: device
     the device granted access, peer the memory's owner, -1 when the shim does not know it) */
  P2PTRACE_API_cuMemSetAccess = 50,
  P2PTRACE_API_cuMemPoolSetAccess = 51,
  P2PTRACE_API_COUNT_
};

/* The NCCL calls the shim records. */
enum p2ptrace_nccl_api {
  P2PTRACE_NCCL_UNKNOWN = 0,
  P2PTRACE_NCCL_CommInitRank = 1,
  P2PTRACE_NCCL_CommInitRankConfig = 2,
  P2PTRACE_NCCL_CommInitAll = 3,
  P2PTRACE_NCCL_CommInitRankScalable = 4,
  P2PTRACE_NCCL_CommSplit = 5,
  P2PTRACE_NCCL_CommFinalize = 6,
  P2PTRACE_NCCL_CommDestroy = 7,
  P2PTRACE_NCCL_CommAbort = 8,
  P2PTRACE_NCCL_AllReduce = 9,
  P2PTRACE_NCCL_Broadcast = 10,
  P2PTRACE_NCCL_Reduce = 11,
  P2PTRACE_NCCL_AllGather = 12,
  P2PTRACE_NCCL_ReduceScatter = 13,
  P2PTRACE_NCCL_AlltoAll = 14,
  P2PTRACE_NCCL_Gather = 15,
  P2PTRACE_NCCL_Scatter = 16,
  P2PTRACE_NCCL_Send = 17,
  P2PTRACE_NCCL_Recv = 18,
  P2PTRACE_NCCL_CommGetAsyncError = 19, /* trace minor 10: an asynchronous error it reported */
  P2PTRACE_NCCL_COUNT_
};

#ifdef __cplusplus
}
#endif
#endif /* P2PTRACE_VOCABULARY_H_ */
