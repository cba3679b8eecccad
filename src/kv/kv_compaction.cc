// KvCacheManager::evict_tokens: per-sequence token eviction by block-table compaction.
#include <algorithm>
#include <cassert>
#include <cstring>

#include "kv/block_pool.h"
#include "kv/kv_cache_manager.h"
#include "kv/radix_cache.h"

namespace pdserve::kv {

bool KvCacheManager::evict_tokens(KvSeq& seq, int num_tokens, const TokenEvictionConfig& cfg, int budget) {
  const int n = num_tokens - seq.num_evicted;  // entries held
  if (budget <= 0 || n <= budget) return true;
  const bool mass = cfg.needs_attention_mass();
  if (mass) seq.attn_mass.resize(n, 0.f);
  const std::vector<int32_t> keep = select_kept(cfg, budget, n, mass ? seq.attn_mass.data() : nullptr);
  const int m = static_cast<int>(keep.size());
  const int bs = block_size();
  int first = 0;  // entries [0, first) stay where they are
  while (first < m && keep[first] == first) ++first;
  const int first_block = first / bs;
  const int new_blocks = static_cast<int>(blocks_for(m));
  std::vector<int32_t>& old = seq.block_table.blocks;
  assert(static_cast<int>(old.size()) >= blocks_for(n));

  // Destination blocks [first_block, new_blocks): written in place when only this sequence
  // can see them, else a fresh copy (copy-on-write).
  auto exclusive = [&](int32_t b) { return pool_->ref_count(b) == 1 && !pool_->in_prefix_cache(b); };
  std::vector<int32_t> dst(old.begin(), old.begin() + new_blocks);
  int need = 0;
  for (int b = first_block; b < new_blocks; ++b) need += !exclusive(old[b]);
  std::vector<int32_t> fresh;
  if (need > 0 && !take_blocks(need, fresh)) return false;
  for (int b = first_block, k = 0; b < new_blocks; ++b)
    if (!exclusive(old[b])) dst[b] = fresh[k++];

  // Move entry keep[d] to slot d, d ascending, from the first rewritten block on (its
  // unmoved leading entries too when the block is a fresh copy). keep[d] >= d, and slot d
  // is only written after every read of a slot <= d, so the in-place moves never read a
  // slot already overwritten; a shared source block is never written.
  const size_t row = block_bytes() / bs;  // one token's K (= V) bytes in one layer
  for (int l = 0; l < shape().n_layers; ++l)
    for (int d = first_block * bs; d < m; ++d) {
      const int s = keep[d];
      if (s == d && dst[d / bs] == old[d / bs]) continue;  // already in place
      const size_t so = (s % bs) * row, dof = (d % bs) * row;
      std::memcpy(block_k(l, dst[d / bs]) + dof, block_k(l, old[s / bs]) + so, row);
      std::memcpy(block_v(l, dst[d / bs]) + dof, block_v(l, old[s / bs]) + so, row);
    }

  // Let go of the replaced and the trailing blocks, tail first.
  for (int b = static_cast<int>(old.size()) - 1; b >= first_block; --b)
    if (b >= new_blocks || dst[b] != old[b]) pool_->decref(old[b]);
  old = std::move(dst);

  // The sequence's cached path no longer spells its block table: drop the lock (the path's
  // blocks stay in the prefix cache, evictable once no one else holds them).
  if (seq.cache_node) cache_->unlock(static_cast<RadixCache::Node*>(seq.cache_node));
  seq.cache_node = nullptr;
  seq.num_cached_blocks = 0;

  std::vector<int32_t> pos(m);
  for (int d = 0; d < m; ++d) pos[d] = seq.kept_position(keep[d]);
  if (mass) {
    std::vector<float> w(m);
    for (int d = 0; d < m; ++d) w[d] = seq.attn_mass[keep[d]];
    seq.attn_mass = std::move(w);
  }
  seq.kept_positions = std::move(pos);
  seq.num_evicted += n - m;
  return true;
}

int KvCacheManager::eviction_copies(const KvSeq& seq, int budget) const {
  const int n = std::min<int>(seq.num_blocks(), static_cast<int>(blocks_for(budget)));
  int c = 0;
  for (int b = 0; b < n; ++b) {
    const int32_t id = seq.block_table.blocks[b];
    c += pool_->ref_count(id) != 1 || pool_->in_prefix_cache(id);
  }
  return c;
}

bool KvCacheManager::can_take(int n) const {
  return n <= 0 || pool_->num_free() + num_evictable_blocks() >= n;
}

}  // namespace pdserve::kv
