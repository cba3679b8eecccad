#include "kernels/matmul.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/fp16.h"
#include "kernels/parallel.h"

namespace pdserve::kernels {

namespace {

using gguf::GgmlType;

// Dot products with fixed reduction orders. Which one a (row, token) pair uses depends
// only on the weight type/shape and that token's own gemm_order flag — never on the batch
// size or the other tokens — which is what makes matmul batch invariant.

inline float hsum16(const float* acc) {
  float s = 0.f;
  for (int i = 0; i < 16; ++i) s += acc[i];
  return s;
}

// f32 weights, decode order: the reduction order of ggml's ggml_vec_dot_f32
// (ggml-cpu/vec.cpp, AVX-512 branch, GGML_F32_STEP 64 / EPR 16), which llama.cpp's CPU
// mul_mat uses for one-token (decode) batches and for k % 16 != 0 (llamafile_sgemm
// declines both; multi-token prompts with k % 16 == 0 use dot_f32_gemm below). Four
// 16-lane FMA accumulators over 64-value chunks, folded (s0+s2)+(s1+s3) then
// _mm512_reduce_add_ps (GGML_F32_VEC_REDUCE); the n % 64 leftovers go into the float sum
// as GCC vectorizes that loop in the reference build: 16- then 8-wide chunks of rounded
// products added one by one, then a scalar FMA chain.
float dot_f32(const float* w, const float* x, int64_t n) {
  const int64_t np = n & ~int64_t(63);
  int64_t i = 0;
#if defined(__AVX512F__)
  __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  for (; i < np; i += 64) {
    s0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i), _mm512_loadu_ps(x + i), s0);
    s1 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i + 16), _mm512_loadu_ps(x + i + 16), s1);
    s2 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i + 32), _mm512_loadu_ps(x + i + 32), s2);
    s3 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i + 48), _mm512_loadu_ps(x + i + 48), s3);
  }
  float res = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s2), _mm512_add_ps(s1, s3)));
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
#else
  // Portable emulation of the same order.
  float s[4][16] = {};
  for (; i < np; i += 64)
    for (int a = 0; a < 4; ++a)
      for (int j = 0; j < 16; ++j) s[a][j] = std::fma(w[i + 16 * a + j], x[i + 16 * a + j], s[a][j]);
  float t[16];
  for (int j = 0; j < 16; ++j) t[j] = (s[0][j] + s[2][j]) + (s[1][j] + s[3][j]);
  for (int half = 8; half >= 1; half /= 2)
    for (int j = 0; j < half; ++j) t[j] += t[j + half];
  float res = t[0];
  // Leftovers: 16-wide chunks, then one 8-wide chunk, of rounded products added in order.
  const int64_t n_chunked = i + (n - i) / 16 * 16 + ((n - i) % 16 >= 8 ? 8 : 0);
  for (; i < n_chunked; ++i) {
    volatile float prod = w[i] * x[i];  // rounded product (vmulps), not contracted
    res += prod;
  }
#endif
  for (; i < n; ++i) res = std::fma(w[i], x[i], res);
  return res;
}

// f32 weights, multi-token prompt order: tinyBLAS (llamafile sgemm.cpp, tinyBLAS::gemm_bloc
// with KN = 16 on AVX-512): one 16-lane accumulator, acc = fma(w[l..l+16], x[l..l+16], acc)
// for l = 0, 16, …, then hsum = _mm512_reduce_add_ps (8+8, 4+4, 2+2, 1+1 halving fold).
// Only valid for n % 16 == 0 (llamafile_sgemm declines other k).
float dot_f32_gemm(const float* w, const float* x, int64_t n) {
#if defined(__AVX512F__)
  __m512 acc = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(w + i), _mm512_loadu_ps(x + i), acc);
  return _mm512_reduce_add_ps(acc);
#else
  float t[16] = {};
  for (int64_t i = 0; i < n; i += 16)
    for (int j = 0; j < 16; ++j) t[j] = std::fma(w[i + j], x[i + j], t[j]);
  for (int half = 8; half >= 1; half /= 2)
    for (int j = 0; j < half; ++j) t[j] += t[j + half];
  return t[0];
#endif
}

float dot_f16(const uint16_t* w, const float* x, int64_t n) {
#if defined(__AVX512F__)
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 wv = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + i)));
    acc = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x + i), acc);
  }
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, acc);
  float s = hsum16(lanes);
  for (; i < n; ++i) s += fp16_to_fp32(w[i]) * x[i];
  return s;
#else
  float lanes[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) lanes[j] += fp16_to_fp32(w[i + j]) * x[i + j];
  float s = hsum16(lanes);
  for (; i < n; ++i) s += fp16_to_fp32(w[i]) * x[i];
  return s;
#endif
}

float dot_bf16(const uint16_t* w, const float* x, int64_t n) {
#if defined(__AVX512F__)
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512i wi = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + i)));
    __m512 wv = _mm512_castsi512_ps(_mm512_slli_epi32(wi, 16));
    acc = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x + i), acc);
  }
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, acc);
  float s = hsum16(lanes);
  for (; i < n; ++i) s += bf16_to_fp32(w[i]) * x[i];
  return s;
#else
  float lanes[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) lanes[j] += bf16_to_fp32(w[i + j]) * x[i + j];
  float s = hsum16(lanes);
  for (; i < n; ++i) s += bf16_to_fp32(w[i]) * x[i];
  return s;
#endif
}

// The single dispatch point for every weight type and reduction order (see matmul.h).
float dot_row(const WeightView& w, int64_t r, const float* x, bool gemm) {
  const auto* row = static_cast<const uint8_t*>(w.data) + r * w.row_bytes;
  switch (w.type) {
    case GgmlType::F32: {
      const auto* wr = reinterpret_cast<const float*>(row);
      return gemm && w.cols % 16 == 0 ? dot_f32_gemm(wr, x, w.cols) : dot_f32(wr, x, w.cols);
    }
    case GgmlType::F16: return dot_f16(reinterpret_cast<const uint16_t*>(row), x, w.cols);
    case GgmlType::BF16: return dot_bf16(reinterpret_cast<const uint16_t*>(row), x, w.cols);
    default: return 0.f;
  }
}

}  // namespace

bool matmul_supports(GgmlType type) {
  return type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16;
}

void matmul(const WeightView& w, const float* x, int n_tokens, float* y, const uint8_t* gemm_order) {
  constexpr int64_t kRowTile = 16;
  constexpr int kTokTile = 8;
  const int64_t n_row_tiles = (w.rows + kRowTile - 1) / kRowTile;
#pragma omp parallel for schedule(static) if (worth_parallel(w.rows * w.cols * n_tokens))
  for (int64_t rt = 0; rt < n_row_tiles; ++rt) {
    const int64_t r0 = rt * kRowTile, r1 = std::min(w.rows, r0 + kRowTile);
    for (int t0 = 0; t0 < n_tokens; t0 += kTokTile) {
      const int t1 = std::min(n_tokens, t0 + kTokTile);
      for (int64_t r = r0; r < r1; ++r)
        for (int t = t0; t < t1; ++t)
          y[static_cast<int64_t>(t) * w.rows + r] =
              dot_row(w, r, x + static_cast<int64_t>(t) * w.cols, gemm_order != nullptr && gemm_order[t] != 0);
    }
  }
}

void dequantize_row(const WeightView& w, int64_t r, float* out) {
  const auto* row = static_cast<const uint8_t*>(w.data) + r * w.row_bytes;
  switch (w.type) {
    case GgmlType::F32: std::memcpy(out, row, w.cols * sizeof(float)); break;
    case GgmlType::F16:
      for (int64_t i = 0; i < w.cols; ++i) out[i] = fp16_to_fp32(reinterpret_cast<const uint16_t*>(row)[i]);
      break;
    case GgmlType::BF16:
      for (int64_t i = 0; i < w.cols; ++i) out[i] = bf16_to_fp32(reinterpret_cast<const uint16_t*>(row)[i]);
      break;
    default: std::memset(out, 0, w.cols * sizeof(float)); break;
  }
}

}  // namespace pdserve::kernels
