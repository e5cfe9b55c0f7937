// nccl-tests' definitions of an NCCL operation's size and bandwidths (its doc/PERFORMANCE.md and
// each test's GetBw): the size S of one call, algbw = S / time, busbw = algbw × a factor of the
// operation and the communicator's size n. The trace records NCCL's count argument × the type's
// size (trace_format.h); S follows from it:
//   AllReduce, Broadcast, Reduce, Send, Recv   S = count bytes            busbw factor 2(n-1)/n for
//                                                                         AllReduce, else 1
//   AllGather, ReduceScatter, AlltoAll,        S = count bytes × n        (n-1)/n
//   Gather, Scatter                            (count is one rank's block: the whole buffer is n of them)
// Send/recv in one group (nccl-tests' sendrecv, and alltoall, gather and scatter before NCCL 2.28)
// are figured as the group: S = this rank's bytes of that kind in it, over the group's time.
#pragma once

#include <algorithm>
#include <cstdint>

#include "p2ptrace/vocabulary.h"

namespace p2ptrace::cli {

// S in bytes for one call whose count × type size is `count_bytes`, on `nranks` ranks (at least 1).
inline double NcclTestsSize(int api, uint64_t count_bytes, int nranks) {
  double n = std::max(nranks, 1);
  switch (api) {
    case P2PTRACE_NCCL_AllGather:
    case P2PTRACE_NCCL_ReduceScatter:
    case P2PTRACE_NCCL_AlltoAll:
    case P2PTRACE_NCCL_Gather:
    case P2PTRACE_NCCL_Scatter: return static_cast<double>(count_bytes) * n;
    default: return static_cast<double>(count_bytes);
  }
}

// busbw / algbw.
inline double NcclBusFactor(int api, int nranks) {
  double n = std::max(nranks, 1);
  switch (api) {
    case P2PTRACE_NCCL_AllReduce: return 2 * (n - 1) / n;
    case P2PTRACE_NCCL_AllGather:
    case P2PTRACE_NCCL_ReduceScatter:
    case P2PTRACE_NCCL_AlltoAll:
    case P2PTRACE_NCCL_Gather:
    case P2PTRACE_NCCL_Scatter: return (n - 1) / n;
    default: return 1;
  }
}

}  // namespace p2ptrace::cli
