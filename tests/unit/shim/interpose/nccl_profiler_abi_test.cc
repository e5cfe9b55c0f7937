// NCCL's profiler ABI as p2ptrace spells it (shim/interpose/nccl_profiler_abi.h): descriptors laid
// out byte by byte at the offsets NCCL's headers give (docs/research/nccl-profiler-abi.md §1.9) read
// back through p2ptrace's names, for the members the per-pair timing reads.
#include "shim/interpose/nccl_profiler_abi.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace {

namespace np = p2ptrace::nccl_profiler;

template <typename T>
void Put(std::vector<unsigned char>& bytes, size_t at, T v) {
  std::memcpy(bytes.data() + at, &v, sizeof v);
}
template <typename Descr>
Descr As(const std::vector<unsigned char>& bytes) {
  Descr d;
  std::memcpy(&d, bytes.data(), sizeof d);
  return d;
}

TEST(NcclProfilerAbi, AV5SendReadsItsPeerCountAndGroup) {
  std::vector<unsigned char> b(sizeof(np::v5::Descr), 0);
  int group = 0;
  Put<uint64_t>(b, 0, np::kP2p);
  Put<int>(b, 16, 3);              // rank
  Put<size_t>(b, 24 + 24, 4096);   // p2p.count
  Put<int>(b, 24 + 32, 5);         // p2p.peer
  Put<uint8_t>(b, 24 + 36, 2);     // p2p.nChannels
  Put<void*>(b, 24 + 40, &group);  // p2p.parentGroup
  auto d = As<np::v5::Descr>(b);
  EXPECT_EQ(d.type, np::kP2p);
  EXPECT_EQ(d.rank, 3);
  EXPECT_EQ(d.p2p.count, 4096u);
  EXPECT_EQ(d.p2p.peer, 5);
  EXPECT_EQ(d.p2p.channels, 2);
  EXPECT_EQ(d.p2p.parent_group, &group);
}

TEST(NcclProfilerAbi, KernelChannelTimersAndProxyOpsReadBackInEveryVersionThatHasThem) {
  std::vector<unsigned char> b(sizeof(np::v7::Descr), 0);
  Put<uint8_t>(b, 24, 7);                  // kernelCh.channelId
  Put<uint64_t>(b, 24 + 8, 123456789ull);  // kernelCh.pTimer
  EXPECT_EQ(As<np::v4::Descr>(b).kernel_ch.channel, 7);
  EXPECT_EQ(As<np::v4::Descr>(b).kernel_ch.timer, 123456789ull);
  EXPECT_EQ(As<np::v7::Descr>(b).kernel_ch.timer, 123456789ull);
  EXPECT_EQ(As<np::v3::Descr>(b).kernel_ch.channel, 7);  // v3: the channel, no timer
  std::vector<unsigned char> p(sizeof(np::v1::Descr), 0);
  Put<int>(p, 24 + 8, 6);   // proxyOp.peer
  Put<int>(p, 24 + 20, 1);  // proxyOp.isSend
  EXPECT_EQ(As<np::v1::Descr>(p).proxy_op.peer, 6);
  EXPECT_EQ(As<np::v1::Descr>(p).proxy_op.is_send, 1);
  np::StateArgs args{};
  args.kernel_ch.timer = 42;  // a KernelChStop's stop time is the union's first 8 bytes
  uint64_t raw = 0;
  std::memcpy(&raw, &args, sizeof raw);
  EXPECT_EQ(raw, 42u);
}

TEST(NcclProfilerAbi, AV7CollectiveKeepsItsTagAfterTheV5Fields) {
  std::vector<unsigned char> b(sizeof(np::v7::Descr), 0);
  Put<uint64_t>(b, 24 + 0, 17);    // coll.seqNumber
  Put<uint8_t>(b, 24 + 56, 4);     // coll.nChannels
  Put<bool>(b, 24 + 96, true);     // coll.isSymColl
  Put<uint64_t>(b, 24 + 104, 99);  // coll.userTag
  auto d = As<np::v7::Descr>(b);
  EXPECT_EQ(d.coll.seq, 17u);
  EXPECT_EQ(d.coll.channels, 4);
  EXPECT_TRUE(d.coll.is_sym_coll);
  EXPECT_EQ(d.coll.user_tag, 99u);
  EXPECT_EQ(As<np::v5::Descr>(b).coll.seq, 17u);  // the fields v5 has sit where v5 has them
}

}  // namespace

// Each release's first version looked up, at the first release of each version and just before it.
TEST(NcclProfilerAbi, EachReleaseCallsTheNewestVersionItKnows) {
  namespace np = p2ptrace::nccl_profiler;
  const std::pair<int, int> cases[] = {{22303, 0}, {22304, 1}, {22402, 1}, {22403, 2}, {22601, 2}, {22602, 3},
                                       {22702, 3}, {22703, 4}, {22802, 4}, {22803, 5}, {22809, 5}, {22901, 5},
                                       {22902, 6}, {23007, 6}, {23101, 6}, {23102, 7}, {23203, 7}};
  for (const auto& [code, version] : cases) EXPECT_EQ(np::NewestVersion(code), version) << code;
}
