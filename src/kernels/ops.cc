#include "kernels/ops.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "base/fp16.h"
#include "kernels/ops_simd.h"

namespace pdserve::kernels {
namespace {

// 2^k as a float, k in [-126, 127].
inline float pow2i(int32_t k) { return std::bit_cast<float>(static_cast<uint32_t>(k + 127) << 23); }

// One lane of ggml_v_expf (ggml-cpu/vec.h, AVX-512 branch), operation by operation as the
// AVX-512 and AVX2 versions (ops_avx512.cc, ops_avx2.cc) compute it. The multiply-adds are
// explicit: nothing else may be contracted.
float v_expf_lane(float x) {
  const float r = 0x1.8p23f;
  const float z = std::fma(x, 0x1.715476p+0f, r);
  const float n = z - r;  // round(x / ln 2)
  const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
  const float u = b * b;
  const float j = std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)), u,
                           std::fma(0x1.ffffecp-1f, b, 1.0f));
  if (std::isnan(n)) return j;
  if (std::fabs(n) > 192) return n <= 0 ? 0.f : INFINITY;
  // _mm512_scalef_ps(j, n) = j·2^n rounded once: j·2^⌊n/2⌋ is exact (normal), then one
  // rounding multiply by 2^(n − ⌊n/2⌋).
  const auto k = static_cast<int32_t>(n);
  const int32_t k1 = k >> 1;
  return j * pow2i(k1) * pow2i(k - k1);
}

// ggml_v_silu on one lane: x / (1 + v_expf(−x)).
inline float silu_v_expf(float x) { return x / (1.0f + v_expf_lane(-x)); }

// out[i] = x[i] * scale * w[i], in that order (out may be x). Vectorised by hand: at -O2
// GCC vectorises no loop whose count is unknown, and this one ran at ~1 cycle a value.
void scale_mul(float* out, const float* x, float scale, const float* w, int n) {
  int i = 0;
#if defined(__AVX2__)
  const __m256 s = _mm256_set1_ps(scale);
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), s), _mm256_loadu_ps(w + i)));
#endif
  for (; i < n; ++i) out[i] = x[i] * scale * w[i];
}

/// rms_norm's sums of squares of 8 rows (row r at x + r·n), each in its index order: the
/// squares rounded to float, added in double. With AVX2 the 8 sums are the lanes of two
/// double vectors and each 8 columns an 8×8 transpose of the squares (the scalar form's 8
/// chains take four scalar instructions a value).
void sumsq_rows8(const float* x, int n, double sum[8]) {
  int i = 0;
#if defined(__AVX2__)
  __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();  // rows 0..3, 4..7
  for (; i + 8 <= n; i += 8) {
    __m256 q[8];
    for (int r = 0; r < 8; ++r) {
      const __m256 v = _mm256_loadu_ps(x + static_cast<int64_t>(r) * n + i);
      q[r] = _mm256_mul_ps(v, v);
    }
    // q[r] = squares i..i+7 of row r → t[j] = square i + j of rows 0..7.
    const __m256 a0 = _mm256_unpacklo_ps(q[0], q[1]), a1 = _mm256_unpackhi_ps(q[0], q[1]);
    const __m256 a2 = _mm256_unpacklo_ps(q[2], q[3]), a3 = _mm256_unpackhi_ps(q[2], q[3]);
    const __m256 a4 = _mm256_unpacklo_ps(q[4], q[5]), a5 = _mm256_unpackhi_ps(q[4], q[5]);
    const __m256 a6 = _mm256_unpacklo_ps(q[6], q[7]), a7 = _mm256_unpackhi_ps(q[6], q[7]);
    const __m256 b0 = _mm256_shuffle_ps(a0, a2, 0x44), b1 = _mm256_shuffle_ps(a0, a2, 0xEE);
    const __m256 b2 = _mm256_shuffle_ps(a1, a3, 0x44), b3 = _mm256_shuffle_ps(a1, a3, 0xEE);
    const __m256 b4 = _mm256_shuffle_ps(a4, a6, 0x44), b5 = _mm256_shuffle_ps(a4, a6, 0xEE);
    const __m256 b6 = _mm256_shuffle_ps(a5, a7, 0x44), b7 = _mm256_shuffle_ps(a5, a7, 0xEE);
    const __m256 t[8] = {_mm256_permute2f128_ps(b0, b4, 0x20), _mm256_permute2f128_ps(b1, b5, 0x20),
                         _mm256_permute2f128_ps(b2, b6, 0x20), _mm256_permute2f128_ps(b3, b7, 0x20),
                         _mm256_permute2f128_ps(b0, b4, 0x31), _mm256_permute2f128_ps(b1, b5, 0x31),
                         _mm256_permute2f128_ps(b2, b6, 0x31), _mm256_permute2f128_ps(b3, b7, 0x31)};
    for (int j = 0; j < 8; ++j) {
      lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(t[j])));
      hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(t[j], 1)));
    }
  }
  _mm256_storeu_pd(sum, lo);
  _mm256_storeu_pd(sum + 4, hi);
#else
  for (int r = 0; r < 8; ++r) sum[r] = 0.0;
#endif
  for (; i < n; ++i)
    for (int r = 0; r < 8; ++r) {
      const float v = x[static_cast<int64_t>(r) * n + i];
      sum[r] += static_cast<double>(v * v);
    }
}

}  // namespace

void rms_norm(float* out, const float* x, const float* w, int n, float eps) {
  // ggml_compute_forward_rms_norm_f32 (+ the fused RMS_NORM+MUL): squares rounded to
  // float, summed in double; mean and scale in float; y = x * scale * w.
  double sum = 0.0;
  for (int i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  const float mean = static_cast<float>(sum / n);
  const float scale = 1.0f / std::sqrt(mean + eps);
  scale_mul(out, x, scale, w, n);
}

void rms_norm_rows(float* out, const float* x, const float* w, int rows, int n, float eps) {
  constexpr int kRows = 8;  // sums side by side (sumsq_rows8)
  int r0 = 0;
  for (; r0 + kRows <= rows; r0 += kRows) {
    const float* xr = x + static_cast<int64_t>(r0) * n;
    double sum[kRows];
    sumsq_rows8(xr, n, sum);
    for (int r = 0; r < kRows; ++r) {  // rms_norm's float steps
      const float mean = static_cast<float>(sum[r] / n);
      const float scale = 1.0f / std::sqrt(mean + eps);
      const float* xi = xr + static_cast<int64_t>(r) * n;
      float* o = out + static_cast<int64_t>(r0 + r) * n;
      scale_mul(o, xi, scale, w, n);
    }
  }
  for (; r0 < rows; ++r0) rms_norm(out + static_cast<int64_t>(r0) * n, x + static_cast<int64_t>(r0) * n, w, n, eps);
}

void rope_cache(int rot_dim, int pos, float base, float freq_scale, float* cs) {
  // theta_i = pos * base^(-2i/rot_dim), computed by repeated multiplication as ggml does.
  const int half = rot_dim / 2;
  const float theta_scale = std::pow(base, -2.0f / rot_dim);
  float theta = static_cast<float>(pos) * freq_scale;
  for (int i = 0; i < half; ++i, theta *= theta_scale) {
    cs[2 * i] = std::cos(theta);
    cs[2 * i + 1] = std::sin(theta);
  }
}

void rope_cache_factors(int rot_dim, int pos, float base, float freq_scale, const float* ff, float mscale, float* cs) {
  const int half = rot_dim / 2;
  const float theta_scale = std::pow(base, -2.0f / rot_dim);
  float theta = static_cast<float>(pos);
  for (int i = 0; i < half; ++i, theta *= theta_scale) {
    const float angle = freq_scale * (theta / (ff ? ff[i] : 1.0f));
    cs[2 * i] = std::cos(angle) * mscale;
    cs[2 * i + 1] = std::sin(angle) * mscale;
  }
}

void rope_apply(float* x, int rot_dim, const float* cs, bool neox) {
  const int half = rot_dim / 2;
  for (int i = 0; i < half; ++i) {
    const float c = cs[2 * i], s = cs[2 * i + 1];
    const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
    const float x0 = x[a], x1 = x[b];
    // x0·c − x1·s and x0·s + x1·c, each with one fused multiply-add (as GCC contracts
    // ggml's expressions on x86-64 with FMA).
    x[a] = std::fma(x0, c, -(x1 * s));
    x[b] = std::fma(x0, s, x1 * c);
  }
}

void swiglu(float* gate, const float* up, int n, Isa isa) {
  // ggml_vec_swiglu_f32 (ggml-cpu/vec.cpp) on one row: ggml_v_silu over 16-wide chunks
  // from the start of the row, then x/(1+expf(-x)) on the last n % 16 values. Called once
  // per token row, so the result is batch invariant.
  const int n_vec = n / 16 * 16;
  switch (resolve_isa(isa)) {
    case Isa::kAvx512Vnni: avx512::swiglu_silu_chunks(gate, up, n_vec); break;
    case Isa::kAvx2: avx2::swiglu_silu_chunks(gate, up, n_vec); break;
    default:
      for (int i = 0; i < n_vec; ++i) gate[i] = silu_v_expf(gate[i]) * up[i];
  }
  for (int i = n_vec; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

namespace {

// ggml_table_gelu_f16 (ggml_cpu_init): f16 GELU of every f16 value.
const uint16_t* gelu_table() {
  static const std::vector<uint16_t> table = [] {
    std::vector<uint16_t> t(1 << 16);
    constexpr float kCoefA = 0.044715f, kSqrt2OverPi = 0.79788456080286535587989211986876f;
    for (int i = 0; i < (1 << 16); ++i) {
      const float x = fp16_to_fp32(static_cast<uint16_t>(i));
      const float inner = kSqrt2OverPi * x * std::fma(kCoefA * x, x, 1.0f);
      t[i] = fp32_to_fp16(0.5f * x * (1.0f + tanh_cr(inner)));
    }
    return t;
  }();
  return table.data();
}

}  // namespace

void geglu(float* gate, const float* up, int n) {
  const uint16_t* table = gelu_table();
  for (int i = 0; i < n; ++i) {
    const float x = gate[i];
    if (x <= -10.0f) gate[i] = 0.0f;
    else if (x >= 10.0f) gate[i] = x * up[i];
    else gate[i] = fp16_to_fp32(table[fp32_to_fp16(x)]) * up[i];
  }
}

void softcap_inplace(float* x, int n, float cap) {
  const float inv = 1.0f / cap;
  for (int i = 0; i < n; ++i) x[i] = tanh_cr(x[i] * inv) * cap;
}

void add_inplace(float* out, const float* x, int n) {
  int i = 0;
#if defined(__AVX2__)
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_loadu_ps(out + i), _mm256_loadu_ps(x + i)));
#endif
  for (; i < n; ++i) out[i] += x[i];
}

void residual_rms_norm(float* x, float* p, const float* post_w, float* out, const float* w, int rows, int n, float eps) {
  constexpr int kGroup = 8;  // rms_norm_rows' rows side by side
  for (int r0 = 0; r0 < rows; r0 += kGroup) {
    const int g = std::min(kGroup, rows - r0);
    const int64_t off = static_cast<int64_t>(r0) * n;
    if (p) {
      if (post_w) rms_norm_rows(p + off, p + off, post_w, g, n, eps);
      add_inplace(x + off, p + off, g * n);
    }
    if (out) rms_norm_rows(out + off, x + off, w, g, n, eps);
  }
}

void log_softmax(const float* logits, float* out, int n) {
  float mx = logits[0];
  for (int i = 1; i < n; ++i) mx = std::max(mx, logits[i]);
  double sum = 0.0;
  for (int i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
  const double lse = mx + std::log(sum);
  for (int i = 0; i < n; ++i) out[i] = static_cast<float>(logits[i] - lse);
}

}  // namespace pdserve::kernels
