// KvCacheManager: the one KV contract of the engine and the scheduler (vLLM v1's
// KVCacheManager over its BlockPool; SGLang's radix cache for prefix sharing). It owns
// the block pool, the K/V storage and the radix prefix cache (and, later, the tiers below
// them); everything above it sees sequences' block tables and these calls only.
//
// Not thread-safe: the engine thread calls it, except for the block accessors, which a
// KV transfer may use from its own thread on blocks the engine has handed to it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kv/block_key.h"
#include "kv/block_table.h"
#include "kv/eviction_policy.h"
#include "kv/kv_cache.h"
#include "kv/token_eviction.h"

namespace pdserve::kv {

class BlockPool;
class KvTiers;
class RadixCache;

/// A sequence's KV state. Owned by the sequence, changed only by the manager.
struct KvSeq {
  /// Blocks in position order; positions [0, blocks.size() * block_size) have slots.
  BlockTable block_table;
  /// Leading blocks the radix cache holds (matched or inserted): their K/V are shared.
  int num_cached_blocks = 0;
  /// The radix node of block num_cached_blocks - 1 (or a namespace root): locked while
  /// set. Opaque outside the manager.
  void* cache_node = nullptr;

  // Token eviction (--kv-budget, kv/token_eviction.h). Slot i of the block table holds the
  // i-th kept position: position kept_position(i). Before any eviction slot i = position i.
  /// Positions evicted so far: a sequence with num_computed tokens has num_computed -
  /// num_evicted KV entries, and the next token's slot index is its position - num_evicted.
  int num_evicted = 0;
  /// Positions of the first kept_positions.size() entries (set by the last eviction); the
  /// entries after them are positions i + num_evicted (appended since).
  std::vector<int32_t> kept_positions;
  /// h2o: accumulated attention mass per kept entry (kv::add_attention_mass).
  std::vector<float> attn_mass;

  // Store tiers (KvCacheManager::set_tiers): the namespace of the chain and the content
  // keys of the leading blocks computed so far (kv/block_key.h).
  BlockKey chain_ns{};
  std::vector<BlockKey> block_keys;

  int num_blocks() const { return static_cast<int>(block_table.blocks.size()); }
  /// RoPE position of kept entry i.
  int kept_position(int i) const {
    return i < static_cast<int>(kept_positions.size()) ? kept_positions[i] : i + num_evicted;
  }
};

/// Block counts; used + cached + free == total.
struct KvUsage {
  int64_t total = 0;
  int64_t used = 0;    // ref count > 0 (some sequence holds them)
  int64_t cached = 0;  // held only by the prefix cache (reusable, evictable)
  int64_t free = 0;
};

class KvCacheManager {
 public:
  /// Allocates the pool and storage for `shape` (shape.num_blocks blocks). Without
  /// `prefix_caching` nothing is shared between requests.
  KvCacheManager(const KvCacheShape& shape, bool prefix_caching, EvictionPolicy eviction);
  ~KvCacheManager();
  KvCacheManager(const KvCacheManager&) = delete;
  KvCacheManager& operator=(const KvCacheManager&) = delete;

  const KvCacheShape& shape() const { return storage_.shape(); }
  int block_size() const { return shape().block_size; }
  int32_t num_blocks() const { return shape().num_blocks; }
  bool prefix_caching() const { return cache_ != nullptr; }
  /// Blocks that hold `num_tokens` tokens: ceil(num_tokens / block_size).
  int64_t blocks_for(int64_t num_tokens) const { return (num_tokens + block_size() - 1) / block_size(); }

  /// Admission: the longest cached prefix of `tokens` in namespace `ns` (the request's
  /// cache_salt; "" is the default), in whole blocks covering at most `max_tokens`
  /// tokens. `seq` must hold no blocks; it gets the hit blocks (locked against eviction).
  /// Returns the tokens hit (a multiple of the block size; 0 without prefix caching).
  int match_prefix(KvSeq& seq, const std::string& ns, const int32_t* tokens, int max_tokens);

  /// After match_prefix (and any import_blocks): extends `seq`'s hit into the next block
  /// at token granularity. When a cached block under the matched path starts with the
  /// next tokens of `tokens` (at most `max_tokens` in all, so the hit stays below
  /// max_tokens as match_prefix's does), `seq` gets a private copy of that block
  /// (copy-on-write: its later positions are overwritten as `seq` computes them) and the
  /// agreeing tokens count as computed. Returns the tokens added (0 ..  block_size - 1;
  /// 0 without a match, without prefix caching, or when no block can be taken). Cost: one
  /// block copy (K and V of every layer). So a prompt cached in full computes only its
  /// last token, not its whole last block.
  int match_partial_block(KvSeq& seq, const int32_t* tokens, int max_tokens);

  /// Gives `seq` slots for positions [0, num_tokens) (less its evicted ones), evicting unreferenced cached
  /// blocks when the free list is short. All or nothing: false (and nothing taken) when
  /// the pool cannot supply them.
  bool allocate_slots(KvSeq& seq, int num_tokens);

  /// Hands the radix cache the full blocks among `seq`'s first `num_tokens` tokens
  /// (`tokens` = the sequence's token ids). A block whose content is already cached is
  /// swapped for the cached one. No-op without prefix caching or before match_prefix.
  void cache_full_blocks(KvSeq& seq, const int32_t* tokens, int num_tokens);

  /// Copy-on-write fork: `child` (holding no blocks) shares `parent`'s full blocks of
  /// positions [0, num_tokens) and gets a private copy of the partial last one. False
  /// (child unchanged) when no block is free for that copy. A parent that evicted tokens
  /// passes its kept entries and eviction state (kept positions, attention mass) on.
  bool fork(const KvSeq& parent, int num_tokens, KvSeq& child);

  /// Speculative decoding's rollback: gives back `seq`'s blocks past the first
  /// blocks_for(num_tokens) (tail first), never one the radix cache holds. Positions
  /// >= num_tokens in the kept last block are left as they are: nothing attends to them
  /// before a later step writes them again (attention reads keys 0..pos only).
  void truncate(KvSeq& seq, int num_tokens);

  /// Drops `seq`'s blocks, tail first (so a prefix outlives its tails in the LRU order),
  /// and its lock; blocks the radix cache holds stay cached. Resets the eviction state.
  void free(KvSeq& seq);

  /// Token eviction (kv/token_eviction.h): when `seq`, having computed `num_tokens`
  /// positions, holds more than `budget` (> 0) entries, keeps kv::select_kept's and
  /// compacts them into the leading slots of its block table (order kept), so whole
  /// blocks at the tail return to the pool. Blocks another holder can see (a ref count > 1:
  /// a fork's sibling; or held by the radix cache) are never written: a block from the
  /// first moved entry on that is shared is replaced by a fresh copy (copy-on-write), and
  /// the sequence lets go of its radix-cache lock. Cost: one K and V row copy per layer
  /// for every kept entry after the first evicted one. False (nothing changed) when the
  /// pool cannot supply the copies; eviction is then retried at the next call.
  bool evict_tokens(KvSeq& seq, int num_tokens, const TokenEvictionConfig& cfg, int budget);
  /// An upper bound of the fresh blocks evict_tokens(seq, ..., budget) may take: the
  /// blocks among seq's first blocks_for(budget) that others can see.
  int eviction_copies(const KvSeq& seq, int budget) const;
  /// Whether `n` blocks could be taken now (free, or cached and evictable).
  bool can_take(int n) const;

  KvUsage usage() const;
  /// Radix-cache namespaces currently alive (0 or more; each has blocks or a lock).
  size_t num_cache_namespaces() const;
  /// Caps the salted (non-"") namespaces at `n` (0 = no cap): a match in a new namespace
  /// over the cap first evicts the blocks of whole idle namespaces, least recently used
  /// first (RadixCache::set_max_namespaces). No-op without prefix caching.
  void set_max_cache_namespaces(size_t n);
  /// Idle namespaces evicted whole under that cap so far.
  int64_t num_cache_namespaces_evicted() const;
  /// Radix-cache blocks no sequence holds (evictable) / some sequence holds (protected).
  int64_t num_evictable_blocks() const;
  int64_t num_protected_blocks() const;

  /// Store tiers below the pool (kv/kv_tiers.h; null = none): every full prompt block that
  /// newly enters the radix cache is copied out and written through to them. `ctx`
  /// identifies this cache in the blocks' keys.
  void set_tiers(KvTiers* tiers, BlockKeyContext ctx);
  KvTiers* tiers() const { return tiers_; }
  /// Content keys of the first `num_blocks` full blocks of `tokens` in namespace `ns`.
  std::vector<BlockKey> block_keys(const std::string& ns, const int32_t* tokens, int num_blocks) const;
  /// Bytes of a block's stored payload: K then V of layer 0, then of layer 1, ...
  size_t block_payload_bytes() const { return 2 * block_bytes() * static_cast<size_t>(shape().n_layers); }
  /// Adds blocks fetched from a tier after `seq`'s prefix-cache hit (match_prefix just
  /// ran): payloads[i] holds block `first_block` + i of `tokens`. Imports those from
  /// block seq.num_cached_blocks on into fresh blocks and the radix cache, stopping at a
  /// gap (the hit is shorter than when the fetch started) or when the pool is short.
  /// Returns the tokens added (whole blocks).
  int import_blocks(KvSeq& seq, const int32_t* tokens, int first_block, const std::vector<std::string>& payloads);

  /// Per-layer views of the K/V storage for the forward pass.
  const std::vector<kernels::KvLayerView>& layers() const { return storage_.layers(); }
  /// Bytes of K (= of V) of one block in one layer.
  size_t block_bytes() const { return static_cast<size_t>(shape().bytes_per_layer_block()); }
  /// K / V of `block` in `layer` (block_bytes() each): KV transfer reads and writes them.
  uint8_t* block_k(int layer, int32_t block);
  uint8_t* block_v(int layer, int32_t block);

 private:
  /// `n` blocks from the free list into `out`, evicting cached ones if it is short; all or nothing.
  bool take_blocks(int n, std::vector<int32_t>& out);

  KvCache storage_;
  std::unique_ptr<BlockPool> pool_;
  /// Queues block `b` of `seq` (keys extended as needed) for the tiers.
  void write_through(KvSeq& seq, const int32_t* tokens, int b);

  std::unique_ptr<RadixCache> cache_;  // null without prefix caching
  KvTiers* tiers_ = nullptr;
  BlockKeyContext key_ctx_;
};

}  // namespace pdserve::kv
