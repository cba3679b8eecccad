// Float-type weights (F32, F16, BF16) on AVX-512 F/BW/VL/DQ + BF16: llama.cpp's dot-product
// orders (matmul.h) computed on register tiles of rows × tokens. Every lane of every
// accumulator sees the same fma sequence as matmul_float.cc's one-row, one-token
// reference, so the tiling changes no bit; the references' tails finish the leftovers.
// Also the 16-lane activation conversions of matmul_float.h.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels/matmul_float.h"
#include "kernels/tile_prefetch.h"

namespace pdserve::kernels::avx512 {
namespace {

using gguf::GgmlType;

// f32_decode_tail (matmul_float.cc) with vector products: ggml_vec_dot_f32's leftovers
// after its 64-value chunks, 16- then 8-wide chunks of rounded products added one by one,
// then a scalar FMA chain.
float f32_decode_tail(float res, const float* w, const float* x, int64_t i, int64_t n) {
  alignas(64) float p[16];
  // Products stored rounded, then added with explicit scalar adds (no contraction).
  for (; i + 16 <= n; i += 16) {
    _mm512_store_ps(p, _mm512_mul_ps(_mm512_loadu_ps(w + i), _mm512_loadu_ps(x + i)));
    for (int j = 0; j < 16; ++j) res = _mm_cvtss_f32(_mm_add_ss(_mm_set_ss(res), _mm_set_ss(p[j])));
  }
  if (i + 8 <= n) {
    _mm256_store_ps(p, _mm256_mul_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i)));
    for (int j = 0; j < 8; ++j) res = _mm_cvtss_f32(_mm_add_ss(_mm_set_ss(res), _mm_set_ss(p[j])));
    i += 8;
  }
  for (; i < n; ++i) res = std::fma(w[i], x[i], res);
  return res;
}

// ---- AVX-512 register tiles ----

/// Accumulators per (row, token): decode order 4 (F32/F16: 64-value chunks) or 2 (BF16:
/// c1, c2); prompt (tinyBLAS) order 1.
template <GgmlType K, bool kGemm>
constexpr int kAcc = kGemm ? 1 : K == GgmlType::BF16 ? 2 : 4;
/// Values per accumulator step: 16 f32 lanes, or 32 bf16 pairs.
template <GgmlType K>
constexpr int64_t kStep = K == GgmlType::BF16 ? 32 : 16;

/// Accumulates rows rp[0..R) against tokens xp[0..T) over [0, n_main); out[(r*T + t)*2 + j]
/// = accumulator j of the pair after folding (F32/F16 decode: (s0+s2)+(s1+s3)).
template <GgmlType K, bool kGemm, int R, int T>
void tile(const uint8_t* const* rp, const void* const* xp, int64_t n_main, const TilePrefetch& pf, __m512* out) {
  constexpr int A = kAcc<K, kGemm>;
  constexpr int64_t S = kStep<K>;
  __m512 acc[R][T][A];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t)
#pragma GCC unroll 4
      for (int a = 0; a < A; ++a) acc[r][t][a] = _mm512_setzero_ps();
  int64_t it = 0;
  for (int64_t i = 0; i < n_main; i += S * A, ++it) {
    pf.part(it);
#pragma GCC unroll 4
    for (int a = 0; a < A; ++a)
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const int64_t e = i + S * a;
        if constexpr (K == GgmlType::BF16) {
          const __m512i wv = _mm512_loadu_si512(reinterpret_cast<const uint16_t*>(rp[r]) + e);
#pragma GCC unroll 16
          for (int t = 0; t < T; ++t)
            acc[r][t][a] = _mm512_dpbf16_ps(acc[r][t][a], (__m512bh)wv, (__m512bh)_mm512_loadu_si512(static_cast<const uint16_t*>(xp[t]) + e));
        } else {
          __m512 wv;
          if constexpr (K == GgmlType::F32) wv = _mm512_loadu_ps(reinterpret_cast<const float*>(rp[r]) + e);
          else wv = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(reinterpret_cast<const uint16_t*>(rp[r]) + e)));
#pragma GCC unroll 16
          for (int t = 0; t < T; ++t) acc[r][t][a] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(static_cast<const float*>(xp[t]) + e), acc[r][t][a]);
        }
      }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) {
      if constexpr (A == 4) {
        out[(r * T + t) * 2] = _mm512_add_ps(_mm512_add_ps(acc[r][t][0], acc[r][t][2]), _mm512_add_ps(acc[r][t][1], acc[r][t][3]));
      } else {
        out[(r * T + t) * 2] = acc[r][t][0];
        if constexpr (A == 2) out[(r * T + t) * 2 + 1] = acc[r][t][1];
      }
    }
}

/// The reference's result from the tile's folded accumulators and the leftovers.
template <GgmlType K, bool kGemm>
float finish(const __m512* v, const uint8_t* row, const float* x, const uint16_t* xb, int64_t n_main, int64_t n) {
  if constexpr (kGemm) return _mm512_reduce_add_ps(v[0]);
  if constexpr (K == GgmlType::F32) {
    return f32_decode_tail(_mm512_reduce_add_ps(v[0]), reinterpret_cast<const float*>(row), x, n_main, n);
  } else if constexpr (K == GgmlType::F16) {
    double sum = 0.0;
    if (n_main > 0) sum = _mm512_reduce_add_ps(v[0]);
    return f16_decode_tail(sum, reinterpret_cast<const uint16_t*>(row), x, n_main, n);
  } else {
    double sum = 0.0;
    sum += static_cast<double>(_mm512_reduce_add_ps(v[0]));
    sum += static_cast<double>(_mm512_reduce_add_ps(v[1]));
    return bf16_decode_tail(sum, reinterpret_cast<const uint16_t*>(row), xb, n_main, n);
  }
}

/// Tokens [t0, t0 + T) of x/xb against rows [rt, rt + R) ∩ [.., r1).
template <GgmlType K, bool kGemm, int R, int T>
void run_tile(const WeightView& w, const float* x, const uint16_t* xb, int t0, int64_t rt, int64_t r1, float* y, int64_t ldy) {
  const auto* base = static_cast<const uint8_t*>(w.data);
  const uint8_t* rp[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) rp[r] = base + std::min(rt + r, r1 - 1) * w.row_bytes;
  const void* xp[T];
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t)
    xp[t] = K == GgmlType::BF16 ? static_cast<const void*>(xb + (t0 + t) * w.cols) : static_cast<const void*>(x + (t0 + t) * w.cols);
  const int64_t chunk = kStep<K> * kAcc<K, kGemm>;
  const int64_t n_main = kGemm ? w.cols : w.cols / 64 * 64;
  __m512 out[R * T * 2];
  tile<K, kGemm, R, T>(rp, xp, n_main, TilePrefetch(w, rt + R, R, (n_main + chunk - 1) / chunk), out);
  for (int r = 0; r < R && rt + r < r1; ++r)
    for (int t = 0; t < T; ++t)
      y[(t0 + t) * ldy + rt + r] =
          finish<K, kGemm>(out + (r * T + t) * 2, rp[r], x + (t0 + t) * w.cols, xb ? xb + (t0 + t) * w.cols : nullptr, n_main, w.cols);
}

/// Row tiles × token tiles for one run of tokens with the same order. Tiles use at most
/// 24 accumulator registers: kTok tokens × kRows rows, one token × kRows1 rows (BF16: 6 rows,
/// which streams L2/L3-resident weights faster than 12).
template <GgmlType K, bool kGemm>
void run_order(const WeightView& w, const float* x, const uint16_t* xb, int t0, int t1, int64_t r0, int64_t r1, float* y, int64_t ldy) {
  constexpr int A = kAcc<K, kGemm>;
  constexpr int kTok = A == 4 ? 2 : A == 2 ? 3 : 6;
  constexpr int kRows = 24 / (kTok * A), kRows1 = A == 1 ? 8 : A == 2 ? 6 : 24 / A;
  using TileFn = void (*)(const WeightView&, const float*, const uint16_t*, int, int64_t, int64_t, float*, int64_t);
  // tiles[n - 2]: n tokens (2 .. 6; entries past kTok are never used).
  static constexpr TileFn tiles[5] = {run_tile<K, kGemm, kRows, 2>, run_tile<K, kGemm, kRows, std::min(3, kTok)>,
                                      run_tile<K, kGemm, kRows, std::min(4, kTok)>, run_tile<K, kGemm, kRows, std::min(5, kTok)>,
                                      run_tile<K, kGemm, kRows, std::min(6, kTok)>};
  for (int t = t0; t < t1; t += kTok) {
    const int nt = std::min(kTok, t1 - t);
    if (nt == 1) {
      for (int64_t r = r0; r < r1; r += kRows1) run_tile<K, kGemm, kRows1, 1>(w, x, xb, t, r, r1, y, ldy);
    } else {
      for (int64_t r = r0; r < r1; r += kRows) tiles[nt - 2](w, x, xb, t, r, r1, y, ldy);
    }
  }
}

template <GgmlType K>
void run_type(const WeightView& w, const float* x, const uint16_t* xb, int t0, int t1, bool gemm, int64_t r0, int64_t r1, float* y,
              int64_t ldy) {
  if (gemm) run_order<K, true>(w, x, xb, t0, t1, r0, r1, y, ldy);
  else run_order<K, false>(w, x, xb, t0, t1, r0, r1, y, ldy);
}
}  // namespace

void matmul_float_run(const WeightView& w, const float* x, const uint16_t* xb, int t0, int t1, bool gemm, int64_t r0, int64_t r1,
                      float* y, int64_t ldy) {
  switch (w.type) {
    case GgmlType::F32: run_type<GgmlType::F32>(w, x, xb, t0, t1, gemm, r0, r1, y, ldy); break;
    case GgmlType::F16: run_type<GgmlType::F16>(w, x, xb, t0, t1, gemm, r0, r1, y, ldy); break;
    case GgmlType::BF16: run_type<GgmlType::BF16>(w, x, xb, t0, t1, gemm, r0, r1, y, ldy); break;
    default: break;
  }
}

void round_to_f16(const float* x, float* dst, int64_t n) {
  for (int64_t i = 0; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT)));
}

void convert_to_bf16(const float* x, uint16_t* dst, int64_t n) {
  // fp32_to_bf16 on 16 lanes: NaN → quiet (bits >> 16 | 64), else round to nearest even.
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
  const __m512i bias = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1), quiet = _mm512_set1_epi32(64);
  for (int64_t i = 0; i + 16 <= n; i += 16) {
    const __m512i u = _mm512_castps_si512(_mm512_loadu_ps(x + i));
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs_mask), inf);
    const __m512i hi = _mm512_srli_epi32(u, 16);
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(bias, _mm512_and_si512(hi, one))), 16);
    r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(hi, quiet));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm512_cvtepi32_epi16(r));
  }
}

}  // namespace pdserve::kernels::avx512
