// RadixCache: prefix matching on real token ids, dedupe, lock refs and exact
// evictable counts, LRU/LFU eviction order, namespaces.
#include <gtest/gtest.h>

#include <numeric>

#include "kv/radix_cache.h"

namespace pdserve::kv {
namespace {

constexpr int kBs = 4;

std::vector<int32_t> seq(int n, int start) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), start);
  return t;
}

/// Inserts the full blocks of `tokens` as a sequence would (allocating its own blocks),
/// then drops the sequence's references; returns its final block ids.
std::vector<int32_t> cache_sequence(RadixCache& rc, BlockPool& pool, const std::vector<int32_t>& tokens, uint64_t ns = 0) {
  std::vector<int32_t> blocks;
  RadixCache::Node* node = rc.match_prefix(ns, tokens.data(), static_cast<int>(tokens.size()) / kBs, blocks);
  const int hit = static_cast<int>(blocks.size());
  for (int b = hit; b < static_cast<int>(tokens.size()) / kBs; ++b) {
    std::vector<int32_t> one;
    EXPECT_TRUE(pool.allocate(1, one));
    blocks.push_back(one[0]);
    node = rc.insert(node, tokens.data() + b * kBs, &blocks[b]);
  }
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) pool.decref(*it);
  return blocks;
}

TEST(RadixCache, MatchesLongestPrefixByRealTokens) {
  BlockPool pool(16);
  RadixCache rc(pool, kBs, EvictionPolicy::kLru);
  auto a = seq(12, 100);  // 3 blocks
  auto blocks = cache_sequence(rc, pool, a);
  EXPECT_EQ(pool.num_cached(), 3);
  EXPECT_EQ(pool.num_used(), 0);
  EXPECT_EQ(pool.num_free() + pool.num_cached(), 16);

  auto b = a;
  b[9] = 7;  // differs inside block 2
  std::vector<int32_t> out;
  rc.match_prefix(0, b.data(), 3, out);
  EXPECT_EQ(out, (std::vector<int32_t>{blocks[0], blocks[1]}));
  EXPECT_EQ(pool.num_used(), 2);  // locked by the match
  EXPECT_EQ(pool.num_cached(), 1);
  for (int32_t x : out) pool.decref(x);
  EXPECT_EQ(pool.num_cached(), 3);

  // max_blocks limits the match; another namespace sees nothing.
  out.clear();
  rc.match_prefix(0, a.data(), 1, out);
  EXPECT_EQ(out.size(), 1u);
  pool.decref(out[0]);
  out.clear();
  rc.match_prefix(42, a.data(), 3, out);
  EXPECT_TRUE(out.empty());
}

TEST(RadixCache, DuplicateInsertSwitchesToTheCachedBlock) {
  BlockPool pool(16);
  RadixCache rc(pool, kBs, EvictionPolicy::kLru);
  auto a = seq(8, 0);
  // Two sequences prefill the same prompt at once: neither hit the cache.
  std::vector<int32_t> s1, s2;
  ASSERT_TRUE(pool.allocate(2, s1));
  ASSERT_TRUE(pool.allocate(2, s2));
  std::vector<int32_t> none;
  RadixCache::Node* n1 = rc.match_prefix(0, a.data(), 2, none);
  RadixCache::Node* n2 = n1;
  n1 = rc.insert(n1, a.data(), &s1[0]);
  n2 = rc.insert(n2, a.data(), &s2[0]);
  EXPECT_EQ(s2[0], s1[0]);  // switched to the cached block; its own went back to the pool
  EXPECT_EQ(n1, n2);
  EXPECT_EQ(pool.ref_count(s1[0]), 2);
  EXPECT_EQ(pool.num_used(), 3);
  EXPECT_EQ(rc.num_nodes(), 1);
}

TEST(RadixCache, EvictsUnreferencedLeavesInLruOrderAndNeverLockedOnes) {
  BlockPool pool(16);
  RadixCache rc(pool, kBs, EvictionPolicy::kLru);
  auto old_seq = seq(8, 0);
  auto new_seq = seq(8, 50);
  cache_sequence(rc, pool, old_seq);
  cache_sequence(rc, pool, new_seq);
  EXPECT_EQ(pool.num_cached(), 4);
  // Lock the old prefix's first block.
  std::vector<int32_t> locked;
  rc.match_prefix(0, old_seq.data(), 1, locked);
  // Evict 1: the old sequence's second block (oldest unreferenced leaf).
  EXPECT_EQ(rc.evict(1), 1);
  std::vector<int32_t> out;
  rc.match_prefix(0, new_seq.data(), 2, out);
  EXPECT_EQ(out.size(), 2u);  // the newer sequence is intact
  for (int32_t x : out) pool.decref(x);
  // Everything unreferenced can go; the locked block stays.
  EXPECT_EQ(rc.evict(100), 2);
  EXPECT_EQ(pool.num_cached(), 0);
  EXPECT_EQ(pool.num_used(), 1);
  EXPECT_EQ(rc.num_nodes(), 1);
  pool.decref(locked[0]);
  EXPECT_EQ(pool.num_cached(), 1);
  EXPECT_EQ(rc.evict(100), 1);
  EXPECT_EQ(pool.num_free(), 16);
}

TEST(RadixCache, LfuKeepsFrequentlyUsedPrefixes) {
  BlockPool pool(16);
  RadixCache rc(pool, kBs, EvictionPolicy::kLfu);
  auto hot = seq(4, 0);
  auto cold = seq(4, 10);
  cache_sequence(rc, pool, hot);
  for (int i = 0; i < 5; ++i) cache_sequence(rc, pool, hot);  // five more hits
  cache_sequence(rc, pool, cold);                             // most recent, but used once
  EXPECT_EQ(rc.evict(1), 1);
  std::vector<int32_t> out;
  rc.match_prefix(0, hot.data(), 1, out);
  EXPECT_EQ(out.size(), 1u);  // LRU would have evicted `hot`
}

}  // namespace
}  // namespace pdserve::kv
