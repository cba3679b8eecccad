#include "model/quantize.h"

#include <vector>

#include "kernels/quants.h"

namespace pdserve::model {

using gguf::GgmlType;

Result<QuantizePlan> parse_quantize_type(const std::string& name) {
  // llama_ftype values (llama.h): F32 0, F16 1, Q4_0 2, Q8_0 7, Q2_K 10, Q3_K_S 11, Q3_K_M 12,
  // Q4_K_S 14, Q4_K_M 15, Q5_K_S 16, Q5_K_M 17, Q6_K 18, IQ4_NL 25, IQ4_XS 30, BF16 32.
  struct E { const char* n; GgmlType t; bool m; uint32_t ft; };
  static const E kPlans[] = {
      {"F32", GgmlType::F32, false, 0},   {"F16", GgmlType::F16, false, 1},   {"BF16", GgmlType::BF16, false, 32}, {"Q8_0", GgmlType::Q8_0, false, 7},
      {"Q4_0", GgmlType::Q4_0, false, 2}, {"Q4_K", GgmlType::Q4_K, false, 14}, {"Q5_K", GgmlType::Q5_K, false, 16},
      {"Q6_K", GgmlType::Q6_K, false, 18}, {"Q4_K_M", GgmlType::Q4_K, true, 15}, {"Q5_K_M", GgmlType::Q5_K, true, 17},
      {"Q2_K", GgmlType::Q2_K, true, 10}, {"Q3_K_S", GgmlType::Q3_K, false, 11}, {"Q3_K_M", GgmlType::Q3_K, true, 12},
      {"IQ4_NL", GgmlType::IQ4_NL, true, 25}, {"IQ4_XS", GgmlType::IQ4_XS, true, 30},
  };
  std::string up = name;
  for (char& c : up) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (const E& e : kPlans)
    if (up == e.n) return QuantizePlan{e.t, e.m, e.ft};
  return Status::InvalidArgument("unknown quantisation type '" + name + "' (expected F32, F16, BF16, Q8_0, Q4_0, Q2_K, Q3_K_S, Q3_K_M, Q4_K, Q5_K, Q6_K, Q4_K_M, Q5_K_M, IQ4_NL, IQ4_XS)");
}

namespace {

bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

int layer_of(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  return std::atoi(name.c_str() + 4);
}

bool contains(const std::string& s, const char* p) { return s.find(p) != std::string::npos; }

}  // namespace

GgmlType quantized_tensor_type(const QuantizePlan& plan, const std::string& name, const std::vector<int64_t>& dims,
                               int n_layer, bool has_output, int n_gqa, int n_expert) {
  // The MoE router stays F32, as llama-quantize (llama_model_quantize_impl: "do not quantize
  // expert gating tensors") and the HF converter keep it.
  if (dims.size() < 2 || !contains(name, "weight") || contains(name, "ffn_gate_inp.weight")) return GgmlType::F32;
  GgmlType t = plan.base;
  const bool is_output = name == "output.weight" || (!has_output && name == "token_embd.weight");
  const int l = layer_of(name);
  const bool attn_v = contains(name, "attn_v.weight"), ffn_down = contains(name, "ffn_down");
  if (is_output) {
    if (kernels::is_quantized(t) && t != GgmlType::Q8_0) t = GgmlType::Q6_K;
  } else if (plan.mix_m && l >= 0) {
    switch (plan.file_type) {
      case 10:  // Q2_K
        if (attn_v) t = n_gqa >= 4 ? GgmlType::Q4_K : GgmlType::Q3_K;
        else if (ffn_down || contains(name, "attn_output.weight")) t = GgmlType::Q3_K;
        break;
      case 12:  // Q3_K_M (ffn_down: not falcon, so Q4_K past the first n_layer / 16)
        if (attn_v) t = l < 2 ? GgmlType::Q5_K : GgmlType::Q4_K;
        else if (ffn_down) t = l < n_layer / 16 ? GgmlType::Q5_K : GgmlType::Q4_K;
        else if (contains(name, "attn_output.weight")) t = GgmlType::Q4_K;
        break;
      case 25: case 30:  // IQ4_NL, IQ4_XS
        if (attn_v && n_gqa >= 4) t = GgmlType::Q5_K;
        break;
      default:  // Q4_K_M, Q5_K_M
        if ((attn_v || ffn_down) && use_more_bits(l, n_layer)) t = GgmlType::Q6_K;
        break;
    }
  }
  if (n_expert == 8 && l >= 0 && kernels::is_quantized(plan.base)) {
    // llama_tensor_get_type: "for the 8-expert model, bumping this to Q8_0 trades just ~128MB".
    if (attn_v || contains(name, "attn_k.weight")) t = GgmlType::Q8_0;
    const uint32_t ft = plan.file_type;
    if (contains(name, "attn_output.weight") && (ft == 10 || ft == 11 || ft == 12 || ft == 14 || ft == 15 || ft == 25 || ft == 30))
      t = GgmlType::Q5_K;
  }
  if ((t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K) && dims[0] % 256 != 0)
    t = t == GgmlType::Q4_K ? GgmlType::Q5_0 : t == GgmlType::Q5_K ? GgmlType::Q5_1 : GgmlType::Q8_0;
  if ((t == GgmlType::Q2_K || t == GgmlType::Q3_K || t == GgmlType::IQ4_XS) && dims[0] % 256 != 0) t = GgmlType::IQ4_NL;
  if (dims[0] % 32 != 0 && kernels::is_quantized(t)) t = GgmlType::F16;
  return t;
}

Status quantize_file(const std::string& in, const std::string& out, const std::string& type) {
  auto plan = parse_quantize_type(type);
  if (!plan.ok()) return plan.status();
  auto f = gguf::GgufFile::open(in);
  if (!f.ok()) return f.status();
  const gguf::GgufFile& src = *f.value();
  auto arch = src.get_string("general.architecture").value_or("llama");
  const int n_layer = static_cast<int>(src.get_int(arch + ".block_count").value_or(0));
  const bool has_output = src.find_tensor("output.weight") != nullptr;
  const int64_t n_head = src.get_int(arch + ".attention.head_count").value_or(1);
  const int64_t n_head_kv = src.get_int(arch + ".attention.head_count_kv").value_or(n_head);
  const int n_gqa = n_head_kv > 0 ? static_cast<int>(n_head / n_head_kv) : 1;
  const int n_expert = static_cast<int>(src.get_int(arch + ".expert_count").value_or(0));

  gguf::GgufWriter w;
  for (const auto& [k, v] : src.metadata()) w.set(k, v);
  w.set("general.file_type", gguf::Value::u32(plan.value().file_type));
  if (kernels::is_quantized(plan.value().base)) w.set("general.quantization_version", gguf::Value::u32(2));

  for (const gguf::TensorInfo& t : src.tensors()) {
    GgmlType to = quantized_tensor_type(plan.value(), t.name, t.dims, n_layer, has_output, n_gqa, n_expert);
    if (t.type != GgmlType::F32 && t.dims.size() < 2) to = t.type;
    if (t.name.find("ffn_gate_inp.weight") != std::string::npos) to = t.type;  // the router: kept as it is
    if (to == t.type) {
      w.add_tensor(t.name, t.dims, t.type, t.data, t.nbytes);
      continue;
    }
    if (!kernels::can_dequantize(t.type))
      return Status::InvalidArgument(in + ": tensor '" + t.name + "' has type " + gguf::type_name(t.type) +
                                     ", which pdserve cannot read, so it cannot be converted to " +
                                     gguf::type_name(to) + ".");
    const int64_t cols = t.dims[0], rows = t.rows();
    const int64_t in_rb = gguf::row_bytes(t.type, cols), out_rb = gguf::row_bytes(to, cols);
    std::vector<uint8_t> data(static_cast<size_t>(out_rb * rows));
#pragma omp parallel
    {
      std::vector<float> buf(cols);
#pragma omp for schedule(static)
      for (int64_t r = 0; r < rows; ++r) {
        kernels::dequantize(t.type, t.data + r * in_rb, buf.data(), cols);
        kernels::quantize(to, buf.data(), data.data() + r * out_rb, cols);
      }
    }
    w.add_tensor(t.name, t.dims, to, data.data(), data.size());
  }
  return w.write(out);
}

}  // namespace pdserve::model
