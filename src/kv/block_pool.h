// BlockPool: a fixed set of KV blocks with reference counts and an O(1) free list
// (vLLM v1 block_pool.py). Blocks are identified by dense ids 0..num_blocks-1.
#pragma once

#include <cstdint>
#include <vector>

namespace pdserve::kv {

/// Allocates and frees KV blocks. Not thread-safe: the engine thread owns it.
/// Free blocks sit in a doubly linked list in the order they were freed (oldest first),
/// so allocation takes the least recently freed block; `free()` appends, so callers free
/// a sequence's blocks tail first (reverse order) to keep prefix blocks around longest.
///
/// A block is in exactly one state: used (ref count > 0), cached (ref count 0 but held by
/// the prefix cache, reusable until evicted) or free. used + cached + free == total.
class BlockPool {
 public:
  explicit BlockPool(int32_t num_blocks);

  int32_t num_blocks() const { return static_cast<int32_t>(ref_.size()); }
  int32_t num_free() const { return num_free_; }
  /// Blocks with ref count 0 held only by the prefix cache.
  int32_t num_cached() const { return num_cached_; }
  /// Blocks with ref count > 0.
  int32_t num_used() const { return num_blocks() - num_free_ - num_cached_; }

  /// Marks a used block as held by the prefix cache: when its ref count drops to 0 it
  /// becomes cached instead of free.
  void set_cached(int32_t block);
  /// The prefix cache lets go of a block with ref count 0 (eviction): it becomes free.
  void release_cached(int32_t block);

  /// Takes `n` blocks (ref count 1 each) into `out`; false (and nothing taken) when fewer
  /// than `n` are free.
  bool allocate(int32_t n, std::vector<int32_t>& out);
  /// Adds a reference to a used block (sharing) or to a cached one (a prefix-cache hit).
  void incref(int32_t block);
  /// Drops one reference; a block whose count reaches 0 goes to the tail of the free list,
  /// or stays cached when the prefix cache holds it.
  void decref(int32_t block);
  int32_t ref_count(int32_t block) const { return ref_[block]; }
  /// Whether the prefix cache holds `block` (set_cached and not yet released).
  bool in_prefix_cache(int32_t block) const { return cached_[block] != 0; }

 private:
  void push_free(int32_t b);
  int32_t pop_free();

  std::vector<int32_t> ref_;
  std::vector<uint8_t> cached_;       // held by the prefix cache
  std::vector<int32_t> prev_, next_;  // intrusive free list; -1 = none
  int32_t head_ = -1, tail_ = -1;
  int32_t num_free_ = 0;
  int32_t num_cached_ = 0;  // cached_ && ref_ == 0
};

}  // namespace pdserve::kv
