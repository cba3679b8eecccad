// RadixCache: the prefix cache. A radix tree over token ids at block granularity
// (SGLang's RadixAttention, Zheng et al. 2024, with page size = KV block size): each node
// is one full KV block, keyed by that block's token ids under the path of the blocks
// before it, so a path from the root spells a cached prompt prefix.
//
// Real token ids decide a match (a hash only indexes the children). Each node has a
// `lock_ref`: the number of sequences whose cached path ends at or below it (SGLang's
// inc_lock_ref / dec_lock_ref, walked to the root). A node with lock_ref > 0 is protected;
// one with lock_ref == 0 is evictable, and since a lock covers the whole path to the root,
// evictable nodes form whole subtrees: evicting leaves first can reclaim all of them.
// Evictable leaves sit in a 4-ary heap keyed by the eviction policy, updated
// incrementally, so evicting k blocks costs O(k log n).
//
// Namespaces (the `cache_salt`) are keyed by the salt string itself; a namespace's root
// exists while it has blocks or locks, and is freed with its last one. Salted namespaces
// (every one but the default "") can be capped (set_max_namespaces): a new one over the
// cap first evicts whole idle namespaces (no lock anywhere in them), least recently
// released first.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kv/block_pool.h"
#include "kv/eviction_policy.h"

namespace pdserve::kv {

/// Not thread-safe: the engine thread owns it (with the BlockPool it shares).
class RadixCache {
 public:
  struct Node;
  /// An evictable leaf in the eviction heap, with its key (internal).
  struct LeafEntry {
    double key;
    uint64_t id;
    Node* node;
  };

  RadixCache(BlockPool& pool, int block_size, EvictionPolicy policy);
  ~RadixCache();
  RadixCache(const RadixCache&) = delete;
  RadixCache& operator=(const RadixCache&) = delete;

  /// Longest cached prefix of `tokens` in namespace `ns`, in whole blocks, at most
  /// `max_blocks`. Appends the blocks to `out`, takes a pool reference on each, marks
  /// them used now, and locks the returned node: the one of the last matched block, or
  /// the namespace's root when nothing matched (creating it). The caller continues
  /// inserting from it and finally calls `unlock` on the node it ends on.
  Node* match_prefix(const std::string& ns, const int32_t* tokens, int max_blocks, std::vector<int32_t>& out);

  /// Token-granular tail of a match: the child of `parent` (a node match_prefix returned
  /// or insert moved a lock onto) whose first tokens agree longest with `tokens` (at most
  /// `max_tokens` < block_size of them compared), and that agreement length in `*shared`.
  /// Null (and *shared = 0) when no child agrees on its first token. Marks the child used
  /// now; takes no reference and no lock.
  Node* match_partial(Node* parent, const int32_t* tokens, int max_tokens, int* shared);
  /// The KV block a node holds (-1 for a root).
  static int32_t block_of(const Node* node);

  /// Adds the block holding `tokens` [block_size of them] as a child of `parent`, where
  /// `*block` is the caller's block with that content (the caller holds a pool reference
  /// and a lock on `parent`; the lock moves to the returned child). If the tree already
  /// has that content under `parent` with another block, the caller is switched to the
  /// cached block: `*block` is replaced (reference moved), and the caller's duplicate is
  /// released.
  Node* insert(Node* parent, const int32_t* tokens, int32_t* block);

  /// Takes one more lock on `node` (a sequence sharing another's cached path: a fork).
  void lock(Node* node);
  /// Drops a lock taken by match_prefix / lock (moved by insert). Frees an empty,
  /// unlocked namespace root.
  void unlock(Node* node);

  /// Frees up to `n` unlocked blocks, leaves first, in policy order; O(n log size).
  /// Returns how many were freed.
  int evict(int n);

  /// Blocks held by the tree (locked or not).
  int64_t num_nodes() const { return evictable_size_ + protected_size_; }
  /// Blocks no sequence holds (lock_ref == 0): equal to BlockPool::num_cached().
  int64_t evictable_size() const { return evictable_size_; }
  /// Blocks some sequence holds (lock_ref > 0).
  int64_t protected_size() const { return protected_size_; }
  /// Namespaces that currently have a root (blocks or locks).
  size_t num_namespaces() const { return roots_.size(); }
  /// Of those, the salted ones (all but the default namespace "").
  size_t num_salted_namespaces() const { return salted_; }
  /// Salted namespaces holding blocks but no lock (what the cap may evict).
  size_t num_idle_namespaces() const { return idle_roots_.size(); }
  /// Idle namespaces evicted whole to make room under the cap, since construction.
  int64_t namespaces_evicted() const { return namespaces_evicted_; }

  /// Caps the salted namespaces at `n` (0 = no cap, the default): match_prefix in a new
  /// salted namespace first evicts every block of the least recently released idle
  /// namespaces until fewer than `n` remain. The cap is not a refusal: when every
  /// namespace is locked, the new one is made anyway (one past the cap). The caller
  /// keeps locked namespaces below the cap (engine/cache_salt_gate.h) so that never happens.
  void set_max_namespaces(size_t n) { max_namespaces_ = n; }

 private:
  Node* root(const std::string& ns);
  Node* find_child(Node* parent, uint64_t hash, const int32_t* tokens) const;
  void add_child(Node* parent, Node* child);
  void remove_child(Node* child);  // releases it
  void heap_set(size_t i, const LeafEntry& e);
  void heap_sift(size_t i);
  void heap_push(Node* n);
  void heap_erase(Node* n);
  Node* new_node();
  void release_node(Node* n);
  void touch(Node* n);
  void add_lock(Node* n, int delta);
  void update_leaf(Node* n);
  void maybe_free_root(Node* r);
  void update_idle_root(Node* r);     // a root's place in idle_roots_ after a lock change
  void evict_namespace(Node* r);      // frees every block of an unlocked namespace, and its root
  void make_room_for_namespace();     // the cap: evicts idle namespaces until one more fits

  BlockPool& pool_;
  int block_size_;
  EvictionPolicy policy_;
  std::vector<std::unique_ptr<Node>> nodes_;  // every node ever made
  std::vector<Node*> free_nodes_;  // released nodes, reused before nodes_ grows
  std::map<std::string, Node*> roots_;
  size_t salted_ = 0;          // roots_ other than ""
  size_t max_namespaces_ = 0;  // cap on salted_ (0 = none)
  std::map<uint64_t, Node*> idle_roots_;  // salted roots with blocks and no lock, by idle_key (release order)
  uint64_t next_idle_key_ = 1;
  int64_t namespaces_evicted_ = 0;
  std::vector<LeafEntry> leaves_;  // evictable leaves: a 4-ary min-heap in eviction order
  int64_t evictable_size_ = 0, protected_size_ = 0;
  uint64_t clock_ = 0;    // logical access time
  uint64_t next_id_ = 0;  // tie-break of equal eviction keys
};

}  // namespace pdserve::kv
