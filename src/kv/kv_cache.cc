#include "kv/kv_cache.h"

#include <cstring>

namespace pdserve::kv {

int64_t KvCacheShape::bytes_per_layer_block() const {
  return int64_t{block_size} * n_kv_heads * kernels::kv_row_bytes(dtype, head_dim);
}

int64_t KvCacheShape::bytes_per_block() const { return 2 * int64_t{n_layers} * bytes_per_layer_block(); }

const char* kv_dtype_name(kernels::KvDtype d) {
  switch (d) {
    case kernels::KvDtype::F32: return "f32";
    case kernels::KvDtype::F16: return "f16";
    case kernels::KvDtype::BF16: return "bf16";
    case kernels::KvDtype::Q8_0: return "q8_0";
    case kernels::KvDtype::Q4_0: return "q4_0";
  }
  return "?";
}

KvCache::KvCache(const KvCacheShape& shape) : shape_(shape) {
  // One buffer for all pools, each starting on a cache line. Zeroed and faulted in once
  // here (HugePageBuffer), as llama.cpp clears its KV buffer at init: every page is
  // resident from the start, so RSS does not climb as blocks are first used (a soak reads
  // RSS).
  const int64_t layer_bytes = (shape.bytes_per_layer_block() * shape.num_blocks + 63) / 64 * 64;
  storage_ = HugePageBuffer(static_cast<size_t>(2 * layer_bytes * shape.n_layers));
  for (int l = 0; l < shape.n_layers; ++l) {
    k_.push_back(storage_.get() + (2 * l) * layer_bytes);
    v_.push_back(storage_.get() + (2 * l + 1) * layer_bytes);
    kernels::KvLayerView view;
    view.k = k_.back();
    view.v = v_.back();
    view.dtype = shape.dtype;
    view.block_size = shape.block_size;
    view.n_kv_heads = shape.n_kv_heads;
    view.head_dim = shape.head_dim;
    views_.push_back(view);
  }
}

void KvCache::copy_block(int32_t src, int32_t dst) {
  const int64_t bytes = shape_.bytes_per_layer_block();
  for (int l = 0; l < shape_.n_layers; ++l) {
    std::memcpy(k_[l] + dst * bytes, k_[l] + src * bytes, bytes);
    std::memcpy(v_[l] + dst * bytes, v_[l] + src * bytes, bytes);
  }
}

}  // namespace pdserve::kv
