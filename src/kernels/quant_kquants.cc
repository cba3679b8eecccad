// The K-quants Q4_K, Q5_K, Q6_K (256-value super-blocks) and their activation type Q8_K:
// ggml's reference quantisers and dequantisers (ggml/src/ggml-quants.c:
// quantize_row_q4_K_ref, make_qkx2_quants, make_qx_quants, quantize_row_q6_K_ref,
// quantize_row_q8_K_ref, dequantize_row_q*_K) and the scalar reference dot (quants.h), whose
// order is that of ggml's AVX2 ggml_vec_dot_q{4,5,6}_K_q8_K (ggml-cpu/arch/x86/quants.c):
// maddubs/madd lanes of 4 values, 8 int32 lanes per super-block, one 8-lane fma accumulator.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/fp16.h"
#include "kernels/cpu_features.h"
#include "kernels/quant_ref.h"
#include "kernels/quant_types.h"
#include "kernels/quants.h"

namespace pdserve::kernels {

using gguf::GgmlType;

namespace {

constexpr float GROUP_MAX_EPS = 1e-15f;

float make_qx_quants(int n, int nmax, const float* x, int8_t* L, int rmse_type) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    float ax = std::fabs(x[i]);
    if (ax > amax) { amax = ax; max = x[i]; }
  }
  if (amax < GROUP_MAX_EPS) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  float iscale = -nmax / max;
  if (rmse_type == 0) {
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * x[i]);
      L[i] = nmax + std::max(-nmax, std::min(nmax - 1, l));
    }
    return 1 / iscale;
  }
  auto weight = [&](int i) { return rmse_type == 1 ? x[i] * x[i] : rmse_type == 2 ? 1 : rmse_type == 3 ? std::fabs(x[i]) : std::sqrt(std::fabs(x[i])); };
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearest_int(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = l + nmax;
    float w = weight(i);
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  float scale = suml2 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(nmax + 0.1f * is) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * x[i]);
      l = std::max(-nmax, std::min(nmax - 1, l));
      float w = weight(i);
      sumlx += w * x[i] * l;
      suml2 += w * l * l;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale * x[i]);
        L[i] = nmax + std::max(-nmax, std::min(nmax - 1, l));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

}  // namespace

float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min, uint8_t* Laux,
                       float rmin, float rdelta, int nstep, bool use_mad) {
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -min;
    return 0.f;
  }
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearest_int(iscale * (x[i] - min));
    L[i] = std::max(0, std::min(nmax, l));
    float diff = scale * L[i] + min - x[i];
    diff = use_mad ? std::fabs(diff) : diff * diff;
    best_error += weights[i] * diff;
  }
  if (nstep < 1) {
    *the_min = -min;
    return scale;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * is + nmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * (x[i] - min));
      l = std::max(0, std::min(nmax, l));
      Laux[i] = l;
      float w = weights[i];
      sum_l += w * l;
      sum_l2 += w * l * l;
      sum_xl += w * l * x[i];
    }
    float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * Laux[i] + this_min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        cur_error += weights[i] * diff;
      }
      if (cur_error < best_error) {
        for (int i = 0; i < n; ++i) L[i] = Laux[i];
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

namespace {

// Q4_K and Q5_K share everything but the bit width (nmax 15 / 31, rmin, nstep).
template <int kBits>
void quantize_q45_k(const float* x, void* vy, int64_t k) {
  constexpr int nmax = (1 << kBits) - 1;
  const int64_t nb = k / QK_K;
  uint8_t L[QK_K], Laux[32];
  float weights[32], mins[QK_K / 32], scales[QK_K / 32];
  for (int64_t i = 0; i < nb; i++) {
    uint16_t* dd;
    uint16_t* dmin;
    uint8_t* sc;
    if constexpr (kBits == 4) {
      auto& y = static_cast<BlockQ4_K*>(vy)[i];
      dd = &y.d; dmin = &y.dmin; sc = y.scales;
    } else {
      auto& y = static_cast<BlockQ5_K*>(vy)[i];
      dd = &y.d; dmin = &y.dmin; sc = y.scales;
    }
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < QK_K / 32; ++j) {
      float sum_x2 = 0;
      for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
      float av_x = std::sqrt(sum_x2 / 32);
      for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
      scales[j] = kBits == 4 ? make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, -1.f, 0.1f, 20, false)
                             : make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, -0.5f, 0.1f, 15, false);
      if (scales[j] > max_scale) max_scale = scales[j];
      if (mins[j] > max_min) max_min = mins[j];
    }
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < QK_K / 32; ++j) {
      uint8_t ls = nearest_int(inv_scale * scales[j]);
      uint8_t lm = nearest_int(inv_min * mins[j]);
      ls = std::min<uint8_t>(63, ls);
      lm = std::min<uint8_t>(63, lm);
      if (j < 4) {
        sc[j] = ls;
        sc[j + 4] = lm;
      } else {
        sc[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4);
        sc[j - 4] |= ((ls >> 4) << 6);
        sc[j - 0] |= ((lm >> 4) << 6);
      }
    }
    *dd = fp32_to_fp16(max_scale / 63.f);
    *dmin = fp32_to_fp16(max_min / 63.f);
    uint8_t s, m;
    for (int j = 0; j < QK_K / 32; ++j) {
      get_scale_min_k4(j, sc, &s, &m);
      const float d = fp16_to_fp32(*dd) * s;
      if (!d) continue;
      const float dm = fp16_to_fp32(*dmin) * m;
      for (int ii = 0; ii < 32; ++ii) {
        int l = nearest_int((x[32 * j + ii] + dm) / d);
        L[32 * j + ii] = std::max(0, std::min(nmax, l));
      }
    }
    if constexpr (kBits == 4) {
      uint8_t* q = static_cast<BlockQ4_K*>(vy)[i].qs;
      for (int j = 0; j < QK_K; j += 64) {
        for (int l = 0; l < 32; ++l) q[l] = L[j + l] | (L[j + l + 32] << 4);
        q += 32;
      }
    } else {
      uint8_t* qh = static_cast<BlockQ5_K*>(vy)[i].qh;
      uint8_t* ql = static_cast<BlockQ5_K*>(vy)[i].qs;
      std::memset(qh, 0, QK_K / 8);
      uint8_t m1 = 1, m2 = 2;
      for (int n = 0; n < QK_K; n += 64) {
        for (int j = 0; j < 32; ++j) {
          int l1 = L[n + j];
          if (l1 > 15) { l1 -= 16; qh[j] |= m1; }
          int l2 = L[n + j + 32];
          if (l2 > 15) { l2 -= 16; qh[j] |= m2; }
          ql[j] = l1 | (l2 << 4);
        }
        m1 <<= 2;
        m2 <<= 2;
        ql += 32;
      }
    }
    x += QK_K;
  }
}

void quantize_q6_k(const float* x, BlockQ6_K* y, int64_t k) {
  const int64_t nb = k / QK_K;
  int8_t L[QK_K];
  float scales[QK_K / 16];
  for (int64_t i = 0; i < nb; i++) {
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < QK_K / 16; ++ib) {
      const float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib, 1);
      scales[ib] = scale;
      const float abs_scale = std::fabs(scale);
      if (abs_scale > max_abs_scale) { max_abs_scale = abs_scale; max_scale = scale; }
    }
    if (max_abs_scale < GROUP_MAX_EPS) {
      std::memset(&y[i], 0, sizeof(BlockQ6_K));
      y[i].d = fp32_to_fp16(0.f);
      x += QK_K;
      continue;
    }
    float iscale = -128.f / max_scale;
    y[i].d = fp32_to_fp16(1 / iscale);
    for (int ib = 0; ib < QK_K / 16; ++ib) y[i].scales[ib] = std::min(127, nearest_int(iscale * scales[ib]));
    for (int j = 0; j < QK_K / 16; ++j) {
      float d = fp16_to_fp32(y[i].d) * y[i].scales[j];
      if (!d) continue;
      for (int ii = 0; ii < 16; ++ii) {
        int l = nearest_int(x[16 * j + ii] / d);
        l = std::max(-32, std::min(31, l));
        L[16 * j + ii] = l + 32;
      }
    }
    uint8_t* ql = y[i].ql;
    uint8_t* qh = y[i].qh;
    for (int j = 0; j < QK_K; j += 128) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t q1 = L[j + l + 0] & 0xF;
        const uint8_t q2 = L[j + l + 32] & 0xF;
        const uint8_t q3 = L[j + l + 64] & 0xF;
        const uint8_t q4 = L[j + l + 96] & 0xF;
        ql[l + 0] = q1 | (q3 << 4);
        ql[l + 32] = q2 | (q4 << 4);
        qh[l] = (L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6);
      }
      ql += 64;
      qh += 32;
    }
    x += QK_K;
  }
}

void quantize_q8_k(const float* x, BlockQ8_K* y, int64_t k) {
  for (int64_t i = 0; i < k / QK_K; i++) {
    float max = 0, amax = 0;
    for (int j = 0; j < QK_K; ++j) {
      float ax = std::fabs(x[j]);
      if (ax > amax) { amax = ax; max = x[j]; }
    }
    if (!amax) {
      std::memset(&y[i], 0, sizeof(BlockQ8_K));
      x += QK_K;
      continue;
    }
    const float iscale = -127.f / max;
    for (int j = 0; j < QK_K; ++j) y[i].qs[j] = std::min(127, nearest_int(iscale * x[j]));
    for (int j = 0; j < QK_K / 16; ++j) {
      int sum = 0;
      for (int ii = 0; ii < 16; ++ii) sum += y[i].qs[j * 16 + ii];
      y[i].bsums[j] = sum;
    }
    y[i].d = 1 / iscale;
    x += QK_K;
  }
}

}  // namespace

/// Q6_K sub-block (of 16) of element e.
inline int e_sub16(int e) { return e / 16; }

/// Super-block `i` of a Q4_K/Q5_K/Q6_K row as unsigned values in element order
/// (Q6_K: 0..63, value q - 32), with per-sub-block scales (and mins for Q4_K/Q5_K).
void unpack_kquant(GgmlType t, const void* row, int64_t i, uint8_t* q, int* sc, int* mn, float* d, float* dmin) {
  if (t == GgmlType::Q4_K || t == GgmlType::Q5_K) {
    const uint8_t* scales;
    const uint8_t* qs;
    const uint8_t* qh = nullptr;
    if (t == GgmlType::Q4_K) {
      const auto& x = static_cast<const BlockQ4_K*>(row)[i];
      scales = x.scales; qs = x.qs; *d = fp16_to_fp32(x.d); *dmin = fp16_to_fp32(x.dmin);
    } else {
      const auto& x = static_cast<const BlockQ5_K*>(row)[i];
      scales = x.scales; qs = x.qs; qh = x.qh; *d = fp16_to_fp32(x.d); *dmin = fp16_to_fp32(x.dmin);
    }
    for (int j = 0; j < 8; ++j) {
      uint8_t s, m;
      get_scale_min_k4(j, scales, &s, &m);
      sc[j] = s;
      mn[j] = m;
    }
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l) {
        q[64 * c + l] = qs[32 * c + l] & 0xF;
        q[64 * c + 32 + l] = qs[32 * c + l] >> 4;
        if (qh) {
          q[64 * c + l] |= ((qh[l] >> (2 * c)) & 1) << 4;
          q[64 * c + 32 + l] |= ((qh[l] >> (2 * c + 1)) & 1) << 4;
        }
      }
  } else {  // Q6_K
    const auto& x = static_cast<const BlockQ6_K*>(row)[i];
    *d = fp16_to_fp32(x.d);
    *dmin = 0.f;
    for (int j = 0; j < 16; ++j) sc[j] = x.scales[j];
    for (int h = 0; h < 2; ++h)
      for (int l = 0; l < 32; ++l) {
        const uint8_t* ql = x.ql + 64 * h;
        const uint8_t hb = x.qh[32 * h + l];
        q[128 * h + l] = (ql[l] & 0xF) | ((hb & 3) << 4);
        q[128 * h + 32 + l] = (ql[l + 32] & 0xF) | (((hb >> 2) & 3) << 4);
        q[128 * h + 64 + l] = (ql[l] >> 4) | (((hb >> 4) & 3) << 4);
        q[128 * h + 96 + l] = (ql[l + 32] >> 4) | (((hb >> 6) & 3) << 4);
      }
  }
}

void quantize_kquant(GgmlType t, const float* src, void* dst, int64_t n) {
  switch (t) {
    case GgmlType::Q4_K: quantize_q45_k<4>(src, dst, n); break;
    case GgmlType::Q5_K: quantize_q45_k<5>(src, dst, n); break;
    case GgmlType::Q6_K: quantize_q6_k(src, static_cast<BlockQ6_K*>(dst), n); break;
    case GgmlType::Q8_K: quantize_q8_k(src, static_cast<BlockQ8_K*>(dst), n); break;
    default: break;
  }
}

void dequantize_kquant(GgmlType t, const void* src, float* y, int64_t n) {
  const int64_t nb = n / QK_K;
  if (t == GgmlType::Q8_K) {
    const auto* x = static_cast<const BlockQ8_K*>(src);
    for (int64_t i = 0; i < nb; i++)
      for (int j = 0; j < QK_K; ++j) *y++ = x[i].d * x[i].qs[j];
    return;
  }
  uint8_t q[QK_K];
  int sc[16], mn[8];
  float d, dmin;
  for (int64_t i = 0; i < nb; ++i) {
    unpack_kquant(t, src, i, q, sc, mn, &d, &dmin);
    if (t == GgmlType::Q6_K) {
      // dequantize_row_q6_K: y = d * sc * q, evaluated left to right.
      for (int j = 0; j < QK_K; ++j) *y++ = d * sc[j / 16] * (int(q[j]) - 32);
    } else {
      for (int j = 0; j < QK_K; ++j) {
        const float d1 = d * sc[j / 32], m1 = dmin * mn[j / 32];
        *y++ = d1 * q[j] - m1;
      }
    }
  }
}

void quantize_act_q8_k_scalar(const float* x, void* dst, int64_t n) {
  auto* a = static_cast<ActQ8K*>(dst);
  BlockQ8_K b;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    quantize_q8_k(x + i * QK_K, &b, QK_K);
    std::memcpy(a[i].qs, b.qs, QK_K);
    std::memcpy(a[i].bsums, b.bsums, sizeof(b.bsums));
    for (int j = 0; j < 8; ++j) a[i].bsum32[j] = b.bsums[2 * j] + b.bsums[2 * j + 1];
    a[i].d = b.d;
  }
}

void quantize_act_q8_k(const float* x, void* dst, int64_t n) {
  if (best_isa() == Isa::kAvx512Vnni) avx512::quantize_act_q8_k(x, dst, n);
  else quantize_act_q8_k_scalar(x, dst, n);
}

float vec_dot_kquant_scalar(GgmlType t, const void* w, const void* act, int64_t n) {
  const auto* a = static_cast<const ActQ8K*>(act);
  uint8_t q[QK_K];
  int sc[16], mn[8];
  float d, dmin;
  float acc[8] = {}, acc_m[4] = {};
  float summs = 0.f;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    unpack_kquant(t, w, i, q, sc, mn, &d, &dmin);
    const bool q6 = t == GgmlType::Q6_K;
    // Lane k: elements 32c + 4k .. 32c + 4k + 3 of the 8 chunks c, each times its scale.
    int32_t lane[8] = {};
    for (int c = 0; c < 8; ++c)
      for (int k = 0; k < 8; ++k) {
        int32_t s = 0;
        for (int e = 32 * c + 4 * k; e < 32 * c + 4 * k + 4; ++e) s += int32_t{q[e]} * a[i].qs[e];
        lane[k] += (q6 ? sc[e_sub16(32 * c + 4 * k)] : sc[c]) * s;
      }
    if (q6)  // Q6_K's −32 offset, from the 16-value sums: lane k takes sub-blocks 2k and 2k+1
      for (int k = 0; k < 8; ++k) lane[k] -= 32 * (sc[2 * k] * a[i].bsums[2 * k] + sc[2 * k + 1] * a[i].bsums[2 * k + 1]);
    const float dd = a[i].d * d;
    for (int k = 0; k < 8; ++k) acc[k] = std::fma(dd, static_cast<float>(lane[k]), acc[k]);
    if (!q6) {
      const float dm = -a[i].d * dmin;
      if (t == GgmlType::Q4_K) {
        for (int m = 0; m < 4; ++m)
          acc_m[m] = std::fma(dm, static_cast<float>(mn[2 * m] * a[i].bsum32[2 * m] + mn[2 * m + 1] * a[i].bsum32[2 * m + 1]), acc_m[m]);
      } else {
        int32_t I2 = 0;
        for (int j = 0; j < 8; ++j) I2 += mn[j] * a[i].bsum32[j];
        summs = std::fma(dm, static_cast<float>(I2), summs);
      }
    }
  }
  float r = hsum_float_8(acc);
  if (t == GgmlType::Q4_K) r += (acc_m[0] + acc_m[2]) + (acc_m[1] + acc_m[3]);
  if (t == GgmlType::Q5_K) r += summs;
  return r;
}

float vec_dot_q4_K_repack_scalar(const void* w, const void* act, int64_t n, bool gemm) {
  const auto* a = static_cast<const ActQ8K*>(act);
  uint8_t q[QK_K];
  int sc[16], mn[8];
  float d, dmin;
  float acc = 0.f, acc_m = 0.f;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    unpack_kquant(GgmlType::Q4_K, w, i, q, sc, mn, &d, &dmin);
    const float dd = d * a[i].d, dm = dmin * a[i].d;
    int32_t isum = 0, imin = 0;
    for (int j = 0; j < 8; ++j) {
      int32_t s = 0;
      for (int g = 0; g < 8; ++g) {  // groups of 4 (see vec_dot_q4_0_repack_scalar)
        int32_t sg = 0;
        for (int e = 32 * j + 4 * g; e < 32 * j + 4 * g + 4; ++e) sg += int32_t{q[e]} * a[i].qs[e];
        s += sg;
      }
      isum += sc[j] * s;
      imin += mn[j] * a[i].bsum32[j];
      if (gemm && j % 2 == 1) {  // GEMM: one fma pair per two sub-blocks
        acc = std::fma(static_cast<float>(isum), dd, acc);
        acc_m = std::fma(static_cast<float>(imin), dm, acc_m);
        isum = imin = 0;
      }
    }
    if (!gemm) {
      acc = std::fma(static_cast<float>(isum), dd, acc);
      acc_m = std::fma(static_cast<float>(imin), dm, acc_m);
    }
  }
  return acc - acc_m;
}

}  // namespace pdserve::kernels

namespace pdserve::kernels {

// quants.h kTiled: llama.cpp's tiled K-quant microkernel (tiled-kernel.cpp, VNNI and AVX2
// alike) per super-block: exact s1 / s2, r = (float) s1 · d (− dmin · s2 in one fma),
// acc = fma(r, d_a, acc).
float vec_dot_kquant_tiled_scalar(GgmlType t, const void* w, const void* act, int64_t n) {
  const auto* a = static_cast<const ActQ8K*>(act);
  uint8_t q[QK_K];
  int sc[16], mn[8];
  float d, dmin;
  float acc = 0.f;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    unpack_kquant(t, w, i, q, sc, mn, &d, &dmin);
    int32_t s1 = 0, s2 = 0;
    if (t == GgmlType::Q6_K) {
      for (int j = 0; j < 16; ++j) {
        int32_t raw = 0;
        for (int e = 16 * j; e < 16 * j + 16; ++e) raw += int32_t{q[e]} * a[i].qs[e];
        s1 += sc[j] * (raw - 32 * a[i].bsums[j]);
      }
    } else {
      for (int j = 0; j < 8; ++j) {
        int32_t raw = 0;
        for (int e = 32 * j; e < 32 * j + 32; ++e) raw += int32_t{q[e]} * a[i].qs[e];
        s1 += sc[j] * raw;
        s2 += mn[j] * a[i].bsum32[j];
      }
    }
    float r = static_cast<float>(s1) * d;
    if (t != GgmlType::Q6_K) r = std::fma(-dmin, static_cast<float>(s2), r);
    acc = std::fma(r, a[i].d, acc);
  }
  return acc;
}

}  // namespace pdserve::kernels
