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
  const int64_t layer_bytes = shape.bytes_per_layer_block() * shape.num_blocks;
  for (int l = 0; l < shape.n_layers; ++l) {
    k_.emplace_back(new uint8_t[layer_bytes]);
    v_.emplace_back(new uint8_t[layer_bytes]);
    // Zeroed once here, as llama.cpp clears its KV buffer at init: every page is resident
    // from the start, so RSS does not climb as blocks are first used (a soak reads RSS).
    std::memset(k_.back().get(), 0, static_cast<size_t>(layer_bytes));
    std::memset(v_.back().get(), 0, static_cast<size_t>(layer_bytes));
    kernels::KvLayerView view;
    view.k = k_.back().get();
    view.v = v_.back().get();
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
    std::memcpy(k_[l].get() + dst * bytes, k_[l].get() + src * bytes, bytes);
    std::memcpy(v_[l].get() + dst * bytes, v_[l].get() + src * bytes, bytes);
  }
}

}  // namespace pdserve::kv
