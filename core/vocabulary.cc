#include "core/vocabulary.h"

#include <array>
#include <iterator>

namespace p2ptrace {
namespace {

constexpr std::array<std::string_view, P2PTRACE_TRANSPORT_COUNT_> kTransports = {
    "unknown", "nvlink", "pcie_p2p", "p2p", "p2p_indirect", "shm", "host_staged",
    "net_gdr", "net_ib",  "net_socket", "nvls", "collnet", "same_device"};

constexpr std::array<std::string_view, P2PTRACE_API_COUNT_> kApis = {
    "unknown",
    "cudaDeviceCanAccessPeer",
    "cudaDeviceGetP2PAttribute",
    "cudaDeviceEnablePeerAccess",
    "cudaDeviceDisablePeerAccess",
    "cudaMemPoolSetAccess",
    "cudaMemcpyPeer",
    "cudaMemcpyPeerAsync",
    "cudaMemcpy",
    "cudaMemcpyAsync",
    "cudaMemcpy2D",
    "cudaMemcpy2DAsync",
    "cudaMemcpy3DPeer",
    "cudaMemcpy3DPeerAsync",
    "cudaIpcGetMemHandle",
    "cudaIpcOpenMemHandle",
    "cudaIpcCloseMemHandle",
    "cuDeviceCanAccessPeer",
    "cuDeviceGetP2PAttribute",
    "cuCtxEnablePeerAccess",
    "cuCtxDisablePeerAccess",
    "cuMemcpyPeer",
    "cuMemcpyPeerAsync",
    "cuMemcpy",
    "cuMemcpyAsync",
    "cuMemcpyDtoD",
    "cuMemcpyDtoDAsync",
    "cuMemcpy3DPeer",
    "cuMemcpy3DPeerAsync",
    "cudaGraphAddMemcpyNode",
    "cudaGraphAddMemcpyNode1D",
    "cuGraphAddMemcpyNode",
    "cudaGraphExecMemcpyNodeSetParams",
    "cudaGraphExecMemcpyNodeSetParams1D",
    "cudaGraphExecNodeSetParams",
    "cudaGraphExecChildGraphNodeSetParams",
    "cudaGraphNodeSetEnabled",
    "cudaGraphMemcpyNodeSetParams",
    "cudaGraphMemcpyNodeSetParams1D",
    "cudaGraphNodeSetParams",
    "cudaGraphDestroyNode",
    "cuGraphExecMemcpyNodeSetParams",
    "cuGraphExecNodeSetParams",
    "cuGraphExecChildGraphNodeSetParams",
    "cuGraphNodeSetEnabled",
    "cuGraphMemcpyNodeSetParams",
    "cuGraphNodeSetParams",
    "cuGraphDestroyNode",
    "cudaGraphAddNode",
    "cuGraphAddNode",
    "cuMemSetAccess",
    "cuMemPoolSetAccess"};

constexpr std::array<std::string_view, P2PTRACE_NCCL_COUNT_> kNcclApis = {
    "unknown",       "ncclCommInitRank", "ncclCommInitRankConfig", "ncclCommInitAll", "ncclCommInitRankScalable",
    "ncclCommSplit", "ncclCommFinalize", "ncclCommDestroy",        "ncclCommAbort",   "ncclAllReduce",
    "ncclBroadcast", "ncclReduce",       "ncclAllGather",          "ncclReduceScatter", "ncclAlltoAll",
    "ncclGather",    "ncclScatter",      "ncclSend",               "ncclRecv",          "ncclCommGetAsyncError"};

}  // namespace

std::string_view NcclApiName(int api) {
  return api >= 0 && api < static_cast<int>(kNcclApis.size()) ? kNcclApis[api] : "unknown";
}

std::string_view NcclTypeName(int t) {
  static constexpr std::string_view kNames[] = {"int8",    "uint8",   "int32",   "uint32",   "int64",      "uint64",
                                                "float16", "float32", "float64", "bfloat16", "float8e4m3", "float8e5m2"};
  return t >= 0 && t < static_cast<int>(std::size(kNames)) ? kNames[t] : "";
}

std::string_view TransportName(int t) {
  return t >= 0 && t < static_cast<int>(kTransports.size()) ? kTransports[t] : "unknown";
}

std::optional<int> ParseTransport(std::string_view name) {
  for (size_t i = 0; i < kTransports.size(); ++i)
    if (kTransports[i] == name) return static_cast<int>(i);
  return std::nullopt;
}

bool IsDirect(int t) {
  return t == P2PTRACE_TRANSPORT_NVLINK || t == P2PTRACE_TRANSPORT_PCIE_P2P || t == P2PTRACE_TRANSPORT_P2P ||
         t == P2PTRACE_TRANSPORT_P2P_INDIRECT;
}

std::string_view ApiName(int api) {
  return api >= 0 && api < static_cast<int>(kApis.size()) ? kApis[api] : "unknown";
}

}  // namespace p2ptrace
