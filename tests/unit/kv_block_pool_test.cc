// BlockPool: allocation, ref counts, LRU free order.
#include <gtest/gtest.h>

#include "kv/block_pool.h"
#include "kv/block_table.h"

namespace pdserve::kv {
namespace {

TEST(BlockPool, AllocateFreeAndRefCounts) {
  BlockPool pool(8);
  EXPECT_EQ(pool.num_free(), 8);
  std::vector<int32_t> a;
  ASSERT_TRUE(pool.allocate(5, a));
  EXPECT_EQ(a.size(), 5u);
  EXPECT_EQ(pool.num_used(), 5);
  std::vector<int32_t> b;
  EXPECT_FALSE(pool.allocate(4, b));  // all or nothing
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(pool.num_free(), 3);
  pool.incref(a[0]);
  EXPECT_EQ(pool.ref_count(a[0]), 2);
  pool.decref(a[0]);
  EXPECT_EQ(pool.num_free(), 3);  // still referenced once
  for (int32_t x : a) pool.decref(x);
  EXPECT_EQ(pool.num_free(), 8);
  EXPECT_EQ(pool.ref_count(a[0]), 0);
}

TEST(BlockPool, FreedBlocksAreReusedLeastRecentlyFreedFirst) {
  BlockPool pool(4);
  std::vector<int32_t> a;
  ASSERT_TRUE(pool.allocate(4, a));
  // Free tail first, as a finished sequence does: the prefix block stays free longest.
  for (auto it = a.rbegin(); it != a.rend(); ++it) pool.decref(*it);
  std::vector<int32_t> b;
  ASSERT_TRUE(pool.allocate(1, b));
  EXPECT_EQ(b[0], a[3]);
  ASSERT_TRUE(pool.allocate(3, b));
  EXPECT_EQ(b, (std::vector<int32_t>{a[3], a[2], a[1], a[0]}));
}

TEST(BlockTable, SlotMapping) {
  BlockTable t;
  t.blocks = {7, 2, 5};
  EXPECT_EQ(t.slot(0, 4), 28);
  EXPECT_EQ(t.slot(3, 4), 31);
  EXPECT_EQ(t.slot(4, 4), 8);
  EXPECT_EQ(t.slot(9, 4), 21);
}

}  // namespace
}  // namespace pdserve::kv
