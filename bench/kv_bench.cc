// Google Benchmark of the radix prefix cache's eviction (kv::RadixCache::evict): the cost
// per evicted block with 1,000 to 100,000 blocks cached. The cache holds chains of 16
// blocks (distinct prompts of 16 blocks each, all unreferenced); each iteration evicts
// 256 blocks (timed, CPU time) and inserts 256 new ones (untimed), so the cached size stays at N.
// Eviction keeps its evictable leaves in a heap, so the per-block cost should grow like
// log N, not like N (the previous eviction walked the whole tree on every call).
// Two regimes: `hot`, evictions back to back (at N = 1,000 every node stays in L1/L2, at
// 100,000 they spill to L3, so this ratio shows cache residency as well), and `cold`, the
// caches flushed (64 MiB written) before each timed eviction, as in an engine step, where
// a forward pass streams the weights between two evictions.
//   build/bench/kv_bench [--benchmark_filter=Evict]
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "kv/block_pool.h"
#include "kv/radix_cache.h"

namespace {

using pdserve::kv::BlockPool;
using pdserve::kv::EvictionPolicy;
using pdserve::kv::RadixCache;

constexpr int kBs = 16;            // tokens per block
constexpr int kChain = 16;         // blocks per cached prompt
constexpr int kEvictPerIter = 256;

/// Caches one prompt of kChain blocks whose first token is `id` (unreferenced after).
void cache_prompt(RadixCache& rc, BlockPool& pool, int32_t id) {
  std::vector<int32_t> tokens(kChain * kBs);
  for (int i = 0; i < kChain * kBs; ++i) tokens[i] = i;
  tokens[0] = id;
  std::vector<int32_t> blocks;
  RadixCache::Node* node = rc.match_prefix("", tokens.data(), 0, blocks);
  pool.allocate(kChain, blocks);
  for (int b = 0; b < kChain; ++b) node = rc.insert(node, tokens.data() + b * kBs, &blocks[b]);
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) pool.decref(*it);
  rc.unlock(node);
}

void BM_RadixEvict(benchmark::State& state, EvictionPolicy policy, bool cold) {
  static std::vector<uint8_t> flush(64 << 20);
  const int n = static_cast<int>(state.range(0));
  BlockPool pool(n);
  RadixCache rc(pool, kBs, policy);
  int32_t next_id = 1 << 20;
  for (int i = 0; i < n / kChain; ++i) cache_prompt(rc, pool, next_id++);
  for (auto _ : state) {
    benchmark::DoNotOptimize(rc.evict(kEvictPerIter));
    state.PauseTiming();
    for (int i = 0; i < kEvictPerIter / kChain; ++i) cache_prompt(rc, pool, next_id++);
    if (cold) {
      for (size_t i = 0; i < flush.size(); i += 64) flush[i]++;
      benchmark::ClobberMemory();
    }
    state.ResumeTiming();
  }
  // items_per_second = blocks evicted per CPU second (1e9 / it = ns per block).
  state.SetItemsProcessed(state.iterations() * kEvictPerIter);
  state.counters["cached_blocks"] = static_cast<double>(rc.num_nodes());
}

BENCHMARK_CAPTURE(BM_RadixEvict, lru_hot, EvictionPolicy::kLru, false)->Arg(1000)->Arg(10000)->Arg(100000);
BENCHMARK_CAPTURE(BM_RadixEvict, lfu_hot, EvictionPolicy::kLfu, false)->Arg(1000)->Arg(10000)->Arg(100000);
BENCHMARK_CAPTURE(BM_RadixEvict, lru_cold, EvictionPolicy::kLru, true)->Arg(1000)->Arg(10000)->Arg(100000)->Iterations(400);
BENCHMARK_CAPTURE(BM_RadixEvict, lfu_cold, EvictionPolicy::kLfu, true)->Arg(1000)->Arg(10000)->Arg(100000)->Iterations(400);

}  // namespace

BENCHMARK_MAIN();
