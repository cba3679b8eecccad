// quants.h quantize_act_q8_k with AVX-512 F/BW: the same bytes as the scalar path
// (quant_kquants.cc quantize_act_q8_k_scalar, ggml's quantize_row_q8_K_ref).
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "kernels/quant_types.h"
#include "kernels/quants.h"

namespace pdserve::kernels::avx512 {
namespace {

// quantize_q8_k on one 256-value block with AVX-512, the same operations per value:
// amax, the sign of the first value reaching it, iscale = -127/max, q = min(127, RNE(iscale·x))
// (one rounded product, as ggml's unfused reference), 16-value sums, d = 1/iscale.
void quantize_act_q8_k_block(const float* x, ActQ8K& a) {
  __m512 vmax = _mm512_setzero_ps();
  for (int c = 0; c < QK_K / 16; ++c) vmax = _mm512_max_ps(vmax, _mm512_abs_ps(_mm512_loadu_ps(x + 16 * c)));
  const float amax = _mm512_reduce_max_ps(vmax);
  if (!(amax > 0.f)) {  // all zero (as the scalar path: d = 0, q = 0)
    std::memset(&a, 0, sizeof(a));
    return;
  }
  int j = 0;
  while (std::fabs(x[j]) != amax) ++j;
  const float iscale = -127.f / x[j];
  const __m512 vs = _mm512_set1_ps(iscale);
  const __m512i v127 = _mm512_set1_epi32(127);
  for (int c = 0; c < QK_K / 16; ++c) {
    const __m512i q = _mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + 16 * c), vs)), v127);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(a.qs + 16 * c), _mm512_cvtepi32_epi8(q));
    a.bsums[c] = static_cast<int16_t>(_mm512_reduce_add_epi32(q));
  }
  for (int k = 0; k < 8; ++k) a.bsum32[k] = a.bsums[2 * k] + a.bsums[2 * k + 1];
  a.d = 1 / iscale;
}
}  // namespace

void quantize_act_q8_k(const float* x, void* dst, int64_t n) {
  auto* a = static_cast<ActQ8K*>(dst);
  for (int64_t i = 0; i < n / QK_K; ++i) quantize_act_q8_k_block(x + i * QK_K, a[i]);
}

}  // namespace pdserve::kernels::avx512
