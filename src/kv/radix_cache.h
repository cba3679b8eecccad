// RadixCache: the prefix cache. A radix tree over token ids at block granularity
// (SGLang's RadixAttention, Zheng et al. 2024, with page size = KV block size): each node
// is one full KV block, keyed by that block's token ids under the path of the blocks
// before it, so a path from the root spells a cached prompt prefix.
//
// Real token ids decide a match (a hash only indexes the children). A node is protected
// while its block's ref count is > 0 (some sequence holds it: the "lock ref"); an
// unreferenced node is evictable. Because a sequence that holds a block also holds every
// block before it, unreferenced nodes form whole subtrees, so evicting leaves first can
// reclaim all of them: evictable == BlockPool::num_cached() exactly.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "kv/block_pool.h"

namespace pdserve::kv {

/// Which unreferenced blocks go first when blocks are needed.
enum class EvictionPolicy {
  kLru,  // least recently used leaf first
  kLfu,  // fewest uses first, counts halving every kLfuHalfLife accesses (LFU with aging)
};

/// Parses "lru" / "lfu".
Result<EvictionPolicy> parse_eviction_policy(const std::string& s);

class RadixCache {
 public:
  struct Node;

  RadixCache(BlockPool& pool, int block_size, EvictionPolicy policy);
  ~RadixCache();
  RadixCache(const RadixCache&) = delete;
  RadixCache& operator=(const RadixCache&) = delete;

  /// Longest cached prefix of `tokens` in namespace `ns`, in whole blocks, at most
  /// `max_blocks`. Appends the blocks to `out`, takes a reference on each (lock), marks
  /// them used now, and returns the node of the last one (the root of `ns` when nothing
  /// matched) to continue inserting from.
  Node* match_prefix(uint64_t ns, const int32_t* tokens, int max_blocks, std::vector<int32_t>& out);

  /// Adds the block holding `tokens` [block_size of them] as a child of `parent`, where
  /// `*block` is the caller's block with that content (the caller holds a reference).
  /// If the tree already has that content under `parent` with another block, the caller
  /// is switched to the cached block: `*block` is replaced (reference moved), and the
  /// caller's duplicate is released. Returns the child node.
  Node* insert(Node* parent, const int32_t* tokens, int32_t* block);

  /// Frees up to `n` unreferenced blocks, leaves first, in policy order. Returns how
  /// many were freed.
  int evict(int n);

  /// Blocks held by the tree (referenced or not).
  int64_t num_nodes() const { return num_nodes_; }

 private:
  Node* root(uint64_t ns);
  void touch(Node* n);
  double priority(const Node* n) const;

  BlockPool& pool_;
  int block_size_;
  EvictionPolicy policy_;
  std::unordered_map<uint64_t, std::unique_ptr<Node>> roots_;
  int64_t num_nodes_ = 0;
  uint64_t clock_ = 0;  // logical access time
};

}  // namespace pdserve::kv
