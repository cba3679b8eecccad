// swiglu's 16-wide silu chunks with AVX-512 F/DQ: ggml_v_expf / ggml_v_silu (ggml-cpu/vec.h,
// AVX-512 branch), the vectorised exp of ggml_vec_swiglu_f32.
#include <immintrin.h>

#include <cmath>

#include "kernels/ops_simd.h"

namespace pdserve::kernels::avx512 {
namespace {

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

void swiglu_silu_chunks(float* gate, const float* up, int n) {
  for (int i = 0; i + 16 <= n; i += 16)
    _mm512_storeu_ps(gate + i, _mm512_mul_ps(v_silu(_mm512_loadu_ps(gate + i)), _mm512_loadu_ps(up + i)));
}

}  // namespace pdserve::kernels::avx512
