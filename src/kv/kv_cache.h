// KvCache: the K and V storage of every layer, each pool shaped
// [num_blocks][block_size][n_kv_heads][head_dim] in the KV dtype (f32, f16, bf16, or
// GGUF's q8_0 / q4_0 blocks: a (token, head) row is head_dim / 32 whole blocks).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/huge_pages.h"
#include "base/status.h"
#include "kernels/attention.h"

namespace pdserve::kv {

struct KvCacheShape {
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int block_size = 16;
  int32_t num_blocks = 0;
  kernels::KvDtype dtype = kernels::KvDtype::F16;

  /// Bytes of K+V for one block across all layers (kernels::kv_row_bytes per token and head).
  int64_t bytes_per_block() const;
  /// Bytes of K (= of V) of one block in one layer.
  int64_t bytes_per_layer_block() const;
};

/// The dtype's name as the --kv-dtype flag and the KV layout handshake spell it: "f32",
/// "f16", "bf16", "q8_0", "q4_0".
const char* kv_dtype_name(kernels::KvDtype d);

class KvCache {
 public:
  /// Allocates storage for `shape` (2 MiB-aligned, on transparent huge pages where the
  /// kernel gives them: base/huge_pages.h) and zeroes it (every page resident from the start).
  explicit KvCache(const KvCacheShape& shape);
  const KvCacheShape& shape() const { return shape_; }
  /// Copies block `src`'s K and V into block `dst` in every layer (copy-on-write of a
  /// shared partial block).
  void copy_block(int32_t src, int32_t dst);
  /// K / V of `block` in `layer` (bytes_per_layer_block() each).
  uint8_t* block_k(int layer, int32_t block) { return k_[layer] + block * shape_.bytes_per_layer_block(); }
  uint8_t* block_v(int layer, int32_t block) { return v_[layer] + block * shape_.bytes_per_layer_block(); }
  /// Per-layer views for the forward pass.
  const std::vector<kernels::KvLayerView>& layers() const { return views_; }

 private:
  KvCacheShape shape_;
  HugePageBuffer storage_;  // every layer's K and V pools, zeroed at construction
  std::vector<uint8_t*> k_, v_;  // each layer's pools in storage_ (every slot is written before it is read)
  std::vector<kernels::KvLayerView> views_;
};

}  // namespace pdserve::kv
