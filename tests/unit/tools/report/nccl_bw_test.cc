// nccl-tests' definitions (tools/report/nccl_bw.h), each operation against the figures nccl-tests prints
// for the same call: its "size" column and the algbw/busbw of its GetBw, worked out by hand from
// the test's sources (NVIDIA/nccl-tests src/<op>.cu: GetCollByteCount's counts, GetBw's baseBw and
// factor) for a communicator of n ranks and a time t.
#include "tools/report/nccl_bw.h"

#include <gtest/gtest.h>

namespace p2ptrace::cli {
namespace {

constexpr uint64_t MiB = 1 << 20;

// nccl-tests' alltoall of "size" 8 MiB on 4 ranks calls ncclAlltoAll with count = 8 MiB / 4 / 4
// floats (one peer's block): the trace's count bytes are 2 MiB, S is the whole 8 MiB (52 such
// calls once showed as 104 MiB, a quarter of 52 × 8 MiB).
TEST(NcclBw, AlltoAllIsTheWholeSendBuffer) {
  EXPECT_DOUBLE_EQ(NcclTestsSize(P2PTRACE_NCCL_AlltoAll, 2 * MiB, 4), 8.0 * MiB);
  EXPECT_DOUBLE_EQ(52 * NcclTestsSize(P2PTRACE_NCCL_AlltoAll, 2 * MiB, 4), 416.0 * MiB);
  EXPECT_DOUBLE_EQ(NcclBusFactor(P2PTRACE_NCCL_AlltoAll, 4), 3.0 / 4);
}

// allgather: sendcount = size / n, algbw = sendcount × n / t: S is the receive buffer.
TEST(NcclBw, AllGatherAndReduceScatterAreTheWholeBuffer) {
  EXPECT_DOUBLE_EQ(NcclTestsSize(P2PTRACE_NCCL_AllGather, MiB, 8), 8.0 * MiB);
  EXPECT_DOUBLE_EQ(NcclBusFactor(P2PTRACE_NCCL_AllGather, 8), 7.0 / 8);
  // reducescatter: recvcount = size / n, algbw = recvcount × n / t: S is the send buffer.
  EXPECT_DOUBLE_EQ(NcclTestsSize(P2PTRACE_NCCL_ReduceScatter, MiB, 8), 8.0 * MiB);
  EXPECT_DOUBLE_EQ(NcclBusFactor(P2PTRACE_NCCL_ReduceScatter, 8), 7.0 / 8);
}

// gather: sendcount = size / n, algbw = count × n / t; scatter: recvcount = size / n, the same.
TEST(NcclBw, GatherAndScatterAreTheRootsBuffer) {
  EXPECT_DOUBLE_EQ(NcclTestsSize(P2PTRACE_NCCL_Gather, MiB, 4), 4.0 * MiB);
  EXPECT_DOUBLE_EQ(NcclTestsSize(P2PTRACE_NCCL_Scatter, MiB, 4), 4.0 * MiB);
  EXPECT_DOUBLE_EQ(NcclBusFactor(P2PTRACE_NCCL_Gather, 4), 3.0 / 4);
  EXPECT_DOUBLE_EQ(NcclBusFactor(P2PTRACE_NCCL_Scatter, 4), 3.0 / 4);
}

// allreduce, broadcast, reduce and sendrecv: count = size / type size, algbw = count × type size / t.
TEST(NcclBw, WholeBufferOperations) {
  for (int api : {P2PTRACE_NCCL_AllReduce, P2PTRACE_NCCL_Broadcast, P2PTRACE_NCCL_Reduce, P2PTRACE_NCCL_Send,
                  P2PTRACE_NCCL_Recv})
    EXPECT_DOUBLE_EQ(NcclTestsSize(api, 3 * MiB, 8), 3.0 * MiB) << api;
  EXPECT_DOUBLE_EQ(NcclBusFactor(P2PTRACE_NCCL_AllReduce, 8), 2.0 * 7 / 8);
  EXPECT_DOUBLE_EQ(NcclBusFactor(P2PTRACE_NCCL_AllReduce, 2), 1.0);
  for (int api : {P2PTRACE_NCCL_Broadcast, P2PTRACE_NCCL_Reduce, P2PTRACE_NCCL_Send, P2PTRACE_NCCL_Recv})
    EXPECT_DOUBLE_EQ(NcclBusFactor(api, 8), 1.0) << api;
}

// One rank: nothing crosses a link, busbw 0 for the n-1 operations.
TEST(NcclBw, OneRank) {
  EXPECT_DOUBLE_EQ(NcclTestsSize(P2PTRACE_NCCL_AllGather, MiB, 1), 1.0 * MiB);
  EXPECT_DOUBLE_EQ(NcclBusFactor(P2PTRACE_NCCL_AllReduce, 1), 0.0);
  EXPECT_DOUBLE_EQ(NcclTestsSize(P2PTRACE_NCCL_AlltoAll, MiB, 0), 1.0 * MiB);  // unknown size: as one rank
}

}  // namespace
}  // namespace p2ptrace::cli
