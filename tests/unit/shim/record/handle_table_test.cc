// shim/record/handle_table.h: the lock-free handle -> value map of streams and graph execs.
#include "shim/record/handle_table.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace p2ptrace::shim {
namespace {

using Table = HandleTable<uint32_t, 64>;  // 48 slots usable

TEST(HandleTable, PutLookupEraseAndReplace) {
  static Table t;
  EXPECT_EQ(t.Lookup(0x1000, 0), 0u);
  EXPECT_TRUE(t.Put(0x1000, 7));
  EXPECT_TRUE(t.Put(0x2000, 8));
  EXPECT_EQ(t.Lookup(0x1000, 0), 7u);
  EXPECT_TRUE(t.Put(0x1000, 9));  // an exec updated to another graph
  EXPECT_EQ(t.Lookup(0x1000, 0), 9u);
  t.Erase(0x1000);
  EXPECT_EQ(t.Lookup(0x1000, 0), 0u);
  EXPECT_EQ(t.Lookup(0x2000, 0), 8u);
  EXPECT_FALSE(t.Put(Table::kNone, 1));
  EXPECT_FALSE(t.Put(Table::kErased, 1));
}

// Handles that collide, erased in the middle of their probe run, stay findable; churn far past the
// table's size (tombstones, rebuilds) loses no live handle.
TEST(HandleTable, ChurnKeepsEveryLiveHandle) {
  static Table t;
  for (uintptr_t round = 0; round < 200; ++round) {
    for (uintptr_t i = 0; i < 40; ++i) ASSERT_TRUE(t.Put((round << 20) + (i << 4) + 16, static_cast<uint32_t>(i + 1)));
    for (uintptr_t i = 0; i < 40; i += 2) t.Erase((round << 20) + (i << 4) + 16);
    for (uintptr_t i = 1; i < 40; i += 2) ASSERT_EQ(t.Lookup((round << 20) + (i << 4) + 16, 0), i + 1) << round;
    for (uintptr_t i = 1; i < 40; i += 2) t.Erase((round << 20) + (i << 4) + 16);
  }
  for (uintptr_t i = 0; i < 48; ++i) EXPECT_TRUE(t.Put((i + 1) * 4096, 1));
  EXPECT_FALSE(t.Put(4096 * 1000, 1)) << "more live handles than 3/4 of the slots";
  EXPECT_EQ(t.Lookup(4096 * 1000, 0), 0u);
}

}  // namespace
}  // namespace p2ptrace::shim
