// Random-weight GGUF models with the shapes of real ones (`pdserve synth`): benchmarks
// of a 1B-class model without downloading one. Weights ~ N(0, 0.02) (norm weights 1.0),
// rounded to f16 as a real checkpoint would be, then quantised with the reference
// quantisers exactly as `pdserve quantize` would (model/quantize.h: same per-tensor types).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace pdserve::model {

/// The hyper-parameters a synthetic model needs.
struct ShapeSpec {
  std::string name;           // general.name
  std::string arch = "llama"; // "llama", "qwen2" (Q/K/V biases, NeoX RoPE), "qwen3" (per-head Q/K
                              // RMSNorm, NeoX RoPE), "qwen3moe" (qwen3's attention, MoE FFN; per-head Q/K
                              // RMSNorm, NeoX RoPE), "phi3" (fused attn_qkv and gate/up, NeoX RoPE)
                              // "gemma2" (post-attention / post-FFN norms, soft caps, window) or
                              // "gemma3" (gemma2's norms with qwen3's per-head Q/K norms, 5:1 window)
  int n_embd = 0;
  int n_layer = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int n_ff = 0;
  // Mixture of experts: n_expert experts of n_ff_exp rows, n_expert_used per token;
  // 0 = dense. "qwen3moe" writes all three keys ({arch}.expert_count, expert_used_count,
  // expert_feed_forward_length); "llama" with n_expert > 0 (Mixtral) the first two, its
  // experts n_ff rows.
  int n_expert = 0;
  int n_expert_used = 0;
  int n_ff_exp = 0;
  int head_dim = 0;           // 0: n_embd / n_head (else written as attention.key_length / value_length)
  int n_vocab = 0;            // the shape's vocabulary (replaced by the tokenizer's, see SynthOptions)
  int n_ctx = 2048;
  float rope_base = 10000.f;
  float rms_eps = 1e-5f;
  bool tied_embeddings = false;  // no output.weight: the head reuses token_embd
  // Llama 3.1+ RoPE scaling (HF rope_scaling {rope_type: llama3, factor, low_freq_factor,
  // high_freq_factor, original_max_position_embeddings}); 0 = none. Written as llama.cpp's
  // converter does: a rope_freqs.weight tensor of per-pair factors (see llama3_rope_freqs).
  float llama3_factor = 0.f;
  float llama3_low_freq_factor = 1.f;
  float llama3_high_freq_factor = 4.f;
  int llama3_orig_ctx = 8192;
  // Phi-3 long-RoPE (HF rope_scaling {type: longrope, long_factor, short_factor}): the
  // factors (head_dim/2 each) as rope_factors_long/short.weight, original context as
  // rope.scaling.original_context_length, and the attention factor the converter derives,
  // sqrt(1 + ln(n_ctx / orig) / ln(orig)), as rope.scaling.attn_factor. Empty = none.
  std::vector<float> rope_long, rope_short;
  int rope_orig_ctx = 0;
  float rope_base_swa = 0.f;  // rope.freq_base_swa (gemma3's local layers), written when > 0
  float rope_linear_factor = 0.f;  // rope.scaling.type linear with this factor (Gemma 3 4B+: 8); 0 = none
  int sliding_window = -1;    // attention.sliding_window (phi3, gemma2, gemma3), -1 = not written
  float attn_softcap = 0.f;   // gemma2: attn_logit_softcapping, written when > 0
  float final_softcap = 0.f;  // gemma2: final_logit_softcapping, written when > 0
};

/// Llama 3's per-pair RoPE frequency factors for head dimension `dim` (convert_hf_to_gguf.py
/// LlamaModel.generate_extra_tensors, in float32): 1 for wavelengths below
/// orig_ctx/high_freq_factor, `factor` above orig_ctx/low_freq_factor, and the smooth
/// interpolation 1 / ((1 − s)/factor + s), s = (orig_ctx/λ − low)/(high − low), between.
std::vector<float> llama3_rope_freqs(const ShapeSpec& s, int dim);

/// Built-in shapes: "tinyllama-1.1b", "llama-3.2-1b", "qwen2.5-0.5b", "qwen3-0.6b",
/// "qwen3-30b-a3b", "mixtral-8x7b", "phi-3.5-mini", "gemma-2-2b", "gemma-3-1b" (real configs, except that
/// qwen3-30b-a3b has 8 experts, 2 per token, instead of 128 and 8; tests scale layers,
/// vocabulary, the sliding window and mixtral's expert width down). Error lists them.
Result<ShapeSpec> builtin_shape(const std::string& name);
std::vector<std::string> builtin_shape_names();

struct SynthOptions {
  std::string type = "F16";   // F16 or any model::parse_quantize_type name (Q8_0, Q4_0, Q4_K_M, …)
  std::string vocab_from;     // GGUF whose tokenizer.* keys are copied; empty = none (then n_vocab from the shape, no tokenizer)
  uint64_t seed = 1;
};

struct SynthReport {
  int n_vocab = 0;            // the vocabulary actually used
  bool vocab_changed = false; // the tokenizer's vocabulary differs from the shape's
  uint64_t file_bytes = 0;
  uint64_t weight_bytes = 0;  // bytes of 2-D tensors
};

/// Writes a random-weight model of `shape` to `out`. The same seed gives the same file
/// whatever the thread count.
Result<SynthReport> synth_model(const ShapeSpec& shape, const SynthOptions& opt, const std::string& out);

}  // namespace pdserve::model
