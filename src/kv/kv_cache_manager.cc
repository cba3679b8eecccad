#include "kv/kv_cache_manager.h"

#include <algorithm>
#include <cassert>
#include <cstring>

#include "kv/block_pool.h"
#include "kv/kv_tiers.h"
#include "kv/radix_cache.h"

namespace pdserve::kv {

namespace {

RadixCache::Node* node_of(const KvSeq& s) { return static_cast<RadixCache::Node*>(s.cache_node); }

}  // namespace

KvCacheManager::KvCacheManager(const KvCacheShape& shape, bool prefix_caching, EvictionPolicy eviction)
    : storage_(shape), pool_(std::make_unique<BlockPool>(shape.num_blocks)) {
  if (prefix_caching) cache_ = std::make_unique<RadixCache>(*pool_, shape.block_size, eviction);
}

KvCacheManager::~KvCacheManager() = default;

int KvCacheManager::match_prefix(KvSeq& seq, const std::string& ns, const int32_t* tokens, int max_tokens) {
  assert(seq.block_table.blocks.empty() && !seq.cache_node);
  if (!cache_) return 0;
  seq.cache_node = cache_->match_prefix(ns, tokens, max_tokens / block_size(), seq.block_table.blocks);
  seq.num_cached_blocks = seq.num_blocks();
  if (tiers_) seq.chain_ns = chain_namespace(key_ctx_, ns);
  return seq.num_cached_blocks * block_size();
}

int KvCacheManager::match_partial_block(KvSeq& seq, const int32_t* tokens, int max_tokens) {
  if (!cache_ || !seq.cache_node || seq.num_evicted > 0 || seq.num_blocks() != seq.num_cached_blocks) return 0;
  const int hit = seq.num_cached_blocks * block_size();
  const int want = std::min(max_tokens - hit, block_size() - 1);
  if (want <= 0) return 0;
  int shared = 0;
  RadixCache::Node* src = cache_->match_partial(node_of(seq), tokens + hit, want, &shared);
  if (!src) return 0;
  // Locked while a block is taken, so the eviction that may make room cannot pick it.
  cache_->lock(src);
  std::vector<int32_t> copy;
  const bool ok = take_blocks(1, copy);
  if (ok) {
    storage_.copy_block(RadixCache::block_of(src), copy[0]);
    seq.block_table.blocks.push_back(copy[0]);
  }
  cache_->unlock(src);
  return ok ? shared : 0;
}

bool KvCacheManager::take_blocks(int n, std::vector<int32_t>& out) {
  if (n > pool_->num_free() && cache_) cache_->evict(n - pool_->num_free());
  return pool_->allocate(n, out);
}

bool KvCacheManager::allocate_slots(KvSeq& seq, int num_tokens) {
  const int64_t need = blocks_for(num_tokens - seq.num_evicted) - seq.num_blocks();
  return need <= 0 || take_blocks(static_cast<int>(need), seq.block_table.blocks);
}

void KvCacheManager::cache_full_blocks(KvSeq& seq, const int32_t* tokens, int num_tokens) {
  if (!cache_ || !seq.cache_node || seq.num_evicted > 0) return;
  const int full = std::min(num_tokens / block_size(), seq.num_blocks());
  auto* node = node_of(seq);
  for (int b = seq.num_cached_blocks; b < full; ++b) {
    const int64_t before = cache_->num_nodes();
    node = cache_->insert(node, tokens + static_cast<int64_t>(b) * block_size(), &seq.block_table.blocks[b]);
    if (tiers_ && cache_->num_nodes() > before) write_through(seq, tokens, b);  // new content
  }
  seq.cache_node = node;
  seq.num_cached_blocks = std::max(seq.num_cached_blocks, full);
}

bool KvCacheManager::fork(const KvSeq& parent, int num_tokens, KvSeq& child) {
  assert(child.block_table.blocks.empty() && !child.cache_node);
  num_tokens -= parent.num_evicted;  // the parent's kept entries
  const int full = num_tokens / block_size();
  const bool partial = num_tokens % block_size() != 0;
  std::vector<int32_t> copy;
  if (partial && !take_blocks(1, copy)) return false;
  for (int b = 0; b < full; ++b) {
    pool_->incref(parent.block_table.blocks[b]);
    child.block_table.blocks.push_back(parent.block_table.blocks[b]);
  }
  if (partial) {
    storage_.copy_block(parent.block_table.blocks[full], copy[0]);
    child.block_table.blocks.push_back(copy[0]);
  }
  child.num_evicted = parent.num_evicted;
  child.kept_positions = parent.kept_positions;
  child.attn_mass = parent.attn_mass;
  child.chain_ns = parent.chain_ns;
  child.block_keys = parent.block_keys;
  child.num_cached_blocks = std::min(parent.num_cached_blocks, full);
  if (parent.cache_node) {
    // The child's cached path is the parent's (its first num_cached_blocks blocks).
    assert(parent.num_cached_blocks <= full);
    child.cache_node = parent.cache_node;
    cache_->lock(node_of(child));
  }
  return true;
}

void KvCacheManager::truncate(KvSeq& seq, int num_tokens) {
  auto& b = seq.block_table.blocks;
  const size_t keep = static_cast<size_t>(std::max<int64_t>(blocks_for(num_tokens - seq.num_evicted), seq.num_cached_blocks));
  while (b.size() > keep) {
    pool_->decref(b.back());
    b.pop_back();
  }
}

void KvCacheManager::set_tiers(KvTiers* tiers, BlockKeyContext ctx) {
  tiers_ = tiers;
  key_ctx_ = std::move(ctx);
}

std::vector<BlockKey> KvCacheManager::block_keys(const std::string& ns, const int32_t* tokens, int num_blocks) const {
  return chain_keys(chain_namespace(key_ctx_, ns), tokens, num_blocks, block_size());
}

void KvCacheManager::write_through(KvSeq& seq, const int32_t* tokens, int b) {
  const int bs = block_size();
  while (seq.num_blocks() > 0 && static_cast<int>(seq.block_keys.size()) <= b) {
    const int i = static_cast<int>(seq.block_keys.size());
    seq.block_keys.push_back(block_key(i == 0 ? BlockKey{} : seq.block_keys.back(), seq.chain_ns, tokens + static_cast<int64_t>(i) * bs, bs));
  }
  const size_t lb = block_bytes();
  std::string payload(block_payload_bytes(), '\0');
  const int32_t block = seq.block_table.blocks[b];
  for (int l = 0; l < shape().n_layers; ++l) {
    std::memcpy(payload.data() + (2 * l) * lb, storage_.block_k(l, block), lb);
    std::memcpy(payload.data() + (2 * l + 1) * lb, storage_.block_v(l, block), lb);
  }
  tiers_->put(seq.block_keys[b], std::vector<int32_t>(tokens + static_cast<int64_t>(b) * bs, tokens + static_cast<int64_t>(b + 1) * bs),
              std::move(payload));
}

int KvCacheManager::import_blocks(KvSeq& seq, const int32_t* tokens, int first_block, const std::vector<std::string>& payloads) {
  if (!cache_ || !seq.cache_node || seq.num_evicted > 0 || seq.num_blocks() != seq.num_cached_blocks) return 0;
  const int start = seq.num_cached_blocks;
  const int end = first_block + static_cast<int>(payloads.size());
  if (start < first_block || start >= end) return 0;
  std::vector<int32_t> fresh;
  if (!take_blocks(end - start, fresh)) return 0;
  const size_t lb = block_bytes();
  auto* node = node_of(seq);
  for (int b = start; b < end; ++b) {
    const std::string& p = payloads[b - first_block];
    int32_t block = fresh[b - start];
    for (int l = 0; l < shape().n_layers; ++l) {
      std::memcpy(storage_.block_k(l, block), p.data() + (2 * l) * lb, lb);
      std::memcpy(storage_.block_v(l, block), p.data() + (2 * l + 1) * lb, lb);
    }
    seq.block_table.blocks.push_back(block);
    node = cache_->insert(node, tokens + static_cast<int64_t>(b) * block_size(), &seq.block_table.blocks.back());
  }
  seq.cache_node = node;
  seq.num_cached_blocks = end;
  return (end - start) * block_size();
}

void KvCacheManager::free(KvSeq& seq) {
  auto& b = seq.block_table.blocks;
  for (auto it = b.rbegin(); it != b.rend(); ++it) pool_->decref(*it);
  b.clear();
  if (seq.cache_node) cache_->unlock(node_of(seq));
  seq.cache_node = nullptr;
  seq.num_cached_blocks = 0;
  seq.num_evicted = 0;
  seq.kept_positions.clear();
  seq.attn_mass.clear();
  seq.block_keys.clear();
}

KvUsage KvCacheManager::usage() const {
  KvUsage u;
  u.total = pool_->num_blocks();
  u.used = pool_->num_used();
  u.cached = pool_->num_cached();
  u.free = pool_->num_free();
  return u;
}

size_t KvCacheManager::num_cache_namespaces() const { return cache_ ? cache_->num_namespaces() : 0; }
void KvCacheManager::set_max_cache_namespaces(size_t n) {
  if (cache_) cache_->set_max_namespaces(n);
}
int64_t KvCacheManager::num_cache_namespaces_evicted() const { return cache_ ? cache_->namespaces_evicted() : 0; }
int64_t KvCacheManager::num_evictable_blocks() const { return cache_ ? cache_->evictable_size() : 0; }
int64_t KvCacheManager::num_protected_blocks() const { return cache_ ? cache_->protected_size() : 0; }

uint8_t* KvCacheManager::block_k(int layer, int32_t block) { return storage_.block_k(layer, block); }
uint8_t* KvCacheManager::block_v(int layer, int32_t block) { return storage_.block_v(layer, block); }

}  // namespace pdserve::kv
