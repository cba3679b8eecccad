// RadixCache: prefix matching on real token ids, dedupe, lock refs and exact
// evictable counts, LRU/LFU eviction order, namespaces.
#include <gtest/gtest.h>

#include <numeric>
#include <string>

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
std::vector<int32_t> cache_sequence(RadixCache& rc, BlockPool& pool, const std::vector<int32_t>& tokens,
                                    const std::string& ns = "") {
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
  rc.unlock(node);
  return blocks;
}

TEST(RadixCache, MatchPartialPicksTheChildAgreeingLongestOnTheNextTokens) {
  BlockPool pool(16);
  RadixCache rc(pool, kBs, EvictionPolicy::kLru);
  auto a = seq(8, 100);  // blocks 100..103, 104..107
  auto b = a;
  b[6] = b[7] = 7;       // 104 105 7 7: a sibling of a's block 1
  const auto a_blocks = cache_sequence(rc, pool, a);
  const auto b_blocks = cache_sequence(rc, pool, b);
  std::vector<int32_t> out;
  RadixCache::Node* node = rc.match_prefix("", a.data(), 1, out);
  int shared = -1;
  const int32_t probe[3] = {104, 105, 106};
  RadixCache::Node* c = rc.match_partial(node, probe, 3, &shared);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(shared, 3);
  EXPECT_EQ(RadixCache::block_of(c), a_blocks[1]);
  const int32_t probe_b[3] = {104, 105, 7};
  EXPECT_EQ(RadixCache::block_of(rc.match_partial(node, probe_b, 3, &shared)), b_blocks[1]);
  EXPECT_EQ(shared, 3);
  EXPECT_NE(rc.match_partial(node, probe_b, 2, &shared), nullptr);  // either agrees on two
  EXPECT_EQ(shared, 2);
  const int32_t other[3] = {5, 105, 106};
  EXPECT_EQ(rc.match_partial(node, other, 3, &shared), nullptr);
  EXPECT_EQ(shared, 0);
  // It takes no reference and no lock: only the matched block 0 is held.
  EXPECT_EQ(pool.num_used(), 1);
  EXPECT_EQ(rc.protected_size(), 1);
  for (int32_t x : out) pool.decref(x);
  rc.unlock(node);
  EXPECT_EQ(pool.num_cached(), 3);
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
  RadixCache::Node* node = rc.match_prefix("", b.data(), 3, out);
  EXPECT_EQ(out, (std::vector<int32_t>{blocks[0], blocks[1]}));
  EXPECT_EQ(pool.num_used(), 2);  // locked by the match
  EXPECT_EQ(pool.num_cached(), 1);
  for (int32_t x : out) pool.decref(x);
  rc.unlock(node);
  EXPECT_EQ(pool.num_cached(), 3);

  // max_blocks limits the match; another namespace sees nothing.
  out.clear();
  node = rc.match_prefix("", a.data(), 1, out);
  EXPECT_EQ(out.size(), 1u);
  pool.decref(out[0]);
  rc.unlock(node);
  out.clear();
  node = rc.match_prefix("42", a.data(), 3, out);
  EXPECT_TRUE(out.empty());
  rc.unlock(node);
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
  RadixCache::Node* n1 = rc.match_prefix("", a.data(), 2, none);
  RadixCache::Node* n2 = rc.match_prefix("", a.data(), 2, none);
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
  RadixCache::Node* lock = rc.match_prefix("", old_seq.data(), 1, locked);
  // Evict 1: the old sequence's second block (oldest unreferenced leaf).
  EXPECT_EQ(rc.evict(1), 1);
  std::vector<int32_t> out;
  RadixCache::Node* node = rc.match_prefix("", new_seq.data(), 2, out);
  EXPECT_EQ(out.size(), 2u);  // the newer sequence is intact
  for (int32_t x : out) pool.decref(x);
  rc.unlock(node);
  // Everything unreferenced can go; the locked block stays.
  EXPECT_EQ(rc.evict(100), 2);
  EXPECT_EQ(pool.num_cached(), 0);
  EXPECT_EQ(pool.num_used(), 1);
  EXPECT_EQ(rc.num_nodes(), 1);
  pool.decref(locked[0]);
  rc.unlock(lock);
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
  rc.match_prefix("", hot.data(), 1, out);
  EXPECT_EQ(out.size(), 1u);  // LRU would have evicted `hot`
}

}  // namespace
}  // namespace pdserve::kv

namespace pdserve::kv {
namespace {

TEST(RadixCache, LockRefsProtectTheWholePathAndCountsStayExact) {
  BlockPool pool(32);
  RadixCache rc(pool, kBs, EvictionPolicy::kLru);
  auto a = seq(12, 0);  // blocks A0 A1 A2
  auto b = a;
  b[4] = 99;            // shares A0, then its own B1 B2
  cache_sequence(rc, pool, a);
  cache_sequence(rc, pool, b);
  EXPECT_EQ(rc.num_nodes(), 5);
  EXPECT_EQ(rc.evictable_size(), 5);
  EXPECT_EQ(rc.protected_size(), 0);
  EXPECT_EQ(rc.evictable_size(), pool.num_cached());

  // A sequence holding all of `a` locks A0 A1 A2 (the walk to the root), not B1 B2.
  std::vector<int32_t> held;
  RadixCache::Node* n = rc.match_prefix("", a.data(), 3, held);
  EXPECT_EQ(rc.protected_size(), 3);
  EXPECT_EQ(rc.evictable_size(), 2);
  EXPECT_EQ(rc.evictable_size(), pool.num_cached());
  EXPECT_EQ(rc.evict(100), 2);  // only B2 then B1
  EXPECT_EQ(rc.num_nodes(), 3);
  EXPECT_EQ(rc.evictable_size(), 0);
  EXPECT_EQ(rc.evict(100), 0);

  // A fork takes a second lock on the same node: one unlock keeps the path protected.
  rc.lock(n);
  rc.unlock(n);
  EXPECT_EQ(rc.protected_size(), 3);
  for (int32_t x : held) pool.decref(x);
  rc.unlock(n);
  EXPECT_EQ(rc.protected_size(), 0);
  EXPECT_EQ(rc.evictable_size(), 3);
  EXPECT_EQ(rc.evictable_size(), pool.num_cached());
  EXPECT_EQ(rc.evict(100), 3);
  EXPECT_EQ(pool.num_free(), 32);
  EXPECT_EQ(rc.num_namespaces(), 0u);
}

TEST(RadixCache, HundredThousandBlocksInsertAndEvictWithExactCounts) {
  constexpr int kSeqs = 1000, kBlocksPerSeq = 100;
  BlockPool pool(kSeqs * kBlocksPerSeq);
  RadixCache rc(pool, kBs, EvictionPolicy::kLru);
  for (int s = 0; s < kSeqs; ++s) {
    std::vector<int32_t> t = seq(kBlocksPerSeq * kBs, 0);
    t[0] = 1000000 + s;  // distinct first blocks: 1000 chains of 100 blocks
    cache_sequence(rc, pool, t);
  }
  ASSERT_EQ(rc.num_nodes(), kSeqs * kBlocksPerSeq);
  EXPECT_EQ(rc.evictable_size(), pool.num_cached());
  EXPECT_EQ(pool.num_free(), 0);
  // LRU: the first chain inserted goes first, tail block first.
  for (int k = 0; k < kSeqs; ++k) {
    ASSERT_EQ(rc.evict(kBlocksPerSeq), kBlocksPerSeq);
    ASSERT_EQ(rc.evictable_size(), pool.num_cached());
    if (k == kSeqs / 2) {
      // The chains inserted later are intact; earlier ones are gone.
      std::vector<int32_t> t = seq(kBlocksPerSeq * kBs, 0), out;
      t[0] = 1000000 + k + 1;
      RadixCache::Node* n = rc.match_prefix("", t.data(), kBlocksPerSeq, out);
      EXPECT_EQ(out.size(), static_cast<size_t>(kBlocksPerSeq));
      for (int32_t x : out) pool.decref(x);
      rc.unlock(n);
      t[0] = 1000000 + k;
      out.clear();
      n = rc.match_prefix("", t.data(), kBlocksPerSeq, out);
      EXPECT_TRUE(out.empty());
      rc.unlock(n);
    }
  }
  EXPECT_EQ(rc.num_nodes(), 0);
  EXPECT_EQ(pool.num_free(), kSeqs * kBlocksPerSeq);
  EXPECT_EQ(rc.num_namespaces(), 0u);
}

TEST(RadixCache, NamespacesAreKeyedBySaltAndFreedWithTheirLastBlock) {
  BlockPool pool(6000);
  RadixCache rc(pool, kBs, EvictionPolicy::kLru);
  auto t = seq(kBs, 0);
  for (int i = 0; i < 5000; ++i) cache_sequence(rc, pool, t, "tenant-" + std::to_string(i));
  EXPECT_EQ(rc.num_namespaces(), 5000u);
  EXPECT_EQ(rc.num_nodes(), 5000);
  EXPECT_EQ(rc.evict(5000), 5000);
  EXPECT_EQ(rc.num_namespaces(), 0u);

  // Salts equal in their first 8 bytes are still different namespaces.
  cache_sequence(rc, pool, t, "abcdefgh-1");
  std::vector<int32_t> out;
  RadixCache::Node* n = rc.match_prefix("abcdefgh-2", t.data(), 1, out);
  EXPECT_TRUE(out.empty());
  rc.unlock(n);
  n = rc.match_prefix("abcdefgh-1", t.data(), 1, out);
  EXPECT_EQ(out.size(), 1u);
  for (int32_t x : out) pool.decref(x);
  rc.unlock(n);
  EXPECT_EQ(rc.num_namespaces(), 1u);  // the empty lookup's root went with its lock

  // A root that is only locked (a sequence matched nothing yet) survives eviction.
  n = rc.match_prefix("busy", t.data(), 1, out = {});
  EXPECT_EQ(rc.evict(10), 1);
  EXPECT_EQ(rc.num_namespaces(), 1u);
  rc.unlock(n);
  EXPECT_EQ(rc.num_namespaces(), 0u);
}

TEST(RadixCache, TheNamespaceCapEvictsWholeIdleNamespacesLeastRecentlyReleasedFirst) {
  BlockPool pool(64);
  RadixCache rc(pool, kBs, EvictionPolicy::kLru);
  rc.set_max_namespaces(3);
  const auto two = seq(2 * kBs, 0), one = seq(kBs, 50);
  cache_sequence(rc, pool, two, "a");  // 2 blocks
  cache_sequence(rc, pool, one, "b");  // 1 block each
  cache_sequence(rc, pool, one, "c");
  cache_sequence(rc, pool, one);       // the default namespace: never counted, never evicted by the cap
  EXPECT_EQ(rc.num_namespaces(), 4u);
  EXPECT_EQ(rc.num_salted_namespaces(), 3u);
  EXPECT_EQ(rc.num_idle_namespaces(), 3u);
  EXPECT_EQ(pool.num_cached(), 5);
  // "a" is used again: the release order is now b, c, a.
  std::vector<int32_t> out;
  RadixCache::Node* n = rc.match_prefix("a", two.data(), 2, out);
  ASSERT_EQ(out.size(), 2u);
  for (int32_t x : out) pool.decref(x);
  rc.unlock(n);

  // A fourth salt evicts b, the least recently released, whole.
  cache_sequence(rc, pool, one, "d");
  EXPECT_EQ(rc.num_salted_namespaces(), 3u);
  EXPECT_EQ(rc.namespaces_evicted(), 1);
  EXPECT_EQ(pool.num_cached(), 5);  // a 2 + c 1 + d 1 + default 1
  EXPECT_EQ(pool.num_free(), 59);
  EXPECT_EQ(rc.evictable_size(), pool.num_cached());
  // A fifth evicts c; a (2 blocks, both leaves and inner nodes) goes with the sixth.
  cache_sequence(rc, pool, one, "e");
  cache_sequence(rc, pool, one, "f");
  EXPECT_EQ(rc.namespaces_evicted(), 3);
  EXPECT_EQ(pool.num_cached(), 4);  // d, e, f, default
  EXPECT_EQ(rc.num_nodes(), 4);
  for (const char* kept : {"d", "e", "f"}) {  // matching a live namespace evicts nothing
    n = rc.match_prefix(kept, one.data(), 1, out = {});
    EXPECT_EQ(out.size(), 1u) << kept;
    for (int32_t x : out) pool.decref(x);
    rc.unlock(n);
  }
  EXPECT_EQ(rc.namespaces_evicted(), 3);

  // Locked namespaces are never evicted: with d, e and f locked, a new salt goes one past the cap.
  std::vector<RadixCache::Node*> locks;
  std::vector<int32_t> held;
  for (const char* s : {"d", "e", "f"}) locks.push_back(rc.match_prefix(s, one.data(), 1, held));
  EXPECT_EQ(rc.num_idle_namespaces(), 0u);
  const int64_t evicted = rc.namespaces_evicted();
  cache_sequence(rc, pool, one, "g");
  EXPECT_EQ(rc.namespaces_evicted(), evicted);
  EXPECT_EQ(rc.num_salted_namespaces(), 4u);
  EXPECT_EQ(rc.num_idle_namespaces(), 1u);  // g
  for (int32_t x : held) pool.decref(x);
  for (RadixCache::Node* l : locks) rc.unlock(l);
  EXPECT_EQ(rc.num_idle_namespaces(), 4u);
  // The next new salt evicts down to the cap: g (released first), then the earliest of d, e, f.
  cache_sequence(rc, pool, one, "h");
  EXPECT_EQ(rc.num_salted_namespaces(), 3u);
  EXPECT_EQ(rc.namespaces_evicted(), evicted + 2);
  EXPECT_EQ(rc.evictable_size(), pool.num_cached());
  EXPECT_EQ(pool.num_cached() + pool.num_free(), 64);
  // The ordinary eviction still frees a namespace with its last block.
  EXPECT_EQ(rc.evict(100), 4);
  EXPECT_EQ(rc.num_namespaces(), 0u);
  EXPECT_EQ(rc.num_salted_namespaces(), 0u);
  EXPECT_EQ(rc.num_idle_namespaces(), 0u);
  EXPECT_EQ(pool.num_free(), 64);
}

}  // namespace
}  // namespace pdserve::kv
