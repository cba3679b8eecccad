// Type dispatch of the quantisation API (quants.h).
#include "kernels/quants.h"

#include <cstring>

#include "base/fp16.h"
#include "kernels/matmul.h"  // kGemmTiledBatch
#include "kernels/quant_types.h"

namespace pdserve::kernels {

using gguf::GgmlType;

bool is_quantized(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1: case GgmlType::Q8_0:
    case GgmlType::Q4_K: case GgmlType::Q5_K: case GgmlType::Q6_K:
    case GgmlType::Q2_K: case GgmlType::Q3_K: case GgmlType::IQ4_NL: case GgmlType::IQ4_XS: return true;
    default: return false;
  }
}

// Q2_K, Q3_K, IQ4_XS (quant_lowbit.cc): Q8_K activations, 16-value sub-block scales.
static bool is_lowbit_k(GgmlType t) { return t == GgmlType::Q2_K || t == GgmlType::Q3_K || t == GgmlType::IQ4_XS; }
static bool is_kquant(GgmlType t) {
  return t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K || is_lowbit_k(t);
}

GgmlType vec_dot_type(GgmlType t) {
  if (is_kquant(t)) return GgmlType::Q8_K;
  if (is_quantized(t)) return GgmlType::Q8_0;
  return GgmlType::F32;
}

void dequantize(GgmlType t, const void* src, float* dst, int64_t n) {
  switch (t) {
    case GgmlType::F32: std::memcpy(dst, src, n * sizeof(float)); break;
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(static_cast<const uint16_t*>(src)[i]);
      break;
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(static_cast<const uint16_t*>(src)[i]);
      break;
    case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1: case GgmlType::Q8_0:
      dequantize_legacy(t, src, dst, n);
      break;
    case GgmlType::Q4_K: case GgmlType::Q5_K: case GgmlType::Q6_K: case GgmlType::Q8_K:
      dequantize_kquant(t, src, dst, n);
      break;
    case GgmlType::Q2_K: case GgmlType::Q3_K: case GgmlType::IQ4_NL: case GgmlType::IQ4_XS:
      dequantize_lowbit(t, src, dst, n);
      break;
    default: std::memset(dst, 0, n * sizeof(float)); break;
  }
}

bool can_dequantize(GgmlType t) {
  switch (t) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16:
    case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1: case GgmlType::Q8_0:
    case GgmlType::Q4_K: case GgmlType::Q5_K: case GgmlType::Q6_K: case GgmlType::Q8_K:
    case GgmlType::Q2_K: case GgmlType::Q3_K: case GgmlType::IQ4_NL: case GgmlType::IQ4_XS:
      return true;
    default: return false;
  }
}

bool can_quantize(GgmlType t) {
  return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16 || t == GgmlType::Q8_K || is_quantized(t);
}

void quantize(GgmlType t, const float* src, void* dst, int64_t n) {
  switch (t) {
    case GgmlType::F32: std::memcpy(dst, src, n * sizeof(float)); break;
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = fp32_to_fp16(src[i]);
      break;
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = fp32_to_bf16(src[i]);
      break;
    case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1: case GgmlType::Q8_0:
      quantize_legacy(t, src, dst, n);
      break;
    case GgmlType::Q2_K: case GgmlType::Q3_K: case GgmlType::IQ4_NL: case GgmlType::IQ4_XS:
      quantize_lowbit(t, src, dst, n);
      break;
    default: quantize_kquant(t, src, dst, n); break;
  }
}

int64_t act_row_bytes(GgmlType wt, int64_t n) {
  if (is_kquant(wt)) return n / QK_K * static_cast<int64_t>(sizeof(ActQ8K));
  return (n / 32 + 1) / 2 * static_cast<int64_t>(sizeof(ActPairQ8));
}

void quantize_act(GgmlType wt, const float* x, void* dst, int64_t n) {
  if (is_kquant(wt)) quantize_act_q8_k(x, dst, n);
  else quantize_act_q8_0(x, dst, n);
}

QOrder quant_order(GgmlType t, int64_t rows, uint8_t flag) {
  if ((t == GgmlType::Q4_0 || t == GgmlType::Q4_K || t == GgmlType::IQ4_NL) && rows % 8 == 0)
    return (flag & 3) == 1 ? QOrder::kRepackGemm : QOrder::kRepackGemv;
  // Q6_K stays in the vec_dot order: the Q4_K_M reference (llama.cpp 3f545bec, before
  // the tiled matmul) needs it, and the Q5_K_M reference (build 11669, which would tile
  // Q6_K too) matches either way. vec_dot_scalar(Q6_K, kTiled) is that build's order.
  if ((t == GgmlType::Q4_K || t == GgmlType::Q5_K || is_lowbit_k(t)) && (flag & kGemmTiledBatch)) return QOrder::kTiled;
  return QOrder::kVecDot;
}

float vec_dot_scalar(GgmlType wt, const void* w, const void* act, int64_t n, QOrder order) {
  if (wt == GgmlType::IQ4_NL) return order == QOrder::kVecDot ? vec_dot_iq4_nl_scalar(w, act, n) : vec_dot_iq4_nl_repack_scalar(w, act, n);
  if (is_lowbit_k(wt))
    return order == QOrder::kTiled ? vec_dot_lowbit_tiled_scalar(wt, w, act, n) : vec_dot_lowbit_scalar(wt, w, act, n);
  if (order != QOrder::kVecDot && wt == GgmlType::Q4_0) return vec_dot_q4_0_repack_scalar(w, act, n);
  if (order == QOrder::kTiled && is_kquant(wt)) return vec_dot_kquant_tiled_scalar(wt, w, act, n);
  if (order != QOrder::kVecDot && wt == GgmlType::Q4_K) return vec_dot_q4_K_repack_scalar(w, act, n, order == QOrder::kRepackGemm);
  return is_kquant(wt) ? vec_dot_kquant_scalar(wt, w, act, n) : vec_dot_legacy_scalar(wt, w, act, n);
}

}  // namespace pdserve::kernels
