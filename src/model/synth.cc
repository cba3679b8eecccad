#include "model/synth.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/fp16.h"
#include "gguf/gguf.h"
#include "kernels/quants.h"
#include "model/quantize.h"

namespace pdserve::model {

using gguf::GgmlType;
using gguf::Value;

Result<ShapeSpec> builtin_shape(const std::string& name) {
  ShapeSpec s;
  s.name = name;
  if (name == "tinyllama-1.1b") {
    s.arch = "llama"; s.n_embd = 2048; s.n_layer = 22; s.n_head = 32; s.n_head_kv = 4; s.n_ff = 5632;
    s.n_vocab = 32000; s.n_ctx = 2048; s.rope_base = 10000.f; s.rms_eps = 1e-5f; s.tied_embeddings = false;
  } else if (name == "llama-3.2-1b") {
    s.arch = "llama"; s.n_embd = 2048; s.n_layer = 16; s.n_head = 32; s.n_head_kv = 8; s.n_ff = 8192;
    s.n_vocab = 128256; s.n_ctx = 131072; s.rope_base = 500000.f; s.rms_eps = 1e-5f; s.tied_embeddings = true;
    s.llama3_factor = 32.f; s.llama3_low_freq_factor = 1.f; s.llama3_high_freq_factor = 4.f; s.llama3_orig_ctx = 8192;
  } else if (name == "qwen3-0.6b") {
    s.arch = "qwen3"; s.n_embd = 1024; s.n_layer = 28; s.n_head = 16; s.n_head_kv = 8; s.head_dim = 128; s.n_ff = 3072;
    s.n_vocab = 151936; s.n_ctx = 40960; s.rope_base = 1000000.f; s.rms_eps = 1e-6f; s.tied_embeddings = true;
  } else if (name == "qwen3-30b-a3b") {
    // Qwen/Qwen3-30B-A3B config.json (hidden 2048, 48 layers, 32 heads, 4 KV heads, head_dim
    // 128, intermediate 6144, moe_intermediate 768, rope_theta 1e6, rms 1e-6, untied), except
    // the experts: 8 of them, 2 per token, instead of 128 and 8 — 128 experts of 3 × 2048 × 768
    // are 1.2 GB of f16 per layer, too big for tests; the routing math is the same.
    s.arch = "qwen3moe"; s.n_embd = 2048; s.n_layer = 48; s.n_head = 32; s.n_head_kv = 4; s.head_dim = 128; s.n_ff = 6144;
    s.n_expert = 8; s.n_expert_used = 2; s.n_ff_exp = 768;
    s.n_vocab = 151936; s.n_ctx = 40960; s.rope_base = 1000000.f; s.rms_eps = 1e-6f; s.tied_embeddings = false;
  } else if (name == "mixtral-8x7b") {
    // mistralai/Mixtral-8x7B-v0.1 config.json: llama blocks (GQA 32/8, adjacent-pair RoPE 1e6)
    // whose FFN is 8 SwiGLU experts of 14336 rows, 2 per token (llama.cpp: `llama` with
    // llama.expert_count). The full experts are 2.8 GB of f16 per layer: tests scale n_ff
    // down (`pdserve synth --ff`).
    s.arch = "llama"; s.n_embd = 4096; s.n_layer = 32; s.n_head = 32; s.n_head_kv = 8; s.n_ff = 14336;
    s.n_expert = 8; s.n_expert_used = 2;
    s.n_vocab = 32000; s.n_ctx = 32768; s.rope_base = 1000000.f; s.rms_eps = 1e-5f; s.tied_embeddings = false;
  } else if (name == "phi-3.5-mini") {
    // microsoft/Phi-3.5-mini-instruct config.json (rope_scaling longrope factors as shipped).
    s.arch = "phi3"; s.n_embd = 3072; s.n_layer = 32; s.n_head = 32; s.n_head_kv = 32; s.n_ff = 8192;
    s.n_vocab = 32064; s.n_ctx = 131072; s.rope_base = 10000.f; s.rms_eps = 1e-5f; s.tied_embeddings = false;
    s.rope_orig_ctx = 4096; s.sliding_window = 262144;
    s.rope_long = {1.0800000429153442f, 1.1100000143051147f, 1.1399999856948853f, 1.340000033378601f, 1.5899999141693115f,
                   1.600000023841858f,  1.6200000047683716f, 2.620000123977661f,  3.2300000190734863f, 3.2300000190734863f,
                   4.789999961853027f,  7.400000095367432f,  7.700000286102295f,  9.09000015258789f,   12.199999809265137f,
                   17.670000076293945f, 24.46000099182129f,  28.57000160217285f,  30.420001983642578f, 30.840002059936523f,
                   32.590003967285156f, 32.93000411987305f,  42.320003509521484f, 44.96000289916992f,  50.340003967285156f,
                   50.45000457763672f,  57.55000305175781f,  57.93000411987305f,  58.21000289916992f,  60.1400032043457f,
                   62.61000442504883f,  62.62000274658203f,  62.71000289916992f,  63.1400032043457f,   63.1400032043457f,
                   63.77000427246094f,  63.93000411987305f,  63.96000289916992f,  63.970001220703125f, 64.02999877929688f,
                   64.06999969482422f,  64.08000183105469f,  64.12000274658203f,  64.41000366210938f,  64.4800033569336f,
                   64.51000213623047f,  64.52999877929688f,  64.83999633789062f};
    s.rope_short = {1.0f, 1.0199999809265137f, 1.0299999713897705f, 1.0299999713897705f, 1.0499999523162842f,
                    1.0499999523162842f, 1.0499999523162842f, 1.0499999523162842f, 1.0499999523162842f, 1.0699999332427979f,
                    1.0999999046325684f, 1.1099998950958252f, 1.1599998474121094f, 1.1599998474121094f, 1.1699998378753662f,
                    1.2899998426437378f, 1.339999794960022f,  1.679999828338623f,  1.7899998426437378f, 1.8199998140335083f,
                    1.8499997854232788f, 1.8799997568130493f, 1.9099997282028198f, 1.9399996995925903f, 1.9899996519088745f,
                    2.0199997425079346f, 2.0199997425079346f, 2.0199997425079346f, 2.0199997425079346f, 2.0199997425079346f,
                    2.0199997425079346f, 2.0299997329711914f, 2.0299997329711914f, 2.0299997329711914f, 2.0299997329711914f,
                    2.0299997329711914f, 2.0299997329711914f, 2.0299997329711914f, 2.0299997329711914f, 2.0299997329711914f,
                    2.0799996852874756f, 2.0899996757507324f, 2.189999580383301f,  2.2199995517730713f, 2.5899994373321533f,
                    2.729999542236328f,  2.749999523162842f,  2.8399994373321533f};
  } else if (name == "gemma-2-2b") {
    // google/gemma-2-2b config.json: head_dim 256 over a hidden size of 2304, query_pre_attn_scalar
    // 256 (= head_dim: llama.cpp's default scale), sliding_window 4096 on every even layer.
    s.arch = "gemma2"; s.n_embd = 2304; s.n_layer = 26; s.n_head = 8; s.n_head_kv = 4; s.head_dim = 256; s.n_ff = 9216;
    s.n_vocab = 256000; s.n_ctx = 8192; s.rope_base = 10000.f; s.rms_eps = 1e-6f; s.tied_embeddings = true;
    s.sliding_window = 4096; s.attn_softcap = 50.f; s.final_softcap = 30.f;
  } else if (name == "gemma-3-1b") {
    // google/gemma-3-1b-pt config.json: head_dim 256 over a hidden size of 1152, one KV head,
    // rope_theta 1e6 (global layers), rope_local_base_freq 10000 (llama.cpp's default for the
    // local ones: the converter writes no key), sliding_window 512 with five local layers to
    // one global (sliding_window_pattern 6, llama.cpp's default: no key), query_pre_attn_scalar
    // 256 (= head_dim), no soft caps, no rope_scaling (the 4B and larger have linear 8).
    s.arch = "gemma3"; s.n_embd = 1152; s.n_layer = 26; s.n_head = 4; s.n_head_kv = 1; s.head_dim = 256; s.n_ff = 6912;
    s.n_vocab = 262144; s.n_ctx = 32768; s.rope_base = 1000000.f; s.rms_eps = 1e-6f; s.tied_embeddings = true;
    s.sliding_window = 512;
  } else if (name == "qwen2.5-0.5b") {
    s.arch = "qwen2"; s.n_embd = 896; s.n_layer = 24; s.n_head = 14; s.n_head_kv = 2; s.n_ff = 4864;
    s.n_vocab = 151936; s.n_ctx = 32768; s.rope_base = 1000000.f; s.rms_eps = 1e-6f; s.tied_embeddings = true;
  } else {
    std::string names;
    for (const auto& n : builtin_shape_names()) names += (names.empty() ? "" : ", ") + n;
    return Status::InvalidArgument("unknown shape '" + name + "' (expected " + names + ")");
  }
  return s;
}

std::vector<std::string> builtin_shape_names() {
  return {"tinyllama-1.1b", "llama-3.2-1b", "qwen2.5-0.5b", "qwen3-0.6b", "qwen3-30b-a3b", "mixtral-8x7b", "phi-3.5-mini",
          "gemma-2-2b", "gemma-3-1b"};
}

std::vector<float> llama3_rope_freqs(const ShapeSpec& s, int dim) {
  const float factor = s.llama3_factor, low = s.llama3_low_freq_factor, high = s.llama3_high_freq_factor;
  const float old_ctx = static_cast<float>(s.llama3_orig_ctx);
  const float low_wavelen = old_ctx / low, high_wavelen = old_ctx / high;
  std::vector<float> out;
  for (int i = 0; i < dim; i += 2) {
    const float freq = 1.0f / std::pow(s.rope_base, static_cast<float>(i) / static_cast<float>(dim));
    const float wavelen = static_cast<float>(2 * M_PI) / freq;
    if (wavelen < high_wavelen) {
      out.push_back(1.0f);
    } else if (wavelen > low_wavelen) {
      out.push_back(factor);
    } else {
      const float smooth = (old_ctx / wavelen - low) / (high - low);
      out.push_back(1.0f / ((1.0f - smooth) / factor + smooth));
    }
  }
  return out;
}

namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/// Fills `out` with N(0, sigma) values (Box–Muller), from a stream keyed by (seed, tensor, row).
void normal_row(uint64_t seed, uint64_t tensor, int64_t row, float sigma, float* out, int64_t n) {
  uint64_t st = seed * 0x2545f4914f6cdd1dULL ^ (tensor << 40) ^ static_cast<uint64_t>(row);
  splitmix64(st);
  for (int64_t i = 0; i < n; i += 2) {
    const uint64_t r = splitmix64(st);
    const double u1 = ((r >> 11) + 1) * (1.0 / 9007199254740993.0);  // (0, 1]
    const double u2 = (splitmix64(st) >> 11) * (1.0 / 9007199254740992.0);
    const double m = std::sqrt(-2.0 * std::log(u1)) * sigma;
    out[i] = static_cast<float>(m * std::cos(2 * M_PI * u2));
    if (i + 1 < n) out[i + 1] = static_cast<float>(m * std::sin(2 * M_PI * u2));
  }
}

}  // namespace

Result<SynthReport> synth_model(const ShapeSpec& s, const SynthOptions& opt, const std::string& out) {
  auto plan = parse_quantize_type(opt.type);
  if (!plan.ok()) return plan.status();
  if (s.arch != "llama" && s.arch != "qwen2" && s.arch != "qwen3" && s.arch != "qwen3moe" && s.arch != "phi3" &&
      s.arch != "gemma2" && s.arch != "gemma3")
    return Status::InvalidArgument("unsupported architecture '" + s.arch + "'");
  if ((s.arch == "qwen3moe" && s.n_expert <= 0) || (s.n_expert > 0 && s.arch != "qwen3moe" && s.arch != "llama") ||
      (s.n_expert > 0 && (s.n_expert_used <= 0 || s.n_expert_used > s.n_expert || (s.arch == "qwen3moe" && s.n_ff_exp <= 0))))
    return Status::InvalidArgument("invalid shape '" + s.name + "': experts (qwen3moe needs n_expert, n_expert_used and n_ff_exp; llama may have them)");
  if (s.n_embd <= 0 || s.n_layer <= 0 || s.n_head <= 0 || s.n_head_kv <= 0 || s.n_ff <= 0 ||
      (s.head_dim <= 0 && s.n_embd % s.n_head != 0) || s.n_head % s.n_head_kv != 0 || s.head_dim < 0 || s.head_dim % 2 != 0)
    return Status::InvalidArgument("invalid shape '" + s.name + "'");
  const int64_t hd = s.head_dim > 0 ? s.head_dim : s.n_embd / s.n_head;
  if (s.rope_long.size() != s.rope_short.size() || (!s.rope_long.empty() && static_cast<int64_t>(s.rope_long.size()) * 2 != hd))
    return Status::InvalidArgument("invalid shape '" + s.name + "': long-RoPE factors need head_dim/2 values each");

  SynthReport rep;
  rep.n_vocab = s.n_vocab;
  gguf::GgufWriter w;
  const std::string p = s.arch + ".";
  w.set("general.architecture", Value::str(s.arch));
  w.set("general.name", Value::str("synthetic " + s.name));
  w.set(p + "context_length", Value::u32(s.n_ctx));
  w.set(p + "embedding_length", Value::u32(s.n_embd));
  w.set(p + "block_count", Value::u32(s.n_layer));
  w.set(p + "feed_forward_length", Value::u32(s.n_ff));
  w.set(p + "attention.head_count", Value::u32(s.n_head));
  w.set(p + "attention.head_count_kv", Value::u32(s.n_head_kv));
  if (s.n_expert > 0) {
    w.set(p + "expert_count", Value::u32(s.n_expert));
    w.set(p + "expert_used_count", Value::u32(s.n_expert_used));
    if (s.arch == "qwen3moe") w.set(p + "expert_feed_forward_length", Value::u32(s.n_ff_exp));
  }
  w.set(p + "rope.dimension_count", Value::u32(static_cast<uint32_t>(hd)));
  w.set(p + "rope.freq_base", Value::f32(s.rope_base));
  if (hd * s.n_head != s.n_embd || s.arch == "qwen3" || s.arch == "qwen3moe" || s.arch == "gemma3") {
    w.set(p + "attention.key_length", Value::u32(static_cast<uint32_t>(hd)));
    w.set(p + "attention.value_length", Value::u32(static_cast<uint32_t>(hd)));
  }
  if (!s.rope_long.empty()) {
    w.set(p + "rope.scaling.original_context_length", Value::u32(s.rope_orig_ctx));
    const double scale = static_cast<double>(s.n_ctx) / s.rope_orig_ctx;
    w.set(p + "rope.scaling.attn_factor",
          Value::f32(scale > 1.0 ? static_cast<float>(std::sqrt(1 + std::log(scale) / std::log(double(s.rope_orig_ctx)))) : 1.0f));
  }
  if (s.rope_base_swa > 0) w.set(p + "rope.freq_base_swa", Value::f32(s.rope_base_swa));
  if (s.rope_linear_factor > 0) {
    w.set(p + "rope.scaling.type", Value::str("linear"));
    w.set(p + "rope.scaling.factor", Value::f32(s.rope_linear_factor));
  }
  if (s.sliding_window >= 0) w.set(p + "attention.sliding_window", Value::u32(s.sliding_window));
  if (s.attn_softcap > 0) w.set(p + "attn_logit_softcapping", Value::f32(s.attn_softcap));
  if (s.final_softcap > 0) w.set(p + "final_logit_softcapping", Value::f32(s.final_softcap));
  w.set(p + "attention.layer_norm_rms_epsilon", Value::f32(s.rms_eps));
  w.set("general.file_type", Value::u32(plan.value().file_type));
  if (kernels::is_quantized(plan.value().base)) w.set("general.quantization_version", Value::u32(2));

  if (!opt.vocab_from.empty()) {
    auto vf = gguf::GgufFile::open(opt.vocab_from);
    if (!vf.ok()) return vf.status();
    for (const auto& [k, v] : vf.value()->metadata())
      if (k.rfind("tokenizer.", 0) == 0) w.set(k, v);
    const gguf::Array* toks = vf.value()->get_array("tokenizer.ggml.tokens");
    if (!toks) return Status::NotFound(opt.vocab_from + ": no tokenizer.ggml.tokens");
    rep.n_vocab = static_cast<int>(toks->items.size());
    rep.vocab_changed = rep.n_vocab != s.n_vocab;
  }
  if (rep.n_vocab <= 0) return Status::InvalidArgument("no vocabulary (shape has none and no --vocab-from)");

  const int64_t e = s.n_embd, q = hd * s.n_head, kv = hd * s.n_head_kv;
  // fill >= 0: that constant; fill < 0: random N(0, 0.02), or N(1, 0.1) with `around_one`
  // (the per-head Q/K norms: not all 1, so a swapped or misapplied norm shows); `values`:
  // those exact floats (RoPE factors).
  struct T { std::string name; std::vector<int64_t> dims; float fill; bool around_one = false; std::vector<float> values = {}; };
  std::vector<T> ts;
  ts.push_back({"token_embd.weight", {e, rep.n_vocab}, -1});
  ts.push_back({"output_norm.weight", {e}, 1.f});
  if (!s.tied_embeddings) ts.push_back({"output.weight", {e, rep.n_vocab}, -1});
  for (int l = 0; l < s.n_layer; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    ts.push_back({b + "attn_norm.weight", {e}, 1.f});
    if (s.arch == "phi3") {
      ts.push_back({b + "attn_qkv.weight", {e, q + 2 * kv}, -1});
    } else {
      ts.push_back({b + "attn_q.weight", {e, q}, -1});
      ts.push_back({b + "attn_k.weight", {e, kv}, -1});
      ts.push_back({b + "attn_v.weight", {e, kv}, -1});
    }
    if (s.arch == "qwen2") {
      ts.push_back({b + "attn_q.bias", {q}, -1});
      ts.push_back({b + "attn_k.bias", {kv}, -1});
      ts.push_back({b + "attn_v.bias", {kv}, -1});
    }
    if (s.arch == "qwen3" || s.arch == "qwen3moe" || s.arch == "gemma3") {
      ts.push_back({b + "attn_q_norm.weight", {hd}, -1, true});
      ts.push_back({b + "attn_k_norm.weight", {hd}, -1, true});
    }
    ts.push_back({b + "attn_output.weight", {q, e}, -1});
    // gemma's post-norms N(1, 0.1), so that a norm applied in the wrong place shows.
    const bool gemma = s.arch == "gemma2" || s.arch == "gemma3";
    if (gemma) ts.push_back({b + "post_attention_norm.weight", {e}, -1, true});
    ts.push_back({b + "ffn_norm.weight", {e}, 1.f});
    if (s.n_expert > 0) {  // router (F32, as the converter writes it), then the stacked experts
      const int64_t fe = s.arch == "qwen3moe" ? s.n_ff_exp : s.n_ff, x = s.n_expert;
      ts.push_back({b + "ffn_gate_inp.weight", {e, x}, -1});
      ts.push_back({b + "ffn_gate_exps.weight", {e, fe, x}, -1});
      ts.push_back({b + "ffn_up_exps.weight", {e, fe, x}, -1});
      ts.push_back({b + "ffn_down_exps.weight", {fe, e, x}, -1});
    } else if (s.arch == "phi3") {
      ts.push_back({b + "ffn_up.weight", {e, 2 * int64_t{s.n_ff}}, -1});  // gate rows, then up rows
    } else {
      ts.push_back({b + "ffn_gate.weight", {e, s.n_ff}, -1});
      ts.push_back({b + "ffn_up.weight", {e, s.n_ff}, -1});
    }
    if (s.n_expert == 0) ts.push_back({b + "ffn_down.weight", {s.n_ff, e}, -1});
    if (gemma) ts.push_back({b + "post_ffw_norm.weight", {e}, -1, true});
  }
  // Last, so that the other tensors' random streams (keyed by index) do not depend on them.
  if (s.llama3_factor > 0) ts.push_back({"rope_freqs.weight", {hd / 2}, 0.f, false, llama3_rope_freqs(s, static_cast<int>(hd))});
  if (!s.rope_long.empty()) {
    ts.push_back({"rope_factors_long.weight", {hd / 2}, 0.f, false, s.rope_long});
    ts.push_back({"rope_factors_short.weight", {hd / 2}, 0.f, false, s.rope_short});
  }

  for (size_t ti = 0; ti < ts.size(); ++ti) {
    const T& t = ts[ti];
    int64_t rows = 1;  // every row of every matrix of a 3-D stack (experts)
    for (size_t d = 1; d < t.dims.size(); ++d) rows *= t.dims[d];
    const int64_t cols = t.dims[0];
    const GgmlType to = quantized_tensor_type(plan.value(), t.name, t.dims, s.n_layer, !s.tied_embeddings,
                                                s.n_head_kv > 0 ? s.n_head / s.n_head_kv : 1, s.n_expert);
    const int64_t rb = gguf::row_bytes(to, cols);
    std::vector<uint8_t> data(static_cast<size_t>(rb * rows));
#pragma omp parallel
    {
      std::vector<float> buf(cols);
#pragma omp for schedule(static)
      for (int64_t r = 0; r < rows; ++r) {
        if (!t.values.empty()) {
          std::copy(t.values.begin(), t.values.end(), buf.begin());
        } else if (t.around_one) {
          normal_row(opt.seed, ti, r, 0.1f, buf.data(), cols);
          for (float& x : buf) x = fp16_to_fp32(fp32_to_fp16(1.0f + x));
        } else if (t.fill >= 0) {
          std::fill(buf.begin(), buf.end(), t.fill);
        } else {
          normal_row(opt.seed, ti, r, 0.02f, buf.data(), cols);
          // A real checkpoint's weights are f16/bf16: round through f16 first.
          for (float& x : buf) x = fp16_to_fp32(fp32_to_fp16(x));
        }
        if (to == GgmlType::F32)
          std::memcpy(data.data() + r * rb, buf.data(), cols * sizeof(float));
        else
          kernels::quantize(to, buf.data(), data.data() + r * rb, cols);
      }
    }
    if (t.dims.size() > 1) rep.weight_bytes += data.size();
    w.add_tensor(t.name, t.dims, to, data.data(), data.size());
  }
  Status st = w.write(out);
  if (!st.ok()) return st;
  auto f = gguf::GgufFile::open(out);
  if (f.ok()) rep.file_bytes = f.value()->file_size();
  return rep;
}

}  // namespace pdserve::model
