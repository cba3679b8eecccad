#include "kv/block_pool.h"

#include <cassert>

namespace pdserve::kv {

BlockPool::BlockPool(int32_t num_blocks)
    : ref_(num_blocks, 0), cached_(num_blocks, 0), prev_(num_blocks, -1), next_(num_blocks, -1) {
  for (int32_t b = 0; b < num_blocks; ++b) push_free(b);
}

void BlockPool::push_free(int32_t b) {
  prev_[b] = tail_;
  next_[b] = -1;
  if (tail_ >= 0) next_[tail_] = b; else head_ = b;
  tail_ = b;
  ++num_free_;
}

int32_t BlockPool::pop_free() {
  const int32_t b = head_;
  head_ = next_[b];
  if (head_ >= 0) prev_[head_] = -1; else tail_ = -1;
  prev_[b] = next_[b] = -1;
  --num_free_;
  return b;
}

bool BlockPool::allocate(int32_t n, std::vector<int32_t>& out) {
  if (n > num_free_) return false;
  for (int32_t i = 0; i < n; ++i) {
    const int32_t b = pop_free();
    ref_[b] = 1;
    out.push_back(b);
  }
  return true;
}

void BlockPool::incref(int32_t block) {
  assert(ref_[block] > 0 || cached_[block]);
  if (ref_[block]++ == 0) --num_cached_;
}

void BlockPool::decref(int32_t block) {
  assert(ref_[block] > 0);
  if (--ref_[block] > 0) return;
  if (cached_[block]) ++num_cached_; else push_free(block);
}

void BlockPool::set_cached(int32_t block) {
  assert(ref_[block] > 0 && !cached_[block]);
  cached_[block] = 1;
}

void BlockPool::release_cached(int32_t block) {
  assert(cached_[block] && ref_[block] == 0);
  cached_[block] = 0;
  --num_cached_;
  push_free(block);
}

}  // namespace pdserve::kv
