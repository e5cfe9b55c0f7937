// The shim's pointer→device map: lock-free granules where one device owns a 2 MiB block, the exact
// ranges where two devices share one.
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

// One device's allocations make its granule its own, whole: CUDA maps device memory in 2 MiB pages
// from each device's own reservations, so the rest of the granule is that device's memory the shim
// did not see allocated, never host memory; the quick lookup proves it without the exact map.
TEST_F(MemoryMapTest, OneDevicesSmallAllocationsMakeTheirGranuleItsOwn) {
  uintptr_t base = 0x7f0000a00000;
  MemoryMap::Add(At(base + 0x1000), 4096, 6);
  MemoryMap::Add(At(base + 0x9000), 4096, 6);
  for (uintptr_t off : {uintptr_t{0}, uintptr_t{0xfff}, uintptr_t{0x5000}, uintptr_t{0x9fff}, uintptr_t{0xa000}, kBlock - 1}) {
    EXPECT_EQ(MemoryMap::Lookup(At(base + off)), 6) << off;
    EXPECT_EQ(MemoryMap::QuickLookup(At(base + off), -9), 6) << off;
  }
  EXPECT_EQ(MemoryMap::Lookup(At(base + kBlock)), MemoryMap::kUnknown);  // the next granule: nothing known
  EXPECT_EQ(MemoryMap::QuickLookup(At(base - 1), -9), -9);
  // Freed, the granule knows nothing again.
  EXPECT_TRUE(MemoryMap::Remove(At(base + 0x1000)));
  EXPECT_EQ(MemoryMap::QuickLookup(At(base + 0x5000), -9), 6);
  EXPECT_TRUE(MemoryMap::Remove(At(base + 0x9000)));
  EXPECT_EQ(MemoryMap::QuickLookup(At(base + 0x5000), -9), -9);
  EXPECT_EQ(MemoryMap::Lookup(At(base + 0x5000)), MemoryMap::kUnknown);
}

// A granule shared by two devices is left to the exact map: each allocation answers its own
// device, a gap between them nothing; the quick lookup says "not proven".
TEST_F(MemoryMapTest, AGranuleOfTwoDevicesAsksTheExactMap) {
  uintptr_t base = 0x7f0000200000;
  MemoryMap::Add(At(base + 0x1000), 1 << 20, 4);
  MemoryMap::Add(At(base + 0x1000 + (2 << 20) / 2 + 0x10000), 4096, 1);
  EXPECT_EQ(MemoryMap::QuickLookup(At(base + 0x1000), -9), -9);
  EXPECT_EQ(MemoryMap::Lookup(At(base + 0x1000 + 10)), 4);
  EXPECT_EQ(MemoryMap::Lookup(At(base + 0x1000 + (2 << 20) / 2 + 0x10000)), 1);
  EXPECT_EQ(MemoryMap::Lookup(At(base + 0x1000 + (1 << 20) + 8)), MemoryMap::kUnknown);  // a real gap
  // A whole granule next to it answers at once.
  MemoryMap::Add(At(base + kBlock), kBlock, 2);
  EXPECT_EQ(MemoryMap::QuickLookup(At(base + kBlock + 12345), -9), 2);
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
