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
struct QuantizePlan {
  gguf::GgmlType base = gguf::GgmlType::Q8_0;
  bool mix_m = false;   // the _M mixes
  uint32_t file_type = 7;  // general.file_type (llama_ftype)
};

/// Parses a type name; error lists the accepted names.
Result<QuantizePlan> parse_quantize_type(const std::string& name);

/// The type tensor `name` (dims in ggml order) gets under `plan` in a model of `n_layer` layers.
gguf::GgmlType quantized_tensor_type(const QuantizePlan& plan, const std::string& name, const std::vector<int64_t>& dims,
                                     int n_layer, bool has_output);

/// Reads `in` (F32/F16/BF16 or already quantised tensors, dequantised first), writes
/// `out` with the same metadata (general.file_type and general.quantization_version
/// updated) and tensors in the same order. Multi-threaded over rows (OpenMP).
Status quantize_file(const std::string& in, const std::string& out, const std::string& type);

}  // namespace pdserve::model
