// swiglu's 16-wide silu chunks with AVX2 + FMA: the AVX-512 ggml_v_expf / ggml_v_silu
// (ops_avx512.cc) on 8-lane halves, operation by operation — _mm512_scalef_ps(j, n) as two
// multiplies by powers of two (the first exact, the second rounding once) — so the result
// is that path's, bit for bit (not ggml's own AVX2 v_expf, which rounds differently).
#include <immintrin.h>

#include <cmath>

#include "kernels/ops_simd.h"

namespace pdserve::kernels::avx2 {
namespace {

// 2^k for int32 lanes k in [-126, 127].
inline __m256 pow2i(__m256i k) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k, _mm256_set1_epi32(127)), 23)); }

inline __m256 v_expf(__m256 x) {
  const __m256 r = _mm256_set1_ps(0x1.8p23f);
  const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r);
  const __m256 n = _mm256_sub_ps(z, r);
  const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f),
                                    _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
  const __m256 d = _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), n), _mm256_set1_ps(192), _CMP_GT_OQ);
  const __m256 u = _mm256_mul_ps(b, b);
  const __m256 j = _mm256_fmadd_ps(
      _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), u,
                      _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f))),
      u, _mm256_fmadd_ps(_mm256_set1_ps(0x1.ffffecp-1f), b, _mm256_set1_ps(1.0f)));
  // scalef(j, n) for |n| <= 192 (other lanes are replaced below; NaN lanes stay NaN via j).
  const __m256i k = _mm256_cvttps_epi32(n);
  const __m256i k1 = _mm256_srai_epi32(k, 1);
  const __m256 res = _mm256_mul_ps(_mm256_mul_ps(j, pow2i(k1)), pow2i(_mm256_sub_epi32(k, k1)));
  if (_mm256_movemask_ps(d) == 0) return res;
  const __m256 alt = _mm256_blendv_ps(_mm256_set1_ps(INFINITY), _mm256_setzero_ps(), _mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ));
  return _mm256_blendv_ps(res, alt, d);
}

inline __m256 v_silu(__m256 x) {
  const __m256 neg_x = _mm256_sub_ps(_mm256_setzero_ps(), x);
  return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1), v_expf(neg_x)));
}

}  // namespace

void swiglu_silu_chunks(float* gate, const float* up, int n) {
  for (int i = 0; i + 8 <= n; i += 8)
    _mm256_storeu_ps(gate + i, _mm256_mul_ps(v_silu(_mm256_loadu_ps(gate + i)), _mm256_loadu_ps(up + i)));
}

}  // namespace pdserve::kernels::avx2
