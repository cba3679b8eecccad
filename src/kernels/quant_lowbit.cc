// Q2_K, Q3_K (256-value super-blocks, sub-blocks of 16) and the non-linear IQ4_NL (blocks of
// 32) / IQ4_XS (super-blocks of 256, sub-blocks of 32): ggml's reference quantisers and
// dequantisers (ggml/src/ggml-quants.c: quantize_row_q2_K_ref, quantize_row_q3_K_ref with
// make_q3_quants, quantize_iq4_nl / quantize_iq4_xs = quantize_row_iq4_nl_impl without an
// importance matrix, ntry 7 — what llama-quantize writes; dequantize_row_*) and the scalar
// reference dots (quants.h): Q2_K / Q3_K / IQ4_XS with Q8_K activations in the order of
// ggml's AVX2 ggml_vec_dot_{q2_K,q3_K,iq4_xs}_q8_K (ggml-cpu/arch/x86/quants.c) or of
// llama.cpp's tiled matmul (QOrder::kTiled); IQ4_NL with Q8_0 activations in the order of
// ggml_vec_dot_iq4_nl_q8_0 (AVX2).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/fp16.h"
#include "kernels/quant_ref.h"
#include "kernels/quant_types.h"
#include "kernels/quants.h"

namespace pdserve::kernels {

using gguf::GgmlType;

namespace {

constexpr float GROUP_MAX_EPS = 1e-15f;

// 2-bit fields of Q2_K / Q3_K: element 128h + 32s + l sits in bits 2s, 2s+1 of qs[32h + l].
void pack_2bit(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < QK_K; j += 128)
    for (int l = 0; l < 32; ++l) qs[j / 4 + l] = L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6);
}
inline int get_2bit(const uint8_t* qs, int e) { return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3; }

void quantize_q2_k(const float* x, BlockQ2_K* y, int64_t k) {
  uint8_t L[QK_K], Laux[16];
  float weights[16], mins[QK_K / 16], scales[QK_K / 16];
  const float q4scale = 15.f;
  for (int64_t i = 0; i < k / QK_K; i++) {
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < QK_K / 16; ++j) {
      for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
      scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
      if (scales[j] > max_scale) max_scale = scales[j];
      if (mins[j] > max_min) max_min = mins[j];
    }
    if (max_scale > 0) {
      const float iscale = q4scale / max_scale;
      for (int j = 0; j < QK_K / 16; ++j) y[i].scales[j] = static_cast<uint8_t>(nearest_int(iscale * scales[j]));
      y[i].d = fp32_to_fp16(max_scale / q4scale);
    } else {
      for (int j = 0; j < QK_K / 16; ++j) y[i].scales[j] = 0;
      y[i].d = fp32_to_fp16(0.f);
    }
    if (max_min > 0) {
      const float iscale = q4scale / max_min;
      for (int j = 0; j < QK_K / 16; ++j) y[i].scales[j] |= static_cast<uint8_t>(nearest_int(iscale * mins[j]) << 4);
      y[i].dmin = fp32_to_fp16(max_min / q4scale);
    } else {
      y[i].dmin = fp32_to_fp16(0.f);
    }
    for (int j = 0; j < QK_K / 16; ++j) {
      const float d = fp16_to_fp32(y[i].d) * (y[i].scales[j] & 0xF);
      if (!d) continue;
      const float dm = fp16_to_fp32(y[i].dmin) * (y[i].scales[j] >> 4);
      for (int ii = 0; ii < 16; ++ii) {
        const int l = nearest_int((x[16 * j + ii] + dm) / d);
        L[16 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(3, l)));
      }
    }
    pack_2bit(L, y[i].qs);
    x += QK_K;
  }
}

float make_q3_quants(int n, int nmax, const float* x, int8_t* L) {  // do_rmse = true
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) { amax = ax; max = x[i]; }
  }
  if (amax < GROUP_MAX_EPS) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  const float iscale = -nmax / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearest_int(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  for (int itry = 0; itry < 5; ++itry) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * L[i];
      if (slx > 0) {
        float sl2 = suml2 - w * L[i] * L[i];
        int new_l = nearest_int(x[i] * sl2 / slx);
        new_l = std::max(-nmax, std::min(nmax - 1, new_l));
        if (new_l != L[i]) {
          slx += w * x[i] * new_l;
          sl2 += w * new_l * new_l;
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = static_cast<int8_t>(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (!n_changed) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/// Q3_K scale j (6-bit, before the −32).
inline int q3k_scale(const uint8_t* s, int j) {
  const int lo = j < 8 ? s[j] & 0xF : s[j - 8] >> 4;
  return lo | (((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4);
}

void quantize_q3_k(const float* x, BlockQ3_K* y, int64_t k) {
  int8_t L[QK_K];
  float scales[QK_K / 16];
  for (int64_t i = 0; i < k / QK_K; i++) {
    float max_scale = 0, amax = 0;
    for (int j = 0; j < QK_K / 16; ++j) {
      scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
      const float scale = std::fabs(scales[j]);
      if (scale > amax) { amax = scale; max_scale = scales[j]; }
    }
    std::memset(y[i].scales, 0, 12);
    if (max_scale) {
      const float iscale = -32.f / max_scale;
      for (int j = 0; j < QK_K / 16; ++j) {
        int8_t l = static_cast<int8_t>(nearest_int(iscale * scales[j]));
        l = static_cast<int8_t>(std::max<int>(-32, std::min<int>(31, l)) + 32);
        if (j < 8) y[i].scales[j] = l & 0xF;
        else y[i].scales[j - 8] |= ((l & 0xF) << 4);
        l >>= 4;
        y[i].scales[j % 4 + 8] |= (l << (2 * (j / 4)));
      }
      y[i].d = fp32_to_fp16(1 / iscale);
    } else {
      y[i].d = fp32_to_fp16(0.f);
    }
    for (int j = 0; j < QK_K / 16; ++j) {
      const int8_t sc = static_cast<int8_t>(q3k_scale(y[i].scales, j) - 32);
      const float d = fp16_to_fp32(y[i].d) * sc;
      if (!d) continue;
      for (int ii = 0; ii < 16; ++ii) {
        int l = nearest_int(x[16 * j + ii] / d);
        l = std::max(-4, std::min(3, l));
        L[16 * j + ii] = static_cast<int8_t>(l + 4);
      }
    }
    std::memset(y[i].hmask, 0, QK_K / 8);
    int m = 0;
    uint8_t hm = 1;
    uint8_t Lu[QK_K];
    for (int j = 0; j < QK_K; ++j) {
      if (L[j] > 3) {
        y[i].hmask[m] |= hm;
        L[j] -= 4;
      }
      Lu[j] = static_cast<uint8_t>(L[j]);
      if (++m == QK_K / 8) {
        m = 0;
        hm <<= 1;
      }
    }
    pack_2bit(Lu, y[i].qs);
    x += QK_K;
  }
}

int best_index_int8(int n, const int8_t* val, float x) {
  if (x <= val[0]) return 0;
  if (x >= val[n - 1]) return n - 1;
  int ml = 0, mu = n - 1;
  while (mu - ml > 1) {
    const int mav = (ml + mu) / 2;
    if (x < val[mav]) mu = mav;
    else ml = mav;
  }
  return x - val[mu - 1] < val[mu] - x ? mu - 1 : mu;
}

// quantize_row_iq4_nl_impl without quant_weights, ntry = 7: IQ4_NL (super_block_size =
// block_size = 32) and IQ4_XS (256 / 32).
void quantize_iq4_impl(int super_block_size, const float* x, uint16_t* dh, uint8_t* q4, uint16_t* scales_h, uint8_t* scales_l) {
  constexpr int block_size = 32, ntry = 7;
  const int8_t* values = kValuesIQ4NL;
  float scales[QK_K / 32], weight[32];
  uint8_t L[QK_K];
  std::memset(q4, 0, super_block_size / 2);
  dh[0] = fp32_to_fp16(0.f);
  float max_scale = 0, amax_scale = 0;
  for (int ib = 0; ib < super_block_size / block_size; ++ib) {
    const float* xb = x + ib * block_size;
    uint8_t* Lb = L + ib * block_size;
    for (int j = 0; j < block_size; ++j) weight[j] = xb[j] * xb[j];
    float amax = 0, max = 0;
    for (int j = 0; j < block_size; ++j) {
      const float ax = std::fabs(xb[j]);
      if (ax > amax) { amax = ax; max = xb[j]; }
    }
    if (amax < GROUP_MAX_EPS) {
      scales[ib] = 0;
      continue;
    }
    float d = -max / values[0];
    float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < block_size; ++j) {
      const float al = id * xb[j];
      const int l = best_index_int8(16, values, al);
      Lb[j] = static_cast<uint8_t>(l);
      const float q = values[l];
      const float w = weight[j];
      sumqx += w * q * xb[j];
      sumq2 += w * q * q;
    }
    d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
    float best = d * sumqx;
    for (int itry = -ntry; itry <= ntry; ++itry) {
      id = (itry + values[0]) / max;
      sumqx = sumq2 = 0;
      for (int j = 0; j < block_size; ++j) {
        const float al = id * xb[j];
        const int l = best_index_int8(16, values, al);
        const float q = values[l];
        const float w = weight[j];
        sumqx += w * q * xb[j];
        sumq2 += w * q * q;
      }
      if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
        d = sumqx / sumq2;
        best = d * sumqx;
      }
    }
    scales[ib] = d;
    const float abs_d = std::fabs(d);
    if (abs_d > amax_scale) { amax_scale = abs_d; max_scale = d; }
  }
  if (super_block_size / block_size > 1) {
    scales_h[0] = 0;
    const float d = -max_scale / 32;
    dh[0] = fp32_to_fp16(d);
    const float id = d ? 1 / d : 0.f;
    for (int ib = 0; ib < super_block_size / block_size; ++ib) {
      int l = nearest_int(id * scales[ib]);
      l = std::max(-32, std::min(31, l));
      const float dl = d * l;
      const float idl = dl ? 1 / dl : 0.f;
      uint8_t* Lb = L + ib * block_size;
      const float* xb = x + ib * block_size;
      for (int j = 0; j < block_size; ++j) Lb[j] = static_cast<uint8_t>(best_index_int8(16, values, idl * xb[j]));
      l += 32;
      const uint8_t l_l = l & 0xf, l_h = static_cast<uint8_t>(l >> 4);
      if (ib % 2 == 0) scales_l[ib / 2] = l_l;
      else scales_l[ib / 2] |= (l_l << 4);
      scales_h[ib / 8] |= (l_h << 2 * (ib % 8));
    }
  } else {
    dh[0] = fp32_to_fp16(scales[0]);
    const float id = scales[0] ? 1 / scales[0] : 0;
    for (int j = 0; j < super_block_size; ++j) L[j] = static_cast<uint8_t>(best_index_int8(16, values, id * x[j]));
  }
  for (int i = 0; i < super_block_size / 32; ++i)
    for (int j = 0; j < 16; ++j) q4[16 * i + j] = L[32 * i + j] | (L[32 * i + 16 + j] << 4);
}

inline int iq4xs_scale(const BlockIQ4_XS& x, int ib) {
  return ((x.scales_l[ib / 2] >> 4 * (ib % 2)) & 0xf) | (((x.scales_h >> 2 * ib) & 3) << 4);
}

}  // namespace

void unpack_lowbit(GgmlType t, const void* row, int64_t i, int8_t* v, int* sc, int* mn, float* d, float* dmin) {
  if (t == GgmlType::Q2_K) {
    const auto& x = static_cast<const BlockQ2_K*>(row)[i];
    *d = fp16_to_fp32(x.d);
    *dmin = fp16_to_fp32(x.dmin);
    for (int j = 0; j < 16; ++j) {
      sc[j] = x.scales[j] & 0xF;
      mn[j] = x.scales[j] >> 4;
    }
    for (int e = 0; e < QK_K; ++e) v[e] = static_cast<int8_t>(get_2bit(x.qs, e));
  } else if (t == GgmlType::Q3_K) {
    const auto& x = static_cast<const BlockQ3_K*>(row)[i];
    *d = fp16_to_fp32(x.d);
    *dmin = 0.f;
    for (int j = 0; j < 16; ++j) {
      sc[j] = q3k_scale(x.scales, j) - 32;
      mn[j] = 0;
    }
    for (int e = 0; e < QK_K; ++e) v[e] = static_cast<int8_t>(get_2bit(x.qs, e) - ((x.hmask[e % 32] >> (e / 32)) & 1 ? 0 : 4));
  } else {  // IQ4_XS
    const auto& x = static_cast<const BlockIQ4_XS*>(row)[i];
    *d = fp16_to_fp32(x.d);
    *dmin = 0.f;
    for (int ib = 0; ib < 8; ++ib) {
      sc[2 * ib] = sc[2 * ib + 1] = iq4xs_scale(x, ib) - 32;
      mn[2 * ib] = mn[2 * ib + 1] = 0;
      for (int j = 0; j < 16; ++j) {
        v[32 * ib + j] = kValuesIQ4NL[x.qs[16 * ib + j] & 0xF];
        v[32 * ib + 16 + j] = kValuesIQ4NL[x.qs[16 * ib + j] >> 4];
      }
    }
  }
}

void quantize_lowbit(GgmlType t, const float* src, void* dst, int64_t n) {
  switch (t) {
    case GgmlType::Q2_K: quantize_q2_k(src, static_cast<BlockQ2_K*>(dst), n); break;
    case GgmlType::Q3_K: quantize_q3_k(src, static_cast<BlockQ3_K*>(dst), n); break;
    case GgmlType::IQ4_NL:
      for (int64_t b = 0; b < n / 32; ++b) {
        auto& y = static_cast<BlockIQ4_NL*>(dst)[b];
        uint16_t unused_h;
        quantize_iq4_impl(32, src + 32 * b, &y.d, y.qs, &unused_h, nullptr);
      }
      break;
    case GgmlType::IQ4_XS:
      for (int64_t b = 0; b < n / QK_K; ++b) {
        auto& y = static_cast<BlockIQ4_XS*>(dst)[b];
        quantize_iq4_impl(QK_K, src + QK_K * b, &y.d, y.qs, &y.scales_h, y.scales_l);
      }
      break;
    default: break;
  }
}

void dequantize_lowbit(GgmlType t, const void* src, float* y, int64_t n) {
  if (t == GgmlType::IQ4_NL) {
    for (int64_t b = 0; b < n / 32; ++b) {
      const auto& x = static_cast<const BlockIQ4_NL*>(src)[b];
      const float d = fp16_to_fp32(x.d);
      for (int j = 0; j < 16; ++j) {
        y[j] = d * kValuesIQ4NL[x.qs[j] & 0xf];
        y[j + 16] = d * kValuesIQ4NL[x.qs[j] >> 4];
      }
      y += 32;
    }
    return;
  }
  int8_t v[QK_K];
  int sc[16], mn[16];
  float d, dmin;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    unpack_lowbit(t, src, i, v, sc, mn, &d, &dmin);
    if (t == GgmlType::Q2_K) {  // dequantize_row_q2_K: dl * q − ml
      for (int e = 0; e < QK_K; ++e) {
        const float dl = d * sc[e / 16], ml = dmin * mn[e / 16];
        *y++ = dl * v[e] - ml;
      }
    } else if (t == GgmlType::Q3_K) {  // dl = d·(sc − 32), then dl · (q − 4)
      for (int e = 0; e < QK_K; ++e) *y++ = (d * sc[e / 16]) * v[e];
    } else {  // IQ4_XS: dl = d·(ls − 32), then dl · value
      for (int e = 0; e < QK_K; ++e) *y++ = (d * sc[e / 16]) * v[e];
    }
  }
}

float vec_dot_lowbit_scalar(GgmlType t, const void* w, const void* act, int64_t n) {
  const auto* a = static_cast<const ActQ8K*>(act);
  int8_t v[QK_K];
  int sc[16], mn[16];
  float d, dmin;
  float acc[8] = {};
  for (int64_t i = 0; i < n / QK_K; ++i) {
    unpack_lowbit(t, w, i, v, sc, mn, &d, &dmin);
    // Lane k: elements 32c + 4k .. 32c + 4k + 3 of the 8 chunks c, times the scale of their
    // sub-block of 16 (2c for k < 4, 2c + 1 for k >= 4).
    int32_t lane[8] = {};
    for (int c = 0; c < 8; ++c)
      for (int k = 0; k < 8; ++k) {
        int32_t s = 0;
        for (int e = 32 * c + 4 * k; e < 32 * c + 4 * k + 4; ++e) s += int32_t{v[e]} * a[i].qs[e];
        lane[k] += sc[2 * c + k / 4] * s;
      }
    if (t == GgmlType::Q2_K) {  // the mins first, in the same accumulator
      const float dm = -a[i].d * dmin;
      for (int m = 0; m < 8; ++m)
        acc[m] = std::fma(dm, static_cast<float>(mn[2 * m] * a[i].bsums[2 * m] + mn[2 * m + 1] * a[i].bsums[2 * m + 1]), acc[m]);
    }
    const float dd = a[i].d * d;
    for (int k = 0; k < 8; ++k) acc[k] = std::fma(dd, static_cast<float>(lane[k]), acc[k]);
  }
  return hsum_float_8(acc);
}

float vec_dot_lowbit_tiled_scalar(GgmlType t, const void* w, const void* act, int64_t n) {
  const auto* a = static_cast<const ActQ8K*>(act);
  int8_t v[QK_K];
  int sc[16], mn[16];
  float d, dmin;
  float acc = 0.f;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    unpack_lowbit(t, w, i, v, sc, mn, &d, &dmin);
    int32_t s1 = 0, s2 = 0;
    for (int j = 0; j < 16; ++j) {
      int32_t raw = 0;
      for (int e = 16 * j; e < 16 * j + 16; ++e) raw += int32_t{v[e]} * a[i].qs[e];
      s1 += sc[j] * raw;
      s2 += mn[j] * a[i].bsums[j];
    }
    float r = static_cast<float>(s1) * d;
    if (t == GgmlType::Q2_K) r = std::fma(-dmin, static_cast<float>(s2), r);
    acc = std::fma(r, a[i].d, acc);
  }
  return acc;
}

float vec_dot_iq4_nl_scalar(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockIQ4_NL*>(w);
  const auto* pairs = static_cast<const ActPairQ8*>(act);
  float acc[2][8] = {};
  const int64_t nb = n / 32;
  int64_t b = 0;
  auto block_lanes = [&](int64_t blk, int32_t* lane) {
    const ActPairQ8& p = pairs[blk / 2];
    const int h = static_cast<int>(blk % 2);
    for (int g = 0; g < 8; ++g) {
      lane[g] = 0;
      for (int e = 4 * g; e < 4 * g + 4; ++e) {
        const int q = e < 16 ? x[blk].qs[e] & 0xF : x[blk].qs[e - 16] >> 4;
        lane[g] += int32_t{kValuesIQ4NL[q]} * (int32_t{p.qu[32 * h + e]} - 128);
      }
    }
  };
  int32_t lane[8];
  for (; b + 1 < nb; b += 2)  // even blocks in one accumulator, odd ones in the other
    for (int h = 0; h < 2; ++h) {
      block_lanes(b + h, lane);
      const float d = pairs[(b + h) / 2].d[8 * h] * fp16_to_fp32(x[b + h].d);
      for (int g = 0; g < 8; ++g) acc[h][g] = std::fma(d, static_cast<float>(lane[g]), acc[h][g]);
    }
  float sum[8];
  for (int g = 0; g < 8; ++g) sum[g] = acc[0][g] + acc[1][g];
  float r = hsum_float_8(sum);
  for (; b < nb; ++b) {  // an odd last block: ggml's scalar tail
    block_lanes(b, lane);
    int32_t s = 0;
    for (int g = 0; g < 8; ++g) s += lane[g];
    r = std::fma(pairs[b / 2].d[8 * (b % 2)] * fp16_to_fp32(x[b].d), static_cast<float>(s), r);
  }
  return r;
}

float vec_dot_iq4_nl_repack_scalar(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockIQ4_NL*>(w);
  const auto* pairs = static_cast<const ActPairQ8*>(act);
  float acc = 0.f;
  for (int64_t b = 0; b < n / 32; ++b) {
    const ActPairQ8& p = pairs[b / 2];
    const int h = static_cast<int>(b % 2);
    int32_t s = 0;
    for (int g = 0; g < 8; ++g) {  // groups of 4, as vec_dot_q4_0_repack_scalar
      int32_t sg = 0;
      for (int e = 4 * g; e < 4 * g + 4; ++e) {
        const int q = e < 16 ? x[b].qs[e] & 0xF : x[b].qs[e - 16] >> 4;
        sg += int32_t{kValuesIQ4NL[q]} * (int32_t{p.qu[32 * h + e]} - 128);
      }
      s += sg;
    }
    acc = std::fma(static_cast<float>(s), fp16_to_fp32(x[b].d) * p.d[8 * h], acc);
  }
  return acc;
}

}  // namespace pdserve::kernels
