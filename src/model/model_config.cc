#include "model/model_config.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <variant>

namespace pdserve::model {

Result<ModelConfig> ModelConfig::from_gguf(const gguf::GgufFile& f) {
  ModelConfig c;
  auto arch = f.require_string("general.architecture");
  if (!arch.ok()) return arch.status();
  c.arch = arch.value();
  if (c.arch != "llama" && c.arch != "qwen2" && c.arch != "qwen3" && c.arch != "qwen3moe" && c.arch != "phi3" &&
      c.arch != "gemma2" && c.arch != "gemma3")
    return Status::InvalidArgument("unsupported architecture '" + c.arch +
                                   "' (general.architecture; supported: llama, qwen2, qwen3, qwen3moe, phi3, gemma2, gemma3)");
  c.name = f.get_string("general.name").value_or("");
  const std::string p = c.arch + ".";
  // Every integer hyperparameter is range-checked in int64 before it narrows to int: a
  // value such as 2^32 must not wrap to 0 or to a negative count.
  constexpr int64_t kMaxDim = int64_t{1} << 24;
  auto read_int = [&](const std::string& key, std::optional<int64_t> fallback, int64_t lo, int64_t hi,
                      int& out) -> Status {
    const gguf::Value* raw = f.find(p + key);
    std::optional<int64_t> v = raw && std::holds_alternative<bool>(raw->v) ? std::nullopt : f.get_int(p + key);  // not true as 1
    if (!v && !raw && fallback) v = fallback;
    if (!v) return f.find(p + key) ? Status::InvalidArgument("metadata key '" + p + key + "' must be an integer")
                                   : Status::NotFound("missing required metadata key '" + p + key + "'");
    if (*v < lo || *v > hi)
      return Status::InvalidArgument("metadata key '" + p + key + "' is " + std::to_string(*v) + ": it must be between " +
                                     std::to_string(lo) + " and " + std::to_string(hi));
    out = static_cast<int>(*v);
    return Status::Ok();
  };
  // Float hyperparameters: a key that is present must be a finite number above `lo` (or at
  // least `lo` when `lo_ok`); a NaN or zero RoPE base, a negative epsilon or a string there
  // loaded and generated NaN logits, or fell back to the default without a word.
  auto read_float = [&](const std::string& key, double fallback, double lo, bool lo_ok, float& out) -> Status {
    const gguf::Value* v = f.find(p + key);
    if (!v) {
      out = static_cast<float>(fallback);
      return Status::Ok();
    }
    const std::optional<double> d = std::holds_alternative<bool>(v->v) ? std::nullopt : v->as_float();
    if (!d) return Status::InvalidArgument("metadata key '" + p + key + "' must be a number");
    const auto num = [](double x) {
      char b[32];
      std::snprintf(b, sizeof b, "%g", x);
      return std::string(b);
    };
    if (!std::isfinite(*d) || *d < lo || (*d == lo && !lo_ok))
      return Status::InvalidArgument("metadata key '" + p + key + "' is " + num(*d) + ": it must be a finite number " +
                                     (lo_ok ? "of at least " : "above ") + num(lo));
    out = static_cast<float>(*d);
    return Status::Ok();
  };
  for (auto [key, out] : {std::pair<const char*, int*>{"context_length", &c.n_ctx},
                          {"embedding_length", &c.n_embd},
                          {"block_count", &c.n_layer},
                          {"feed_forward_length", &c.n_ff},
                          {"attention.head_count", &c.n_head}}) {
    Status s = read_int(key, std::nullopt, 1, kMaxDim, *out);
    if (!s.ok()) return s;
  }
  if (Status s = read_int("attention.head_count_kv", c.n_head, 1, c.n_head, c.n_head_kv); !s.ok()) return s;
  if (c.n_head % c.n_head_kv != 0)
    return Status::InvalidArgument("metadata key '" + p + "attention.head_count_kv' must divide the head count");
  if (!f.find(p + "attention.key_length") && c.n_embd % c.n_head != 0)
    return Status::InvalidArgument("embedding_length is not a multiple of attention.head_count");
  if (Status s = read_int("attention.key_length", c.n_embd / c.n_head, 1, kMaxDim, c.head_dim); !s.ok()) return s;
  if (Status s = read_int("rope.dimension_count", c.head_dim, 0, kMaxDim, c.rope_dim); !s.ok()) return s;
  if (c.rope_dim < 2 || c.rope_dim > c.head_dim || c.rope_dim % 2 != 0)
    return Status::InvalidArgument("metadata key '" + p + "rope.dimension_count' is " + std::to_string(c.rope_dim) +
                         ": it must be even and between 2 and the head dimension (" + std::to_string(c.head_dim) + ")");
  if (Status st = read_float("rope.freq_base", 10000.0, 0, false, c.rope_base); !st.ok()) return st;
  if (f.find(p + "rope.scaling.type") && !f.get_string(p + "rope.scaling.type"))
    return Status::InvalidArgument("metadata key '" + p + "rope.scaling.type' must be a string");
  if (auto type = f.get_string(p + "rope.scaling.type"); type && *type == "linear") {
    float factor = 1.f;
    if (Status st = read_float("rope.scaling.factor", 1.0, 0, false, factor); !st.ok()) return st;
    c.rope_freq_scale = 1.0f / factor;
  } else if (type && *type != "none") {
    // YaRN and the rest change the rotation itself: refused rather than run wrong. (Llama 3's
    // scaling comes as the rope_freqs.weight tensor, Phi-3's long-RoPE as rope_factors_*.)
    return Status::InvalidArgument("metadata key '" + p + "rope.scaling.type' is '" + *type +
                                   "': not supported (supported: none, linear)");
  }
  // Experts: qwen3moe always has them (llama.cpp throws on n_expert 0 for it); llama may
  // (Mixtral). llama.cpp caps them at LLAMA_MAX_EXPERTS (512) and n_expert_used at n_expert.
  const bool moe_arch = c.arch == "qwen3moe";
  if (moe_arch || c.arch == "llama") {
    if (Status s = read_int("expert_count", moe_arch ? std::nullopt : std::optional<int64_t>(0), moe_arch ? 1 : 0, 512, c.n_expert);
        !s.ok())
      return s;
  } else if (auto n = f.get_int(p + "expert_count"); n && *n > 0) {
    return Status::InvalidArgument("metadata key '" + p + "expert_count' is " + std::to_string(*n) +
                                   ": mixture-of-experts is supported for qwen3moe and llama (Mixtral) only");
  }
  if (c.n_expert > 0) {
    if (Status s = read_int("expert_used_count", std::nullopt, 1, c.n_expert, c.n_expert_used); !s.ok()) return s;
    if (moe_arch) {
      if (Status s = read_int("expert_feed_forward_length", c.n_ff / c.n_expert_used, 1, kMaxDim, c.n_ff_exp); !s.ok()) return s;
    } else {
      c.n_ff_exp = c.n_ff;
    }
  }
  c.rope_neox = c.arch == "qwen2" || c.arch == "qwen3" || c.arch == "qwen3moe" || c.arch == "phi3" || c.arch == "gemma2" ||
                c.arch == "gemma3";
  if (Status st = read_float("rope.scaling.attn_factor", 1.0, 0, false, c.rope_attn_factor); !st.ok()) return st;
  if (Status s = read_int("rope.scaling.original_context_length", c.n_ctx, 1, kMaxDim, c.rope_orig_ctx); !s.ok()) return s;
  // Phi-3's sliding window: llama.cpp (llama-model.cpp, LLM_ARCH_PHI3) reads it and turns it
  // off ("Phi SWA is currently disabled", ggml-org/llama.cpp#13676), so every layer attends
  // to the whole context there; we do the same to match it.
  if (Status s = read_int("attention.sliding_window", 0, 0, kMaxDim, c.sliding_window); !s.ok()) return s;
  c.qk_norm = c.arch == "qwen3" || c.arch == "qwen3moe" || c.arch == "gemma3";
  c.q_prescale = c.arch == "phi3" || c.arch == "gemma2" || c.arch == "gemma3";
  c.q_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  if (c.arch == "gemma2") {
    // llama.cpp (llama_model gemma2 hparams): window 4096 unless the key says otherwise,
    // every even layer windowed, soft caps 50 / 30 unless given, and Q scaled by
    // 1/sqrt(head_dim) — 1/sqrt(n_embd / n_head) for the 27B (46 layers), as Gemma's
    // query_pre_attn_scalar (the converter writes no key for it).
    if (Status s = read_int("attention.sliding_window", 4096, 0, kMaxDim, c.sliding_window); !s.ok()) return s;
    c.swa_pattern = 2;
    c.embd_scale = c.geglu = c.post_norms = true;
    if (Status st = read_float("attn_logit_softcapping", 50.0, 0, true, c.attn_softcap); !st.ok()) return st;
    if (Status st = read_float("final_logit_softcapping", 30.0, 0, true, c.final_softcap); !st.ok()) return st;
    if (c.n_layer == 46) c.q_scale = 1.0f / std::sqrt(static_cast<float>(c.n_embd / c.n_head));
  }
  if (c.arch == "gemma3") {
    // llama.cpp (llama_model gemma3 hparams, graph llm_build_gemma3): with a window, layer l
    // is local when l % pattern < pattern − 1 (pattern {arch}.attention.sliding_window_pattern,
    // default 6: five local, one global); local layers take RoPE base {arch}.rope.freq_base_swa
    // (default 10000) without linear scaling, global ones rope.freq_base (1e6) with
    // rope.scaling.factor. No attention soft cap; the final one only without a window (the
    // non-iswa graph). Q scaled by 1/sqrt(head_dim) — 1/sqrt(n_embd / n_head) for the 27B
    // (62 layers) — as Gemma's query_pre_attn_scalar (the converter writes no key for it).
    c.embd_scale = c.geglu = c.post_norms = true;
    if (c.sliding_window > 0) {
      if (f.find(p + "attention.sliding_window_pattern") && !f.get_int(p + "attention.sliding_window_pattern"))
        return Status::InvalidArgument("metadata key '" + p +
                                       "attention.sliding_window_pattern' must be an integer (a per-layer array is not supported)");
      if (Status s = read_int("attention.sliding_window_pattern", 6, 1, kMaxDim, c.swa_pattern); !s.ok()) return s;
      if (Status st = read_float("rope.freq_base_swa", 10000.0, 0, false, c.rope_base_swa); !st.ok()) return st;
      c.rope_freq_scale_swa = 1.f;
    } else {
      if (Status st = read_float("final_logit_softcapping", 0.0, 0, true, c.final_softcap); !st.ok()) return st;
    }
    if (c.n_layer == 62) c.q_scale = 1.0f / std::sqrt(static_cast<float>(c.n_embd / c.n_head));
  } else {
    c.rope_base_swa = c.rope_base;
    c.rope_freq_scale_swa = c.rope_freq_scale;
  }
  if (Status st = read_float("attention.layer_norm_rms_epsilon", 1e-5, 0, true, c.rms_eps); !st.ok()) return st;
  if (const gguf::Array* toks = f.get_array("tokenizer.ggml.tokens")) c.n_vocab = static_cast<int>(toks->items.size());
  return c;
}

}  // namespace pdserve::model
