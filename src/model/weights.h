// Views of a model's weight tensors inside the mapped GGUF file (no copies).
// Tensor names follow llama.cpp's LLM_TENSOR names: token_embd, blk.N.attn_q, ….
#pragma once

#include <vector>

#include "base/status.h"
#include "gguf/gguf.h"
#include "kernels/matmul.h"
#include "model/model_config.h"

namespace pdserve::model {

/// One transformer block. Norm weights and biases are float32 vectors; bias pointers
/// are null when the architecture has none (llama).
struct LayerWeights {
  const float* attn_norm = nullptr;              // [n_embd]
  kernels::WeightView wq, wk, wv, wo;             // [n_head*hd, n_embd], [n_kv*hd, n_embd] ×2, [n_embd, n_head*hd]
  const float* bq = nullptr;                     // [n_head*hd]
  const float* bk = nullptr;                     // [n_kv*hd]
  const float* bv = nullptr;                     // [n_kv*hd]
  const float* q_norm = nullptr;                 // [hd] per-head RMSNorm weight (qwen3)
  const float* k_norm = nullptr;                 // [hd]
  const float* ffn_norm = nullptr;               // [n_embd]
  const float* attn_post_norm = nullptr;         // [n_embd] gemma2: post_attention_norm
  const float* ffn_post_norm = nullptr;          // [n_embd] gemma2: post_ffw_norm
  kernels::WeightView w_gate, w_up, w_down;      // [n_ff, n_embd] ×2, [n_embd, n_ff]
  // phi3 stores Q, K and V as one attn_qkv [n_embd, (n_head + 2·n_kv)·hd] and gate and up as
  // one ffn_up [n_embd, 2·n_ff] (gate first, as ggml_swiglu splits it): wq/wk/wv and
  // w_gate/w_up are then views of consecutive row ranges of those tensors.
};

struct Weights {
  kernels::WeightView tok_embd;   // [n_vocab, n_embd]
  std::vector<LayerWeights> layers;
  const float* output_norm = nullptr;  // [n_embd]
  kernels::WeightView output;     // [n_vocab, n_embd]; = tok_embd when tied
  // RoPE frequency factors, [rope_dim/2] each, or null (llama.cpp's get_rope_factors: the
  // rotation angle of pair i is divided by factor i): rope_freqs.weight (Llama 3.1+, made by
  // the converter from rope_scaling llama3), rope_factors_long/short.weight (phi3 long-RoPE).
  const float* rope_freqs = nullptr;
  const float* rope_long = nullptr;
  const float* rope_short = nullptr;

  /// Binds every tensor; errors name the missing tensor, a wrong shape or an
  /// unsupported type (e.g. "tensor 'blk.0.attn_q.weight' has shape [64, 32], expected [64, 64]").
  static Result<Weights> bind(const gguf::GgufFile& f, const ModelConfig& c);
};

}  // namespace pdserve::model
