// The 32-value block types Q4_0, Q4_1, Q5_0, Q5_1, Q8_0: ggml's reference quantisers and
// dequantisers (ggml/src/ggml-quants.c: quantize_row_q4_0_ref … dequantize_row_q8_0),
// the Q8_0 activation quantiser of ggml's x86 backend (ggml-cpu/arch/x86/quants.c
// quantize_row_q8_0), and the scalar reference dot (contract in quants.h).
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "base/fp16.h"
#include "kernels/cpu_features.h"
#include "kernels/quant_types.h"
#include "kernels/quants.h"

namespace pdserve::kernels {

using gguf::GgmlType;

namespace {

void quantize_q4_0(const float* x, BlockQ4_0* y, int64_t k) {
  const int qk = QK4_0;
  for (int64_t i = 0; i < k / qk; i++) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < qk; j++) {
      const float v = x[i * qk + j];
      if (amax < std::fabs(v)) { amax = std::fabs(v); max = v; }
    }
    const float d = max / -8;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    for (int j = 0; j < qk / 2; ++j) {
      const float x0 = x[i * qk + 0 + j] * id;
      const float x1 = x[i * qk + qk / 2 + j] * id;
      const uint8_t xi0 = std::min<int>(15, static_cast<int8_t>(x0 + 8.5f));
      const uint8_t xi1 = std::min<int>(15, static_cast<int8_t>(x1 + 8.5f));
      y[i].qs[j] = xi0 | (xi1 << 4);
    }
  }
}

void quantize_q4_1(const float* x, BlockQ4_1* y, int64_t k) {
  const int qk = QK4_1;
  for (int64_t i = 0; i < k / qk; i++) {
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < qk; j++) {
      const float v = x[i * qk + j];
      if (v < min) min = v;
      if (v > max) max = v;
    }
    const float d = (max - min) / ((1 << 4) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    y[i].m = fp32_to_fp16(min);
    for (int j = 0; j < qk / 2; ++j) {
      const float x0 = (x[i * qk + 0 + j] - min) * id;
      const float x1 = (x[i * qk + qk / 2 + j] - min) * id;
      const uint8_t xi0 = std::min<int>(15, static_cast<int8_t>(x0 + 0.5f));
      const uint8_t xi1 = std::min<int>(15, static_cast<int8_t>(x1 + 0.5f));
      y[i].qs[j] = xi0 | (xi1 << 4);
    }
  }
}

void quantize_q5_0(const float* x, BlockQ5_0* y, int64_t k) {
  const int qk = QK5_0;
  for (int64_t i = 0; i < k / qk; i++) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < qk; j++) {
      const float v = x[i * qk + j];
      if (amax < std::fabs(v)) { amax = std::fabs(v); max = v; }
    }
    const float d = max / -16;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    uint32_t qh = 0;
    for (int j = 0; j < qk / 2; ++j) {
      const float x0 = x[i * qk + 0 + j] * id;
      const float x1 = x[i * qk + qk / 2 + j] * id;
      const uint8_t xi0 = std::min<int>(31, static_cast<int8_t>(x0 + 16.5f));
      const uint8_t xi1 = std::min<int>(31, static_cast<int8_t>(x1 + 16.5f));
      y[i].qs[j] = (xi0 & 0x0F) | ((xi1 & 0x0F) << 4);
      qh |= ((xi0 & 0x10u) >> 4) << (j + 0);
      qh |= ((xi1 & 0x10u) >> 4) << (j + qk / 2);
    }
    std::memcpy(y[i].qh, &qh, sizeof(qh));
  }
}

void quantize_q5_1(const float* x, BlockQ5_1* y, int64_t k) {
  const int qk = QK5_1;
  for (int64_t i = 0; i < k / qk; i++) {
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < qk; j++) {
      const float v = x[i * qk + j];
      if (v < min) min = v;
      if (v > max) max = v;
    }
    const float d = (max - min) / ((1 << 5) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    y[i].m = fp32_to_fp16(min);
    uint32_t qh = 0;
    for (int j = 0; j < qk / 2; ++j) {
      const float x0 = (x[i * qk + 0 + j] - min) * id;
      const float x1 = (x[i * qk + qk / 2 + j] - min) * id;
      const uint8_t xi0 = static_cast<uint8_t>(x0 + 0.5f);
      const uint8_t xi1 = static_cast<uint8_t>(x1 + 0.5f);
      y[i].qs[j] = (xi0 & 0x0F) | ((xi1 & 0x0F) << 4);
      qh |= ((xi0 & 0x10u) >> 4) << (j + 0);
      qh |= ((xi1 & 0x10u) >> 4) << (j + qk / 2);
    }
    std::memcpy(y[i].qh, &qh, sizeof(qh));
  }
}

void quantize_q8_0(const float* x, BlockQ8_0* y, int64_t k) {
  for (int64_t i = 0; i < k / QK8_0; i++) {
    float amax = 0.0f;
    for (int j = 0; j < QK8_0; j++) amax = std::max(amax, std::fabs(x[i * QK8_0 + j]));
    const float d = amax / ((1 << 7) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    for (int j = 0; j < QK8_0; ++j) y[i].qs[j] = static_cast<int8_t>(std::round(x[i * QK8_0 + j] * id));
  }
}

}  // namespace

void quantize_legacy(GgmlType t, const float* src, void* dst, int64_t n) {
  switch (t) {
    case GgmlType::Q4_0: quantize_q4_0(src, static_cast<BlockQ4_0*>(dst), n); break;
    case GgmlType::Q4_1: quantize_q4_1(src, static_cast<BlockQ4_1*>(dst), n); break;
    case GgmlType::Q5_0: quantize_q5_0(src, static_cast<BlockQ5_0*>(dst), n); break;
    case GgmlType::Q5_1: quantize_q5_1(src, static_cast<BlockQ5_1*>(dst), n); break;
    case GgmlType::Q8_0: quantize_q8_0(src, static_cast<BlockQ8_0*>(dst), n); break;
    default: break;
  }
}

/// The 32 weights of block `b` as signed bytes (q - offset; Q4_1's and Q5_1's q as is),
/// plus its scale d and (Q4_1, Q5_1) min m. Shared by dequantisation and the scalar dot.
static void unpack_block(GgmlType t, const void* row, int64_t b, int8_t* w, float* d, float* m) {
  *m = 0.f;
  switch (t) {
    case GgmlType::Q4_0: {
      const BlockQ4_0& x = static_cast<const BlockQ4_0*>(row)[b];
      *d = fp16_to_fp32(x.d);
      for (int j = 0; j < 16; ++j) { w[j] = (x.qs[j] & 0xF) - 8; w[j + 16] = (x.qs[j] >> 4) - 8; }
      break;
    }
    case GgmlType::Q4_1: {
      const BlockQ4_1& x = static_cast<const BlockQ4_1*>(row)[b];
      *d = fp16_to_fp32(x.d);
      *m = fp16_to_fp32(x.m);
      for (int j = 0; j < 16; ++j) { w[j] = x.qs[j] & 0xF; w[j + 16] = x.qs[j] >> 4; }
      break;
    }
    case GgmlType::Q5_0: {
      const BlockQ5_0& x = static_cast<const BlockQ5_0*>(row)[b];
      *d = fp16_to_fp32(x.d);
      uint32_t qh;
      std::memcpy(&qh, x.qh, 4);
      for (int j = 0; j < 16; ++j) {
        w[j] = ((x.qs[j] & 0xF) | (((qh >> j) & 1) << 4)) - 16;
        w[j + 16] = ((x.qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16;
      }
      break;
    }
    case GgmlType::Q5_1: {
      const BlockQ5_1& x = static_cast<const BlockQ5_1*>(row)[b];
      *d = fp16_to_fp32(x.d);
      *m = fp16_to_fp32(x.m);
      uint32_t qh;
      std::memcpy(&qh, x.qh, 4);
      for (int j = 0; j < 16; ++j) {
        w[j] = (x.qs[j] & 0xF) | (((qh >> j) & 1) << 4);
        w[j + 16] = (x.qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
      }
      break;
    }
    case GgmlType::Q8_0: {
      const BlockQ8_0& x = static_cast<const BlockQ8_0*>(row)[b];
      *d = fp16_to_fp32(x.d);
      std::memcpy(w, x.qs, 32);
      break;
    }
    default: std::memset(w, 0, 32); *d = 0.f; break;
  }
}

void dequantize_legacy(GgmlType t, const void* src, float* dst, int64_t n) {
  int8_t w[32];
  float d, m;
  for (int64_t b = 0; b < n / 32; ++b) {
    unpack_block(t, src, b, w, &d, &m);
    // ggml: x*d (+ m for Q4_1 / Q5_1), one rounding each.
    const bool has_min = t == GgmlType::Q4_1 || t == GgmlType::Q5_1;
    for (int j = 0; j < 32; ++j) dst[b * 32 + j] = has_min ? w[j] * d + m : w[j] * d;
  }
}

float quantize_block_q8_0_x86(const float* x, int8_t* q) {
  float amax = 0.f;
  for (int j = 0; j < QK8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float id = amax != 0.f ? 127.f / amax : 0.f;
  for (int j = 0; j < QK8_0; ++j) q[j] = static_cast<int8_t>(std::nearbyint(x[j] * id));  // _MM_ROUND_NEAREST
  return amax / 127.f;
}

void quantize_act_q8_0(const float* x, void* dst, int64_t n) {
  if (best_isa() == Isa::kAvx512Vnni) avx512::quantize_act_q8_0(x, dst, n);
  else quantize_act_q8_0_scalar(x, dst, n);
}

void quantize_act_q8_0_scalar(const float* x, void* dst, int64_t n) {
  const int64_t nb = n / QK8_0;
  auto* pairs = static_cast<ActPairQ8*>(dst);
  for (int64_t b = 0; b < (nb + 1) / 2 * 2; ++b) {
    ActPairQ8& p = pairs[b / 2];
    const int h = static_cast<int>(b % 2);
    if (b >= nb) {  // padding block of an odd count
      std::memset(p.qu + 32 * h, 128, 32);
      for (int j = 0; j < 8; ++j) { p.d[8 * h + j] = 0.f; p.s4[8 * h + j] = 0; }
      continue;
    }
    int8_t q[QK8_0];
    const float dh = fp16_to_fp32(fp32_to_fp16(quantize_block_q8_0_x86(x + b * QK8_0, q)));
    for (int g = 0; g < 8; ++g) {
      p.d[8 * h + g] = dh;
      p.s4[8 * h + g] = q[4 * g] + q[4 * g + 1] + q[4 * g + 2] + q[4 * g + 3];
    }
    for (int j = 0; j < QK8_0; ++j) p.qu[32 * h + j] = static_cast<uint8_t>(q[j] + 128);
  }
}

float vec_dot_legacy_scalar(GgmlType t, const void* w, const void* act, int64_t n) {
  const auto* pairs = static_cast<const ActPairQ8*>(act);
  float acc[8] = {};
  int8_t wq[32];
  float dw, mw;
  for (int64_t b = 0; b < n / 32; ++b) {
    unpack_block(t, w, b, wq, &dw, &mw);
    const ActPairQ8& p = pairs[b / 2];
    const int h = static_cast<int>(b % 2);
    const float d = dw * p.d[8 * h];
    const float m = mw * p.d[8 * h];
    for (int g = 0; g < 8; ++g) {
      int32_t s = 0;
      for (int i = 4 * g; i < 4 * g + 4; ++i) s += int32_t{wq[i]} * (int32_t{p.qu[32 * h + i]} - 128);
      float& a = acc[g];
      a = std::fma(d, static_cast<float>(s), a);
      if (t == GgmlType::Q4_1 || t == GgmlType::Q5_1) a = std::fma(m, static_cast<float>(p.s4[8 * h + g]), a);
    }
  }
  return hsum_float_8(acc);
}

float vec_dot_q4_0_repack_scalar(const void* w, const void* act, int64_t n) {
  const auto* pairs = static_cast<const ActPairQ8*>(act);
  float acc = 0.f;
  int8_t wq[32];
  float dw, mw;
  for (int64_t b = 0; b < n / 32; ++b) {
    unpack_block(GgmlType::Q4_0, w, b, wq, &dw, &mw);
    const ActPairQ8& p = pairs[b / 2];
    const int h = static_cast<int>(b % 2);
    int32_t s = 0;
    // Groups of 4 as the legacy dot (GCC 12 -O2 -march=native miscompiles the plain
    // 32-long u8·s8 loop with the -128 offset into VPDPBUSD).
    for (int g = 0; g < 8; ++g) {
      int32_t sg = 0;
      for (int i = 4 * g; i < 4 * g + 4; ++i) sg += int32_t{wq[i]} * (int32_t{p.qu[32 * h + i]} - 128);
      s += sg;
    }
    acc = std::fma(static_cast<float>(s), dw * p.d[8 * h], acc);
  }
  return acc;
}

}  // namespace pdserve::kernels
