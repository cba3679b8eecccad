// Re-quantising a GGUF model file (the library behind `pdserve quantize`).
#pragma once

#include <string>

#include "base/status.h"
#include "gguf/gguf.h"

namespace pdserve::model {

/// Output type names: "F32" (dequantise), "F16", "BF16", "Q8_0", "Q4_0", "Q4_K", "Q5_K", "Q6_K" (every 2-D
/// weight in that type, except the output head — see below) and the mixes "Q4_K_M",
/// "Q5_K_M". Per-tensor choice follows llama.cpp's llama_tensor_get_type for these file
/// types: 1-D tensors (norms, biases) stay F32; output.weight (token_embd when tied) is
/// Q6_K unless the base type is Q8_0 / F32 / F16 / BF16 (kept); in the _M mixes attn_v and
/// ffn_down of the layers use_more_bits(i, n) picks (i < n/8, i >= 7n/8, (i - n/8) % 3
/// == 2) are Q6_K; a K-quant tensor whose row is not a multiple of 256 falls back as in
/// llama.cpp: Q4_K → Q5_0, Q5_K → Q5_1, Q6_K → Q8_0. Quantisers are ggml's reference ones
/// (no importance matrix), so the bytes equal llama-quantize's.
/// Also "Q2_K", "Q3_K_S", "Q3_K_M", "IQ4_NL", "IQ4_XS" with llama_tensor_get_type's
/// per-tensor types: Q2_K — attn_v Q4_K (n_gqa >= 4, else Q3_K), ffn_down and attn_output
/// Q3_K; Q3_K_S — all Q3_K; Q3_K_M — attn_v Q5_K in layers 0-1 then Q4_K, ffn_down Q5_K
/// for layers < n_layer/16 then Q4_K, attn_output Q4_K; IQ4_NL / IQ4_XS — attn_v Q5_K when
/// n_gqa >= 4; Q2_K / Q3_K / IQ4_XS rows not a multiple of 256 fall back to IQ4_NL.
struct QuantizePlan {
  gguf::GgmlType base = gguf::GgmlType::Q8_0;
  bool mix_m = false;   // per-tensor mix (the _M mixes, Q2_K, IQ4_NL, IQ4_XS: see above)
  uint32_t file_type = 7;  // general.file_type (llama_ftype)
};

/// Parses a type name; error lists the accepted names.
Result<QuantizePlan> parse_quantize_type(const std::string& name);

/// The type tensor `name` (dims in ggml order) gets under `plan` in a model of `n_layer`
/// layers with n_gqa = attention heads per KV head and `n_expert` experts ({arch}.expert_count,
/// 0 = dense). MoE routers (ffn_gate_inp) stay F32; with exactly 8 experts (llama-quantize's
/// Mixtral rule, llama_tensor_get_type) every quantised type puts attn_k and attn_v in Q8_0,
/// and Q2_K, Q3_K_S, Q3_K_M, Q4_K(_S), Q4_K_M, IQ4_NL and IQ4_XS put attn_output in Q5_K.
gguf::GgmlType quantized_tensor_type(const QuantizePlan& plan, const std::string& name, const std::vector<int64_t>& dims,
                                     int n_layer, bool has_output, int n_gqa = 1, int n_expert = 0);

/// Reads `in` (F32/F16/BF16 or already quantised tensors, dequantised first), writes
/// `out` with the same metadata (general.file_type and general.quantization_version
/// updated) and tensors in the same order. Multi-threaded over rows (OpenMP).
Status quantize_file(const std::string& in, const std::string& out, const std::string& type);

}  // namespace pdserve::model
