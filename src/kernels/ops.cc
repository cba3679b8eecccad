#include "kernels/ops.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

namespace pdserve::kernels {

void rms_norm(float* out, const float* x, const float* w, int n, float eps) {
  // ggml_compute_forward_rms_norm_f32 (+ the fused RMS_NORM+MUL): squares rounded to
  // float, summed in double; mean and scale in float; y = x * scale * w.
  double sum = 0.0;
  for (int i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  const float mean = static_cast<float>(sum / n);
  const float scale = 1.0f / std::sqrt(mean + eps);
  for (int i = 0; i < n; ++i) out[i] = x[i] * scale * w[i];
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

void rope(float* x, int head_dim, int rot_dim, int pos, float base, float freq_scale, bool neox) {
  float cs[1024];
  rope_cache(rot_dim, pos, base, freq_scale, cs);
  rope_apply(x, rot_dim, cs, neox);
}

#if defined(__AVX512F__) && defined(__AVX512DQ__)
namespace {
// ggml_v_expf / ggml_v_silu (ggml-cpu/vec.h, AVX-512 branch): the vectorized exp used
// by ggml_vec_swiglu_f32.
inline __m512 v_expf(__m512 x) {
  const __m512 r = _mm512_set1_ps(0x1.8p23f);
  const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), r);
  const __m512 n = _mm512_sub_ps(z, r);
  const __m512 b = _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.7f7d1cp-20f),
                                    _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e4p-1f), x));
  const __mmask16 d = _mm512_cmp_ps_mask(_mm512_abs_ps(n), _mm512_set1_ps(192), _CMP_GT_OQ);
  const __m512 u = _mm512_mul_ps(b, b);
  const __m512 j = _mm512_fmadd_ps(
      _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), b, _mm512_set1_ps(0x1.573e2ep-5f)), u,
                      _mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), b, _mm512_set1_ps(0x1.fffdb6p-2f))),
      u, _mm512_fmadd_ps(_mm512_set1_ps(0x1.ffffecp-1f), b, _mm512_set1_ps(1.0f)));
  const __m512 res = _mm512_scalef_ps(j, n);
  if (_mm512_kortestz(d, d)) return res;
  const __m512 zero = _mm512_setzero_ps();
  const __m512 alt = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(n, zero, _CMP_LE_OQ), _mm512_set1_ps(INFINITY), zero);
  return _mm512_mask_blend_ps(d, res, alt);
}
inline __m512 v_silu(__m512 x) {
  const __m512 neg_x = _mm512_sub_ps(_mm512_setzero_ps(), x);
  return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1), v_expf(neg_x)));
}
}  // namespace
#endif

void swiglu(float* gate, const float* up, int n) {
  // ggml_vec_swiglu_f32 (ggml-cpu/vec.cpp) on one row: ggml_v_silu (the polynomial exp
  // above) over 16-wide chunks from the start of the row, then x/(1+expf(-x)) on the last
  // n % 16 values. Called once per token row, so the result is batch invariant.
  int i = 0;
#if defined(__AVX512F__) && defined(__AVX512DQ__)
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(gate + i, _mm512_mul_ps(v_silu(_mm512_loadu_ps(gate + i)), _mm512_loadu_ps(up + i)));
#endif
  for (; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void add_inplace(float* out, const float* x, int n) {
  for (int i = 0; i < n; ++i) out[i] += x[i];
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
