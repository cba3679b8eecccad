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
#include "model/op_profile.h"
#include "model/weights.h"
#include "model/workspace.h"

namespace pdserve::model {

class Model {
 public:
  /// Maps and validates `path` (GGUF), reads the config, binds the weights. `memory`: the
  /// weights in a private copy on huge pages (default, the faster decode) or left
  /// memory-mapped (gguf::FileMemory). Errors name the file and the problem (e.g. a head
  /// dimension above kernels::kMaxHeadDim).
  static Result<std::unique_ptr<Model>> load(const std::string& path,
                                             gguf::FileMemory memory = gguf::FileMemory::kHugePages);

  const ModelConfig& config() const { return config_; }

  /// The context length each sequence runs with (an engine: its --ctx-size). Picks the RoPE
  /// frequency factors as llama.cpp's llama_model::get_rope_factors does: rope_freqs if
  /// the file has it, else phi3's rope_factors_long when n_ctx_per_seq exceeds
  /// rope.scaling.original_context_length and rope_factors_short otherwise. load() sets
  /// the file's context_length (as llama.cpp does with no -c).
  void set_context_length(int n_ctx_per_seq);
  const gguf::GgufFile& file() const { return *file_; }
  /// Bytes of weight matrices load() rewrote into the kernels' layout (Weights::relayout_for_kernels).
  int64_t relaid_bytes() const { return relaid_bytes_; }
  /// gguf::weights_fingerprint of the file as it was read (before any re-layout), so the same
  /// weights give the same fingerprint in every process, mapped or copied.
  const std::string& weights_fingerprint() const { return weights_fingerprint_; }

  /// Sizes the activation workspace for batches of up to `max_tokens` tokens of which up
  /// to `max_logits_rows` need logits (an engine: its token budget and max sequences), so
  /// that forward() allocates nothing. A batch larger than that is not an error: forward()
  /// grows the workspace to fit it (one allocation; the larger size is then kept).
  void reserve(int max_tokens, int max_logits_rows) { ws_.fit(config_, max_tokens, max_logits_rows); }
  /// Tokens and logits rows the workspace holds now (see reserve).
  int reserved_tokens() const { return ws_.tokens(); }
  int reserved_logits_rows() const { return ws_.logits_rows(); }

  /// Runs the decoder over `batch`, writing each token's K/V into `kv` (one view per
  /// layer). Returns the logits of batch.logits_rows, [logits_rows.size()][n_vocab]
  /// float32, in the model's workspace: valid until the next forward() or reserve().
  /// One forward at a time per Model. Uses the OpenMP thread count in force.
  /// Llama architecture (Touvron et al. 2023): pre-RMSNorm, RoPE, grouped-query
  /// attention, SwiGLU FFN; qwen2 adds Q/K/V biases and NeoX RoPE.
  const float* forward(const Batch& batch, const std::vector<kernels::KvLayerView>& kv);

  /// Early exit (self-speculative drafting, LayerSkip: Elhoushi et al. 2024): forward()
  /// through the first `n_layers` layers only (1..n_layer; n_layer = forward()), then the
  /// output norm and head on the logits rows. Writes those layers' K/V of every token —
  /// the bits forward() writes there, as the first layers do not depend on the rest.
  const float* forward_first_layers(const Batch& batch, const std::vector<kernels::KvLayerView>& kv, int n_layers);

  /// Per-op timing of every later forward pass, added into `*p` (nullptr = off, the
  /// default). Also switches kernels::matmul's accounting (process-wide). Outputs are the
  /// same either way.
  void set_profile(OpProfile* p);

 private:
  std::unique_ptr<gguf::GgufFile> file_;
  int64_t relaid_bytes_ = 0;
  std::string weights_fingerprint_;
  ModelConfig config_;
  Weights weights_;
  Workspace ws_;
  OpProfile* profile_ = nullptr;
  const float* rope_factors_ = nullptr;  // [rope_dim/2] or null (set_context_length)
};

}  // namespace pdserve::model
