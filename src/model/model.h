// A loaded llama-family model: the mapped GGUF file, its config and weight views, and
// the transformer forward pass over a Batch with a paged KV cache.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "gguf/gguf.h"
#include "kernels/attention.h"
#include "model/batch.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace pdserve::model {

class Model {
 public:
  /// Maps and validates `path` (GGUF), reads the config, binds the weights.
  static Result<std::unique_ptr<Model>> load(const std::string& path);

  const ModelConfig& config() const { return config_; }
  const gguf::GgufFile& file() const { return *file_; }

  /// Runs the decoder over `batch`, writing each token's K/V into `kv` (one view per
  /// layer) and returning logits for batch.logits_rows in `logits`
  /// ([logits_rows.size()][n_vocab] float32). Uses the OpenMP thread count in force.
  /// Llama architecture (Touvron et al. 2023): pre-RMSNorm, RoPE, grouped-query
  /// attention, SwiGLU FFN; qwen2 adds Q/K/V biases and NeoX RoPE.
  void forward(const Batch& batch, const std::vector<kernels::KvLayerView>& kv, float* logits) const;

 private:
  std::unique_ptr<gguf::GgufFile> file_;
  ModelConfig config_;
  Weights weights_;
};

}  // namespace pdserve::model
