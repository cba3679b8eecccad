// AVX-512 VNNI pair kernels of the 32-blocks (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1) in ggml's
// vec_dot order (quants.h): per (row, token) 8 float lanes, acc[g] = fma(d_w*d_a, p_g,
// acc[g]) per block (Q4_1 / Q5_1: then fma(m_w*d_a, s4_g, acc[g])), then hsum_float_8.
//
// A 512-bit register holds one weight block twice, as unsigned bytes u = w + o (offset o:
// Q8_0 128, Q4_0 8, Q5_0 16, Q4_1 / Q5_1 0), and the same block of two tokens as signed bytes;
// VPDPBUSD started from −o·s4 (s4 = the group's activation sum) gives both tokens' exact
// p_g in its 16 lanes. Tiles of 4 rows × up to 3 token pairs (GEMV: 8 rows × 1 pair).
#include <algorithm>

#include "kernels/qgemm_avx512.h"
#include "kernels/quant_types.h"

namespace pdserve::kernels::avx512 {
namespace {

using gguf::GgmlType;

/// Packed activations of a token pair (t, t+1) and block b: t in the low 256 bits.
struct alignas(64) PairBlock {
  int8_t q[64];   // signed activations
  int32_t c[16];  // −o·s4 per group (Q4_1 / Q5_1: s4 as float bits)
  float d[16];    // d_a, 8 lanes per token
};
static_assert(sizeof(PairBlock) == 192);

int offset_of(GgmlType t) {
  switch (t) {
    case GgmlType::Q8_0: return 128;
    case GgmlType::Q4_0: return 8;
    case GgmlType::Q5_0: return 16;
    default: return 0;
  }
}

int64_t pack_bytes(const WeightView& w, QOrder, int n_tok) {
  return int64_t{(n_tok + 1) / 2} * (w.cols / 32) * static_cast<int64_t>(sizeof(PairBlock));
}

void pack(const WeightView& w, QOrder, const uint8_t* act, int64_t act_stride, int n_tok, int t_begin, int t_end,
          uint8_t* packed) {
  const int64_t nb = w.cols / 32;
  auto* out = reinterpret_cast<PairBlock*>(packed);
  const bool has_min = w.type == GgmlType::Q4_1 || w.type == GgmlType::Q5_1;
  const __m256i neg_o = _mm256_set1_epi32(-offset_of(w.type));
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int t = t_begin; t < t_end; ++t) {
    const auto* src = reinterpret_cast<const ActPairQ8*>(act + t * act_stride);
    const int h = t % 2;
    for (int64_t b = 0; b < nb; ++b) {
      PairBlock& o = out[(t / 2) * nb + b];
      const ActPairQ8& p = src[b / 2];
      const int hb = static_cast<int>(b % 2);
      _mm256_store_si256(reinterpret_cast<__m256i*>(o.q + 32 * h),
                         _mm256_xor_si256(_mm256_load_si256(reinterpret_cast<const __m256i*>(p.qu + 32 * hb)), flip));
      const __m256i s4 = _mm256_load_si256(reinterpret_cast<const __m256i*>(p.s4 + 8 * hb));
      const __m256i c = has_min ? _mm256_castps_si256(_mm256_cvtepi32_ps(s4)) : _mm256_mullo_epi32(s4, neg_o);
      _mm256_store_si256(reinterpret_cast<__m256i*>(o.c + 8 * h), c);
      _mm256_store_ps(o.d + 8 * h, _mm256_load_ps(p.d + 8 * hb));
    }
  }
  if (t_end == n_tok && n_tok % 2 == 1)  // the missing partner of the last token: zeros
    for (int64_t b = 0; b < nb; ++b) {
      PairBlock& o = out[(n_tok / 2) * nb + b];
      std::memset(o.q + 32, 0, 32);
      std::memset(o.c + 8, 0, 32);
      std::memset(o.d + 8, 0, 32);
    }
}

/// Block b of a row as unsigned bytes u = w + o, twice (elements 0..31 in each half);
/// its scale d (and Q4_1's / Q5_1's min m).
template <GgmlType T>
inline __m512i unpack(const uint8_t* row, int64_t b, float* d, float* m) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  if constexpr (T == GgmlType::Q8_0) {
    const uint8_t* x = row + b * sizeof(BlockQ8_0);
    *d = load_f16(x);
    const __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 2)));
    return _mm512_xor_si512(v, _mm512_set1_epi8(static_cast<char>(0x80)));
  } else {
    const uint8_t* x;
    if constexpr (T == GgmlType::Q4_0) {
      x = row + b * sizeof(BlockQ4_0);
      *d = load_f16(x);
      x += 2;
    } else if constexpr (T == GgmlType::Q4_1) {
      x = row + b * sizeof(BlockQ4_1);
      *d = load_f16(x);
      *m = load_f16(x + 2);
      x += 4;
    } else if constexpr (T == GgmlType::Q5_1) {
      x = row + b * sizeof(BlockQ5_1);
      *d = load_f16(x);
      *m = load_f16(x + 2);
      x += 8;
    } else {
      x = row + b * sizeof(BlockQ5_0);
      *d = load_f16(x);
      x += 6;
    }
    // 128-bit lanes [qs, qs >> 4, qs, qs >> 4] & 0x0F = elements [0..15, 16..31] twice.
    __m512i v = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x)));
    v = _mm512_and_si512(_mm512_mask_srli_epi16(v, 0xFF00FF00u, v, 4), m4);
    if constexpr (T == GgmlType::Q5_0 || T == GgmlType::Q5_1) {  // bit 4 of element j is bit j of qh
      const uint64_t qh = static_cast<uint32_t>(load_i32(x - 4));
      v = _mm512_mask_add_epi8(v, _cvtu64_mask64(qh | qh << 32), v, _mm512_set1_epi8(16));
    }
    return v;
  }
}

/// out[r][p] = the 16 float lanes (2 tokens × 8 groups) of rows rp[0..R) and token pairs
/// ap[0..P) (each pointing at the pair's block 0).
template <GgmlType T, int R, int P>
void tile(const uint8_t* const* rp, const TilePrefetch& pf, const PairBlock* const* ap, int64_t nb, __m512* out) {
  constexpr bool kMin = T == GgmlType::Q4_1 || T == GgmlType::Q5_1;  // c holds s4 for the min term
  __m512 acc[R][P];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p) acc[r][p] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    pf.part(b);
    __m512i wv[R];
    __m512 dw[R], mw[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      float d, m = 0.f;
      wv[r] = unpack<T>(rp[r], b, &d, &m);
      dw[r] = _mm512_set1_ps(d);
      mw[r] = _mm512_set1_ps(m);
    }
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p) {
      const PairBlock& a = ap[p][b];
      const __m512i av = _mm512_load_si512(a.q);
      const __m512i c = _mm512_load_si512(a.c);
      const __m512 da = _mm512_load_ps(a.d);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const __m512i s = _mm512_dpbusd_epi32(kMin ? _mm512_setzero_si512() : c, wv[r], av);
        acc[r][p] = _mm512_fmadd_ps(_mm512_mul_ps(dw[r], da), _mm512_cvtepi32_ps(s), acc[r][p]);
        if constexpr (kMin)
          acc[r][p] = _mm512_fmadd_ps(_mm512_mul_ps(mw[r], da), _mm512_castsi512_ps(c), acc[r][p]);
      }
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p) out[r * P + p] = acc[r][p];
}

template <GgmlType T, int R, int P>
void run_tile(const WeightView& w, const PairBlock* packed, int n_tok, int p0, int64_t rt, int64_t r1, float* y, int64_t ldy) {
  const auto* base = static_cast<const uint8_t*>(w.data);
  const int64_t nb = w.cols / 32;
  const uint8_t* rp[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) rp[r] = base + std::min(rt + r, r1 - 1) * w.row_bytes;
  const PairBlock* ap[P];
#pragma GCC unroll 16
  for (int p = 0; p < P; ++p) ap[p] = packed + (p0 + p) * nb;
  __m512 out[R * P];
  tile<T, R, P>(rp, TilePrefetch(w, rt + R, R, nb), ap, nb, out);
  alignas(64) float lanes[16];
  for (int r = 0; r < R && rt + r < r1; ++r)
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p) {
      _mm512_store_ps(lanes, out[r * P + p]);
#pragma GCC unroll 16
      for (int h = 0; h < 2; ++h) {
        const int t = 2 * (p0 + p) + h;
        if (t < n_tok) y[t * ldy + rt + r] = hsum_float_8(lanes + 8 * h);
      }
    }
}

template <GgmlType T>
void gemm(const WeightView& w, const uint8_t* act, int64_t, int n_tok, int64_t r0, int64_t r1, float* y, int64_t ldy, QOrder) {
  const auto* packed = reinterpret_cast<const PairBlock*>(act);
  const int n_pairs = (n_tok + 1) / 2;
  if (n_pairs == 1) {
    for (int64_t rt = r0; rt < r1; rt += 8) run_tile<T, 8, 1>(w, packed, n_tok, 0, rt, r1, y, ldy);
    return;
  }
  constexpr int P = 3;
  for (int p0 = 0; p0 < n_pairs; p0 += P) {
    const int np = std::min(P, n_pairs - p0);
    for (int64_t rt = r0; rt < r1; rt += 4) {
      if (np == 3) run_tile<T, 4, 3>(w, packed, n_tok, p0, rt, r1, y, ldy);
      else if (np == 2) run_tile<T, 4, 2>(w, packed, n_tok, p0, rt, r1, y, ldy);
      else run_tile<T, 4, 1>(w, packed, n_tok, p0, rt, r1, y, ldy);
    }
  }
}

}  // namespace

QKernel legacy_pair_kernel(GgmlType t) {
  QKernel k;
  switch (t) {
    case GgmlType::Q8_0: k.gemm = gemm<GgmlType::Q8_0>; break;
    case GgmlType::Q4_0: k.gemm = gemm<GgmlType::Q4_0>; break;
    case GgmlType::Q4_1: k.gemm = gemm<GgmlType::Q4_1>; break;
    case GgmlType::Q5_0: k.gemm = gemm<GgmlType::Q5_0>; break;
    case GgmlType::Q5_1: k.gemm = gemm<GgmlType::Q5_1>; break;
    default: return k;
  }
  k.pack = pack;
  k.pack_bytes = pack_bytes;
  k.pack_align = 2;
  return k;
}

}  // namespace pdserve::kernels::avx512
