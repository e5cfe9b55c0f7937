// The shim's pointer→device map: lock-free granules where one device owns a 2 MiB block (from its
// first to its last allocation there), the exact ranges where two devices share one.
#include "shim/interpose/memory_map.h"

#include <gtest/gtest.h>

namespace {

using p2ptrace::shim::MemoryMap;

constexpr uintptr_t kBlock = uintptr_t{1} << 21;
const void* At(uintptr_t a) { return reinterpret_cast<const void*>(a); }

class MemoryMapTest : public ::testing::Test {
 protected:
  void SetUp() override { MemoryMap::ForgetAll(); }
};

TEST_F(MemoryMapTest, WholeBlocksAnswerTheirOwner) {
  uintptr_t base = 0x7f0000000000;
  MemoryMap::Add(At(base), 3 * kBlock, 5);
  EXPECT_EQ(MemoryMap::Lookup(At(base)), 5);
  EXPECT_EQ(MemoryMap::Lookup(At(base + 3 * kBlock - 1)), 5);
  EXPECT_EQ(MemoryMap::Lookup(At(base + 3 * kBlock)), MemoryMap::kUnknown);
  EXPECT_EQ(MemoryMap::Lookup(At(base - 1)), MemoryMap::kUnknown);
  EXPECT_TRUE(MemoryMap::Remove(At(base)));
  EXPECT_EQ(MemoryMap::Lookup(At(base + kBlock)), MemoryMap::kUnknown);
  EXPECT_FALSE(MemoryMap::Remove(At(base)));
}

TEST_F(MemoryMapTest, PartlyCoveredBlockLeavesItsHostPartsHost) {
  uintptr_t base = 0x7f0000200000 + 0x1000;  // 1 MiB inside one block, host pages around it
  MemoryMap::Add(At(base), 1 << 20, 4);
  EXPECT_EQ(MemoryMap::Lookup(At(base)), 4);
  EXPECT_EQ(MemoryMap::Lookup(At(base + (1 << 20) - 1)), 4);
  EXPECT_EQ(MemoryMap::Lookup(At(base - 1)), MemoryMap::kUnknown);
  EXPECT_EQ(MemoryMap::Lookup(At(base + (1 << 20))), MemoryMap::kUnknown);
  // A neighbour of another device in the same block.
  MemoryMap::Add(At(base + (1 << 20)), 4096, 1);
  EXPECT_EQ(MemoryMap::Lookup(At(base + (1 << 20))), 1);
  EXPECT_EQ(MemoryMap::Lookup(At(base + 10)), 4);
}

// Two small allocations of one device with a gap between them: the gap is that device's too (real
// CUDA carves each device's memory from its own ranges), and the quick lookup proves it without
// the exact map. Outside the first and last allocation it still knows nothing.
TEST_F(MemoryMapTest, OneDevicesSmallAllocationsSpanTheirGaps) {
  uintptr_t base = 0x7f0000a00000;
  MemoryMap::Add(At(base + 0x1000), 4096, 6);
  MemoryMap::Add(At(base + 0x9000), 4096, 6);
  EXPECT_EQ(MemoryMap::Lookup(At(base + 0x5000)), 6);
  EXPECT_EQ(MemoryMap::QuickLookup(At(base + 0x5000), -9), 6);
  EXPECT_EQ(MemoryMap::QuickLookup(At(base + 0x9fff), -9), 6);
  EXPECT_EQ(MemoryMap::QuickLookup(At(base + 0xa000), -9), -9);
  EXPECT_EQ(MemoryMap::Lookup(At(base + 0xa000)), MemoryMap::kUnknown);
  EXPECT_EQ(MemoryMap::Lookup(At(base + 0xfff)), MemoryMap::kUnknown);
  // A whole granule answers at once; one shared with a second device is left to the exact map.
  MemoryMap::Add(At(base + kBlock), kBlock, 2);
  EXPECT_EQ(MemoryMap::QuickLookup(At(base + kBlock + 12345), -9), 2);
  MemoryMap::Add(At(base + 0x20000), 4096, 3);
  EXPECT_EQ(MemoryMap::QuickLookup(At(base + 0x20000), -9), -9);
  EXPECT_EQ(MemoryMap::Lookup(At(base + 0x20000)), 3);
  EXPECT_EQ(MemoryMap::Lookup(At(base + 0x1000)), 6);
  EXPECT_EQ(MemoryMap::Lookup(At(base + 0x5000)), MemoryMap::kUnknown);  // exact map: a real gap
}

TEST_F(MemoryMapTest, LearningNeverOverridesWhatWasAllocated) {
  uintptr_t base = 0x7f0000400000;
  MemoryMap::Add(At(base), kBlock, 2);
  MemoryMap::Learn(At(base + 5), MemoryMap::kHost);
  EXPECT_EQ(MemoryMap::Lookup(At(base + 5)), 2);
  MemoryMap::Learn(At(base + 4 * kBlock), 7);
  EXPECT_EQ(MemoryMap::Lookup(At(base + 4 * kBlock + 100)), 7);
}

TEST_F(MemoryMapTest, AddressesBeyondTheTableUseTheExactMap) {
  uintptr_t high = uintptr_t{1} << 50;
  MemoryMap::Add(At(high), kBlock, 3);
  EXPECT_EQ(MemoryMap::Lookup(At(high + 7)), 3);
  EXPECT_EQ(MemoryMap::Lookup(At(high + kBlock)), MemoryMap::kUnknown);
}

}  // namespace
