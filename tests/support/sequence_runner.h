// Test helper: one sequence fed straight through model::Model::forward with its own paged
// KV cache — the reference tests' way of teacher-forcing a model without the engine.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "kernels/matmul.h"
#include "kv/block_pool.h"
#include "kv/block_table.h"
#include "kv/kv_cache.h"
#include "model/model.h"

namespace pdserve::testing {

class SequenceRunner {
 public:
  /// A cache of `num_blocks` blocks of `block_size` tokens, in `dtype`, shaped for `m`
  /// (which must outlive the runner).
  SequenceRunner(model::Model& m, kernels::KvDtype dtype, int block_size, int num_blocks)
      : m_(m), pool_(num_blocks), block_size_(block_size) {
    kv::KvCacheShape s;
    s.n_layers = m.config().n_layer;
    s.n_kv_heads = m.config().n_head_kv;
    s.head_dim = m.config().head_dim;
    s.block_size = block_size;
    s.num_blocks = num_blocks;
    s.dtype = dtype;
    cache_ = std::make_unique<kv::KvCache>(s);
  }

  /// Feeds tokens at positions [pos, pos+n), returns the logits of the last one
  /// ([n_vocab]). `prompt_len`: the sequence's prompt length; tokens at positions below it
  /// take the batched-prompt matmul order (model::Batch::gemm_order) exactly as the engine
  /// flags them, whether the prompt is fed whole or token by token.
  std::vector<float> feed(const std::vector<int32_t>& toks, int pos, int prompt_len) {
    model::Batch b;
    const int need = (pos + static_cast<int>(toks.size()) + block_size_ - 1) / block_size_;
    if (need > static_cast<int>(table_.blocks.size())) {
      EXPECT_TRUE(pool_.allocate(need - table_.blocks.size(), table_.blocks)) << "test KV cache too small";
    }
    b.block_tables.push_back(table_.blocks.data());
    for (size_t i = 0; i < toks.size(); ++i) {
      b.tokens.push_back(toks[i]);
      b.positions.push_back(pos + static_cast<int>(i));
      b.slot_mapping.push_back(table_.slot(pos + static_cast<int>(i), block_size_));
      b.seq_ids.push_back(0);
      b.gemm_order.push_back(kernels::gemm_order_flag(pos + static_cast<int>(i), prompt_len));
    }
    b.logits_rows.push_back(static_cast<int>(toks.size()) - 1);
    const float* logits = m_.forward(b, cache_->layers());
    return std::vector<float>(logits, logits + m_.config().n_vocab);
  }

 private:
  model::Model& m_;
  std::unique_ptr<kv::KvCache> cache_;
  kv::BlockPool pool_;
  kv::BlockTable table_;
  int block_size_;
};

}  // namespace pdserve::testing
