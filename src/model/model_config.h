// Model hyper-parameters read from GGUF metadata (`{arch}.*` keys).
#pragma once

#include <string>

#include "base/status.h"
#include "gguf/gguf.h"

namespace pdserve::model {

/// Shapes and constants of a llama-family decoder.
struct ModelConfig {
  std::string arch;         // general.architecture: "llama", "qwen2", "qwen3", "qwen3moe", "phi3", "gemma2", "gemma3"
  std::string name;         // general.name (may be empty)
  int n_vocab = 0;
  int n_ctx = 0;            // {arch}.context_length
  int n_embd = 0;           // {arch}.embedding_length
  int n_layer = 0;          // {arch}.block_count
  int n_head = 0;           // {arch}.attention.head_count
  int n_head_kv = 0;        // {arch}.attention.head_count_kv (default n_head)
  int head_dim = 0;         // n_embd / n_head (or {arch}.attention.key_length)
  int n_ff = 0;             // {arch}.feed_forward_length
  // Mixture of experts (qwen3moe; llama with experts = Mixtral): every block's FFN is
  // n_expert SwiGLU experts of n_ff_exp rows, of which a router picks n_expert_used per
  // token (llama.cpp build_moe_ffn: softmax over all experts, top-k, weights renormalised
  // over the chosen). 0 = a dense FFN.
  int n_expert = 0;         // {arch}.expert_count
  int n_expert_used = 0;    // {arch}.expert_used_count
  int n_ff_exp = 0;         // qwen3moe: {arch}.expert_feed_forward_length (default n_ff / n_expert_used); llama: n_ff
  int rope_dim = 0;         // {arch}.rope.dimension_count (default head_dim)
  float rope_base = 10000.f;  // {arch}.rope.freq_base
  float rope_freq_scale = 1.f;  // 1 / {arch}.rope.scaling.factor for linear scaling
  // RoPE of the sliding-window layers (llama.cpp rope_freq_base_train_swa / _scale_train_swa):
  // the global values unless the architecture sets its own (gemma3: {arch}.rope.freq_base_swa,
  // default 10000, and no linear scaling).
  float rope_base_swa = 10000.f;
  float rope_freq_scale_swa = 1.f;
  bool rope_neox = false;   // NeoX-style pairs (qwen2, qwen3, phi3) vs adjacent pairs (llama)
  float rope_attn_factor = 1.f;  // {arch}.rope.scaling.attn_factor: cos/sin scale (phi3 long-RoPE)
  int rope_orig_ctx = 0;    // {arch}.rope.scaling.original_context_length (default n_ctx): phi3
                            // uses rope_factors_long above it, rope_factors_short up to it
  int sliding_window = 0;   // {arch}.attention.sliding_window (phi3: read, not applied — see model_config.cc)
  int swa_pattern = 0;      // sliding-window layers: layer l is one when l % swa_pattern < swa_pattern − 1
                            // (llama.cpp set_swa_pattern; gemma2: 2, every even layer; gemma3: 6,
                            // {arch}.attention.sliding_window_pattern, five local then one global); 0 = none
  // Gemma (llama.cpp llm_build_gemma2_iswa, llm_build_gemma3): embeddings × sqrt(n_embd), GeGLU, RMSNorm after
  // the attention and after the FFN (post_attention_norm / post_ffw_norm) before each
  // residual add, attention and final logit soft-capping ({arch}.attn_logit_softcapping,
  // {arch}.final_logit_softcapping; 0 = off).
  bool embd_scale = false;
  bool geglu = false;
  bool post_norms = false;
  float attn_softcap = 0.f;
  float final_softcap = 0.f;
  bool qk_norm = false;     // RMSNorm of each Q and K head before RoPE (qwen3, gemma3: attn_q_norm / attn_k_norm)
  bool q_prescale = false;  // Q scaled by q_scale after RoPE, attention scale 1 (phi3, gemma2, gemma3, as llama.cpp)
  float q_scale = 0.f;      // with q_prescale: phi3 1/sqrt(head_dim); gemma2/3 f_attention_scale
  float rms_eps = 1e-5f;    // {arch}.attention.layer_norm_rms_epsilon

  /// True when layer `l` attends only to its sliding window.
  bool is_swa_layer(int l) const { return swa_pattern > 0 && sliding_window > 0 && l % swa_pattern < swa_pattern - 1; }
  /// RoPE base and linear frequency scale of layer `l` (llama.cpp get_rope_freq_base / _scale).
  float rope_base_of(int l) const { return is_swa_layer(l) ? rope_base_swa : rope_base; }
  float rope_freq_scale_of(int l) const { return is_swa_layer(l) ? rope_freq_scale_swa : rope_freq_scale; }

  /// Reads and validates the config; errors name the missing or invalid key.
  static Result<ModelConfig> from_gguf(const gguf::GgufFile& f);
};

}  // namespace pdserve::model
