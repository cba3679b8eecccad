// Token eviction without a model: which positions each policy keeps (kv::select_kept), the
// flag checks, and KvCacheManager::evict_tokens' block-table compaction — moved K/V,
// freed blocks, and copy-on-write of blocks a fork sibling or the prefix cache can see.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "kv/kv_cache_manager.h"
#include "kv/token_eviction.h"

namespace pdserve::kv {
namespace {

std::vector<int32_t> range(int a, int b) {
  std::vector<int32_t> v(b - a);
  std::iota(v.begin(), v.end(), a);
  return v;
}

std::vector<int32_t> cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(TokenEviction, StreamingKeepsSinksAndTheRecentWindow) {
  TokenEvictionConfig c;
  c.policy = TokenEvictionPolicy::kStreaming;
  c.sinks = 4;
  EXPECT_EQ(select_kept(c, 10, 25, nullptr), cat(range(0, 4), range(19, 25)));
  EXPECT_EQ(select_kept(c, 10, 10, nullptr), range(0, 10));  // at the budget: all
  EXPECT_EQ(select_kept(c, 10, 7, nullptr), range(0, 7));
  c.sinks = 0;
  EXPECT_EQ(select_kept(c, 5, 9, nullptr), range(4, 9));
}

TEST(TokenEviction, H2oKeepsSinksRecentAndTheLargestMass) {
  TokenEvictionConfig c;
  c.policy = TokenEvictionPolicy::kH2o;
  c.sinks = 2;
  c.recent = 3;
  //                      0    1    2    3    4    5    6    7    8    9   10   11
  const float mass[] = {9.f, 0.f, 1.f, 5.f, 0.f, 7.f, 2.f, 0.f, 6.f, 9.f, 0.f, 0.f};
  // budget 8: sinks {0,1}, recent {9,10,11}, heavy 3 of [2, 9): 5 (7), 8 (6), 3 (5).
  EXPECT_EQ(select_kept(c, 8, 12, mass), (std::vector<int32_t>{0, 1, 3, 5, 8, 9, 10, 11}));
  // Ties go to the later position.
  const float flat[] = {1.f, 1.f, 1.f, 1.f, 1.f, 1.f, 1.f, 1.f};
  EXPECT_EQ(select_kept(c, 6, 8, flat), (std::vector<int32_t>{0, 1, 4, 5, 6, 7}));
  // Recent as a ratio of the budget: floor(0.5 * 8) = 4 recent, 2 heavy.
  c.recent = -1;
  c.recent_ratio = 0.5;
  EXPECT_EQ(c.recent_for(8), 4);
  EXPECT_EQ(select_kept(c, 8, 12, mass), (std::vector<int32_t>{0, 1, 3, 5, 8, 9, 10, 11}));
}

TEST(TokenEviction, MinimumBudgetAndFlagCheck) {
  TokenEvictionConfig c;  // h2o, 4 sinks, recent 0.5 of the budget
  EXPECT_EQ(c.min_budget(), 7);  // 7 >= 4 + floor(0.5 * 7), 6 < 4 + 3
  EXPECT_EQ(c.check(0), "");
  EXPECT_NE(c.check(c.min_budget() - 1), "");
  EXPECT_EQ(c.check(c.min_budget()), "");
  c.recent = 10;
  EXPECT_EQ(c.min_budget(), 14);
  EXPECT_NE(c.check(13).find("--kv-budget 13"), std::string::npos);
  c.policy = TokenEvictionPolicy::kStreaming;
  EXPECT_EQ(c.min_budget(), 4);
  EXPECT_EQ(c.recent_for(20), 16);
}

TEST(TokenEviction, AttentionMassAddsInOrderAndGrows) {
  std::vector<float> m;
  const float a[] = {0.5f, 0.5f};
  const float b[] = {0.25f, 0.25f, 0.5f};
  add_attention_mass(m, a, 2);
  add_attention_mass(m, b, 3);
  EXPECT_EQ(m, (std::vector<float>{0.75f, 0.75f, 0.5f}));
}

// A 2-layer f32 cache, one KV head of dim 2, blocks of 4 tokens: entry value = position.
struct Fixture {
  static KvCacheShape shape(int blocks) {
    KvCacheShape s;
    s.n_layers = 2;
    s.n_kv_heads = 1;
    s.head_dim = 2;
    s.block_size = 4;
    s.num_blocks = blocks;
    s.dtype = kernels::KvDtype::F32;
    return s;
  }
  static void write(KvCacheManager& m, const KvSeq& s, int entry, float value) {
    for (int l = 0; l < 2; ++l) {
      const int32_t b = s.block_table.blocks[entry / 4];
      float* k = reinterpret_cast<float*>(m.block_k(l, b)) + (entry % 4) * 2;
      float* v = reinterpret_cast<float*>(m.block_v(l, b)) + (entry % 4) * 2;
      k[0] = k[1] = value + l;
      v[0] = v[1] = -value - l;
    }
  }
  static float read_k(KvCacheManager& m, const KvSeq& s, int entry, int l = 1) {
    return reinterpret_cast<float*>(m.block_k(l, s.block_table.blocks[entry / 4]))[(entry % 4) * 2] - l;
  }
  static float read_v(KvCacheManager& m, const KvSeq& s, int entry, int l = 1) {
    return -reinterpret_cast<float*>(m.block_v(l, s.block_table.blocks[entry / 4]))[(entry % 4) * 2] - l;
  }
};

TEST(TokenEviction, CompactionMovesKeptEntriesAndFreesBlocks) {
  KvCacheManager m(Fixture::shape(16), false, EvictionPolicy::kLru);
  TokenEvictionConfig c;
  c.policy = TokenEvictionPolicy::kStreaming;
  c.sinks = 2;
  KvSeq s;
  ASSERT_TRUE(m.allocate_slots(s, 20));
  for (int p = 0; p < 20; ++p) Fixture::write(m, s, p, static_cast<float>(p));
  EXPECT_EQ(m.usage().used, 5);
  ASSERT_TRUE(m.evict_tokens(s, 20, c, 8));  // keep 0, 1, 14..19
  EXPECT_EQ(s.num_evicted, 12);
  EXPECT_EQ(s.num_blocks(), 2);
  EXPECT_EQ(m.usage().used, 2);
  const std::vector<int32_t> want = {0, 1, 14, 15, 16, 17, 18, 19};
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(s.kept_position(i), want[i]);
    EXPECT_EQ(Fixture::read_k(m, s, i), want[i]);
    EXPECT_EQ(Fixture::read_v(m, s, i), want[i]);
    EXPECT_EQ(Fixture::read_k(m, s, i, 0), want[i]);
  }
  // The next position (20) goes to entry 8; after it, evicting again drops position 14.
  ASSERT_TRUE(m.allocate_slots(s, 21));
  EXPECT_EQ(s.num_blocks(), 3);
  EXPECT_EQ(s.kept_position(8), 20);
  Fixture::write(m, s, 8, 20.f);
  ASSERT_TRUE(m.evict_tokens(s, 21, c, 8));
  EXPECT_EQ(s.num_blocks(), 2);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(Fixture::read_k(m, s, i), s.kept_position(i));
  EXPECT_EQ(s.kept_position(2), 15);
  EXPECT_EQ(s.kept_position(7), 20);
  m.free(s);
  EXPECT_EQ(m.usage().free, 16);
  EXPECT_EQ(s.num_evicted, 0);
}

TEST(TokenEviction, H2oCompactionCarriesTheMass) {
  KvCacheManager m(Fixture::shape(8), false, EvictionPolicy::kLru);
  TokenEvictionConfig c;
  c.sinks = 1;
  c.recent = 1;
  KvSeq s;
  ASSERT_TRUE(m.allocate_slots(s, 6));
  for (int p = 0; p < 6; ++p) Fixture::write(m, s, p, static_cast<float>(p));
  s.attn_mass = {1.f, 0.1f, 3.f, 0.2f, 2.f, 0.f};
  ASSERT_TRUE(m.evict_tokens(s, 6, c, 4));  // 0 (sink), 2 and 4 (heavy), 5 (recent)
  EXPECT_EQ(s.attn_mass, (std::vector<float>{1.f, 3.f, 2.f, 0.f}));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(Fixture::read_k(m, s, i), (std::vector<int>{0, 2, 4, 5})[i]);
}

TEST(TokenEviction, ForkSiblingsBlocksAreCopiedNotWritten) {
  KvCacheManager m(Fixture::shape(16), false, EvictionPolicy::kLru);
  TokenEvictionConfig c;
  c.policy = TokenEvictionPolicy::kStreaming;
  c.sinks = 1;
  KvSeq parent, child;
  ASSERT_TRUE(m.allocate_slots(parent, 12));
  for (int p = 0; p < 12; ++p) Fixture::write(m, parent, p, static_cast<float>(p));
  ASSERT_TRUE(m.fork(parent, 12, child));  // shares all 3 full blocks
  EXPECT_EQ(m.usage().used, 3);
  ASSERT_TRUE(m.evict_tokens(child, 12, c, 5));  // keep 0, 8..11: block 0 changes, copied
  EXPECT_EQ(child.num_blocks(), 2);
  EXPECT_NE(child.block_table.blocks[0], parent.block_table.blocks[0]);
  EXPECT_NE(child.block_table.blocks[1], parent.block_table.blocks[1]);
  for (int p = 0; p < 12; ++p) EXPECT_EQ(Fixture::read_k(m, parent, p), p);  // the parent's KV unchanged
  for (int i = 0; i < 5; ++i) EXPECT_EQ(Fixture::read_k(m, child, i), (std::vector<int>{0, 8, 9, 10, 11})[i]);
  EXPECT_EQ(m.usage().used, 5);  // parent 3 + child's 2 copies
  m.free(child);
  EXPECT_EQ(m.usage().used, 3);
  m.free(parent);
  EXPECT_EQ(m.usage().free, 16);
}

TEST(TokenEviction, PrefixCacheBlocksAreCopiedNotWritten) {
  KvCacheManager m(Fixture::shape(16), true, EvictionPolicy::kLru);
  TokenEvictionConfig c;
  c.policy = TokenEvictionPolicy::kStreaming;
  c.sinks = 1;
  const std::vector<int32_t> tokens = range(100, 112);
  KvSeq a;
  EXPECT_EQ(m.match_prefix(a, "", tokens.data(), 11), 0);
  ASSERT_TRUE(m.allocate_slots(a, 12));
  for (int p = 0; p < 12; ++p) Fixture::write(m, a, p, static_cast<float>(p));
  m.cache_full_blocks(a, tokens.data(), 12);  // 3 blocks into the radix cache
  const std::vector<int32_t> cached = a.block_table.blocks;
  ASSERT_TRUE(m.evict_tokens(a, 12, c, 5));
  EXPECT_EQ(a.cache_node, nullptr);  // its lock is gone
  for (int32_t b : a.block_table.blocks) EXPECT_EQ(std::count(cached.begin(), cached.end(), b), 0);
  EXPECT_EQ(m.usage().used, 2);
  EXPECT_EQ(m.usage().cached, 3);
  // Another sequence still finds the prompt's KV as it was computed.
  KvSeq b;
  EXPECT_EQ(m.match_prefix(b, "", tokens.data(), 12), 12);
  for (int p = 0; p < 12; ++p) EXPECT_EQ(Fixture::read_k(m, b, p), p);
  m.free(a);
  m.free(b);
  EXPECT_EQ(m.usage().used, 0);
  EXPECT_EQ(m.usage().free + m.usage().cached, 16);
}

TEST(TokenEviction, FailsCleanlyWhenNoBlockIsFreeForACopy) {
  KvCacheManager m(Fixture::shape(3), false, EvictionPolicy::kLru);
  TokenEvictionConfig c;
  c.policy = TokenEvictionPolicy::kStreaming;
  c.sinks = 1;
  KvSeq parent, child;
  ASSERT_TRUE(m.allocate_slots(parent, 12));
  ASSERT_TRUE(m.fork(parent, 12, child));
  EXPECT_FALSE(m.evict_tokens(child, 12, c, 5));  // needs 2 fresh blocks, none free
  EXPECT_EQ(child.num_evicted, 0);
  EXPECT_EQ(child.block_table.blocks, parent.block_table.blocks);
  m.free(child);
  m.free(parent);
  EXPECT_EQ(m.usage().free, 3);
}

}  // namespace
}  // namespace pdserve::kv
