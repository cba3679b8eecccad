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

std::vector<std::string> builtin_shape_names() { return {"tinyllama-1.1b", "llama-3.2-1b", "qwen2.5-0.5b"}; }

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
  if (s.arch != "llama" && s.arch != "qwen2") return Status::InvalidArgument("unsupported architecture '" + s.arch + "'");
  if (s.n_embd <= 0 || s.n_layer <= 0 || s.n_head <= 0 || s.n_head_kv <= 0 || s.n_ff <= 0 || s.n_embd % s.n_head != 0 ||
      s.n_head % s.n_head_kv != 0)
    return Status::InvalidArgument("invalid shape '" + s.name + "'");

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
  w.set(p + "rope.dimension_count", Value::u32(s.n_embd / s.n_head));
  w.set(p + "rope.freq_base", Value::f32(s.rope_base));
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

  const int64_t e = s.n_embd, hd = s.n_embd / s.n_head, q = hd * s.n_head, kv = hd * s.n_head_kv;
  struct T { std::string name; std::vector<int64_t> dims; float fill; };  // fill < 0: random
  std::vector<T> ts;
  ts.push_back({"token_embd.weight", {e, rep.n_vocab}, -1});
  ts.push_back({"output_norm.weight", {e}, 1.f});
  if (!s.tied_embeddings) ts.push_back({"output.weight", {e, rep.n_vocab}, -1});
  for (int l = 0; l < s.n_layer; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    ts.push_back({b + "attn_norm.weight", {e}, 1.f});
    ts.push_back({b + "attn_q.weight", {e, q}, -1});
    ts.push_back({b + "attn_k.weight", {e, kv}, -1});
    ts.push_back({b + "attn_v.weight", {e, kv}, -1});
    if (s.arch == "qwen2") {
      ts.push_back({b + "attn_q.bias", {q}, -1});
      ts.push_back({b + "attn_k.bias", {kv}, -1});
      ts.push_back({b + "attn_v.bias", {kv}, -1});
    }
    ts.push_back({b + "attn_output.weight", {q, e}, -1});
    ts.push_back({b + "ffn_norm.weight", {e}, 1.f});
    ts.push_back({b + "ffn_gate.weight", {e, s.n_ff}, -1});
    ts.push_back({b + "ffn_up.weight", {e, s.n_ff}, -1});
    ts.push_back({b + "ffn_down.weight", {s.n_ff, e}, -1});
  }

  for (size_t ti = 0; ti < ts.size(); ++ti) {
    const T& t = ts[ti];
    const int64_t cols = t.dims[0], rows = t.dims.size() > 1 ? t.dims[1] : 1;
    const GgmlType to = quantized_tensor_type(plan.value(), t.name, t.dims, s.n_layer, !s.tied_embeddings,
                                                s.n_head_kv > 0 ? s.n_head / s.n_head_kv : 1);
    const int64_t rb = gguf::row_bytes(to, cols);
    std::vector<uint8_t> data(static_cast<size_t>(rb * rows));
#pragma omp parallel
    {
      std::vector<float> buf(cols);
#pragma omp for schedule(static)
      for (int64_t r = 0; r < rows; ++r) {
        if (t.fill >= 0) {
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
