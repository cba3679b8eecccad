// quants.h quantize_act_q8_k and quantize_act_q8_0 with AVX-512 F/BW: the same bytes as the
// scalar paths (quant_kquants.cc quantize_act_q8_k_scalar, ggml's quantize_row_q8_K_ref;
// quant_legacy.cc quantize_act_q8_0_scalar, ggml's x86 quantize_row_q8_0).
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "base/fp16.h"
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
  // The first value whose |x| equals amax (the scalar path's search, 16 values a compare).
  int j = 0;
  const __m512 vamax = _mm512_set1_ps(amax);
  for (int c = 0; c < QK_K / 16; ++c) {
    const __mmask16 eq = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(x + 16 * c)), vamax, _CMP_EQ_OQ);
    if (eq) {
      j = 16 * c + __builtin_ctz(eq);
      break;
    }
  }
  const float iscale = -127.f / x[j];
  const __m512 vs = _mm512_set1_ps(iscale);
  const __m512i v127 = _mm512_set1_epi32(127);
  for (int c = 0; c < QK_K / 16; ++c) {
    const __m512i q = _mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + 16 * c), vs)), v127);
    const __m128i q8 = _mm512_cvtepi32_epi8(q);  // the stored bytes, as the scalar path's int8 stores
    _mm_storeu_si128(reinterpret_cast<__m128i*>(a.qs + 16 * c), q8);
    // The sum of the stored bytes (the scalar path's), not of q: with max below 127/FLT_MAX,
    // iscale is −inf and q holds INT_MIN, whose int32 sum would overflow. PSADBW sums the
    // bytes + 128 in two halves of 8: Σ = lo + hi − 16·128.
    const __m128i sad = _mm_sad_epu8(_mm_xor_si128(q8, _mm_set1_epi8(static_cast<char>(0x80))), _mm_setzero_si128());
    a.bsums[c] = static_cast<int16_t>(_mm_cvtsi128_si32(_mm_add_epi32(sad, _mm_unpackhi_epi64(sad, sad))) - 16 * 128);
  }
  for (int k = 0; k < 8; ++k) a.bsum32[k] = a.bsums[2 * k] + a.bsums[2 * k + 1];
  a.d = 1 / iscale;
}

// quantize_block_q8_0_x86 on one 32-value block: amax, id = 127 / amax (0 for an all-zero
// block), q = RNE(x·id) (one rounded product; MXCSR's default rounding, as nearbyint), then
// ActPairQ8's half h: q + 128, the 4-value sums of q, d = amax / 127 through f16.
void quantize_act_q8_0_block(const float* x, ActPairQ8& p, int h) {
  const __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
  const float id = amax != 0.f ? 127.f / amax : 0.f;
  const __m512 vid = _mm512_set1_ps(id);
  const __m128i q0 = _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(x0, vid)));  // |q| <= 127
  const __m128i q1 = _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(x1, vid)));
  const __m256i q = _mm256_set_m128i(q1, q0);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p.qu + 32 * h), _mm256_xor_si256(q, _mm256_set1_epi8(static_cast<char>(0x80))));
  const __m256i s4 = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q), _mm256_set1_epi16(1));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p.s4 + 8 * h), s4);
  _mm256_storeu_ps(p.d + 8 * h, _mm256_set1_ps(fp16_to_fp32(fp32_to_fp16(amax / 127.f))));
}
}  // namespace

void quantize_act_q8_0(const float* x, void* dst, int64_t n) {
  const int64_t nb = n / 32;
  auto* pairs = static_cast<ActPairQ8*>(dst);
  for (int64_t b = 0; b < nb; ++b) quantize_act_q8_0_block(x + 32 * b, pairs[b / 2], static_cast<int>(b % 2));
  if (nb % 2 == 1) {  // padding block of an odd count (as the scalar path)
    ActPairQ8& p = pairs[nb / 2];
    std::memset(p.qu + 32, 128, 32);
    std::memset(p.d + 8, 0, 32);
    std::memset(p.s4 + 8, 0, 32);
  }
}

void quantize_act_q8_k(const float* x, void* dst, int64_t n) {
  auto* a = static_cast<ActQ8K*>(dst);
  for (int64_t i = 0; i < n / QK_K; ++i) quantize_act_q8_k_block(x + i * QK_K, a[i]);
}

}  // namespace pdserve::kernels::avx512
