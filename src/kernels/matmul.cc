#include "kernels/matmul.h"

#include <immintrin.h>

#include <cstring>

#include "base/fp16.h"

namespace pdserve::kernels {

namespace {

using gguf::GgmlType;

// Dot products with a fixed reduction order: 16 lanes (or 8 with AVX2) accumulated over
// the row in index order, then a fixed-order horizontal sum. The same function serves
// every batch size, which is what makes matmul batch invariant.

inline float hsum16(const float* acc) {
  float s = 0.f;
  for (int i = 0; i < 16; ++i) s += acc[i];
  return s;
}

float dot_f32(const float* w, const float* x, int64_t n) {
#if defined(__AVX512F__)
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(w + i), _mm512_loadu_ps(x + i), acc);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, acc);
  float s = hsum16(lanes);
  for (; i < n; ++i) s += w[i] * x[i];
  return s;
#else
  float lanes[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) lanes[j] += w[i + j] * x[i + j];
  float s = hsum16(lanes);
  for (; i < n; ++i) s += w[i] * x[i];
  return s;
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

float dot_row(const WeightView& w, int64_t r, const float* x) {
  const auto* row = static_cast<const uint8_t*>(w.data) + r * w.row_bytes;
  switch (w.type) {
    case GgmlType::F32: return dot_f32(reinterpret_cast<const float*>(row), x, w.cols);
    case GgmlType::F16: return dot_f16(reinterpret_cast<const uint16_t*>(row), x, w.cols);
    case GgmlType::BF16: return dot_bf16(reinterpret_cast<const uint16_t*>(row), x, w.cols);
    default: return 0.f;
  }
}

}  // namespace

bool matmul_supports(GgmlType type) {
  return type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16;
}

void matmul(const WeightView& w, const float* x, int n_tokens, float* y) {
  constexpr int64_t kRowTile = 16;
  constexpr int kTokTile = 8;
  const int64_t n_row_tiles = (w.rows + kRowTile - 1) / kRowTile;
#pragma omp parallel for schedule(static)
  for (int64_t rt = 0; rt < n_row_tiles; ++rt) {
    const int64_t r0 = rt * kRowTile, r1 = std::min(w.rows, r0 + kRowTile);
    for (int t0 = 0; t0 < n_tokens; t0 += kTokTile) {
      const int t1 = std::min(n_tokens, t0 + kTokTile);
      for (int64_t r = r0; r < r1; ++r)
        for (int t = t0; t < t1; ++t) y[static_cast<int64_t>(t) * w.rows + r] = dot_row(w, r, x + static_cast<int64_t>(t) * w.cols);
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
