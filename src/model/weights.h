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
  // Mixture of experts (ModelConfig::n_expert > 0; then w_gate/w_up/w_down are unbound):
  // the router ffn_gate_inp [n_expert, n_embd] and the experts' ffn_gate_exps / ffn_up_exps
  // [n_expert][n_ff_exp, n_embd] and ffn_down_exps [n_expert][n_embd, n_ff_exp] (ggml dims
  // [cols, rows, n_expert]), each bound as one matrix of n_expert · rows rows: expert e is
  // rows [e · rows, (e + 1) · rows) (expert_slice).
  kernels::WeightView ffn_gate_inp;
  kernels::WeightView w_gate_exps, w_up_exps, w_down_exps;
  // phi3 stores Q, K and V as one attn_qkv [n_embd, (n_head + 2·n_kv)·hd] and gate and up as
  // one ffn_up [n_embd, 2·n_ff] (gate first, as ggml_swiglu splits it): wq/wk/wv and
  // w_gate/w_up are then views of consecutive row ranges of those tensors.
};

/// Expert `e` of a stacked expert tensor bound as n_expert · `rows` rows (LayerWeights):
/// a view of its `rows` rows, in the tensor's type.
inline kernels::WeightView expert_slice(const kernels::WeightView& stacked, int e, int64_t rows) {
  kernels::WeightView v = stacked;
  v.data = static_cast<const uint8_t*>(stacked.data) + e * rows * stacked.row_bytes;
  v.rows = rows;
  return v;
}

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

  /// Rewrites, in place, the layer matrices and output head that have a faster layout for
  /// the AVX-512 kernels (kernels/weight_layout.h: Q4_0 and K-quants in 16-row tiles) and marks their
  /// views. The bytes must be the model's private copy (gguf::FileMemory::kHugePages),
  /// never the mapped file. Products keep their bits on every ISA. Returns the bytes
  /// rewritten.
  int64_t relayout_for_kernels();
};

}  // namespace pdserve::model
