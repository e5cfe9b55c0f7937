// Names of the stable numbers in include/p2ptrace/vocabulary.h, as the CLI and JSON print them.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "p2ptrace/vocabulary.h"

namespace p2ptrace {

// "nvlink", "pcie_p2p", "p2p", …, "unknown" for values it does not know.
std::string_view TransportName(int transport);
std::optional<int> ParseTransport(std::string_view name);
// True for the classes that move bytes directly between the two GPUs.
bool IsDirect(int transport);
// "cudaMemcpyPeer", …; "unknown" for values it does not know.
std::string_view ApiName(int api);
// Whether a p2ptrace_api is the CUDA driver's (cu*) rather than the runtime's (cuda*).
inline bool IsDriverApi(int api) {
  return (api >= P2PTRACE_API_cuDeviceCanAccessPeer && api <= P2PTRACE_API_cuMemcpy3DPeerAsync) ||
         api == P2PTRACE_API_cuGraphAddMemcpyNode ||
         (api >= P2PTRACE_API_cuGraphExecMemcpyNodeSetParams && api <= P2PTRACE_API_cuGraphDestroyNode) ||
         api == P2PTRACE_API_cuGraphAddNode;
}
// "ncclAllReduce", "ncclCommInitRank", …; "unknown" for values it does not know.
std::string_view NcclApiName(int api);
// "float32", "bfloat16", … for an ncclDataType_t; "" for values it does not know.
std::string_view NcclTypeName(int datatype);
// The NCCL calls that create a communicator (p2ptrace_nccl_api).
inline bool IsNcclCommCreation(int api) { return api >= P2PTRACE_NCCL_CommInitRank && api <= P2PTRACE_NCCL_CommSplit; }

}  // namespace p2ptrace
