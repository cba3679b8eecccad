// AVX-512 VNNI pair kernels of the K-quants Q4_K and Q6_K in ggml's vec_dot order
// (quants.h): per super-block 8 exact int32 lanes, lane k = Σ_c scale · Σ q·a over
// elements 32c+4k .. 32c+4k+3; acc[k] = fma(d_a*d_w, lane_k, acc[k]); hsum_float_8; plus
// the Q4_K mins term (4 lanes). (Q5_K has row kernels: qgemm_avx512_krows.inc.)
//
// A 512-bit register holds one 32-value chunk of a row twice (unsigned q) and the same
// chunk of two tokens (signed); VPMADDUBSW (pairs, exact here) then VPDPWSSD with the
// chunk's scale accumulate both tokens' lanes k directly (Q6_K: unsigned q, then lane k
// minus 32·(sc_2k·bsum_2k + sc_2k+1·bsum_2k+1) for q − 32). Tiles of 4 rows × up to 4
// token pairs.
#include <algorithm>

#include "kernels/qgemm_avx512.h"
#include "kernels/quant_types.h"

namespace pdserve::kernels::avx512 {
namespace {

using gguf::GgmlType;

/// Packed activations of a token pair (t, t+1) and super-block i: t in the low halves.
struct alignas(64) PairSuper {
  int8_t q[8][64];  // chunk c of t | chunk c of t+1
  float d[16];      // d_a, 8 lanes per token
  float nd[8];      // −d_a, 4 lanes per token
  int16_t bs[16];   // bsum32 of t | of t+1
};
static_assert(sizeof(PairSuper) == 640);
/// Q6_K only, after each PairSuper: the 16-value sums of t | of t+1.
struct alignas(64) PairBs16 {
  int16_t bs16[32];
};

int64_t record_bytes(GgmlType t) {
  return static_cast<int64_t>(sizeof(PairSuper)) + (t == GgmlType::Q6_K ? static_cast<int64_t>(sizeof(PairBs16)) : 0);
}

int64_t pack_bytes(const WeightView& w, QOrder, int n_tok) {
  return int64_t{(n_tok + 1) / 2} * (w.cols / QK_K) * record_bytes(w.type);
}

void pack(const WeightView& w, QOrder, const uint8_t* act, int64_t act_stride, int n_tok, int t_begin, int t_end,
          uint8_t* packed) {
  const int64_t nsb = w.cols / QK_K, rec = record_bytes(w.type);
  const bool q6 = w.type == GgmlType::Q6_K;
  for (int t = t_begin; t < t_end; ++t) {
    const auto* src = reinterpret_cast<const ActQ8K*>(act + t * act_stride);
    const int h = t % 2;
    for (int64_t i = 0; i < nsb; ++i) {
      auto& o = *reinterpret_cast<PairSuper*>(packed + ((t / 2) * nsb + i) * rec);
      const ActQ8K& a = src[i];
#pragma GCC unroll 16
      for (int c = 0; c < 8; ++c)
        _mm256_store_si256(reinterpret_cast<__m256i*>(o.q[c] + 32 * h), _mm256_load_si256(reinterpret_cast<const __m256i*>(a.qs + 32 * c)));
      _mm256_store_ps(o.d + 8 * h, _mm256_set1_ps(a.d));
      _mm_store_ps(o.nd + 4 * h, _mm_set1_ps(-a.d));
      _mm_store_si128(reinterpret_cast<__m128i*>(o.bs + 8 * h), _mm_loadu_si128(reinterpret_cast<const __m128i*>(a.bsum32)));
      if (q6)
        _mm256_store_si256(reinterpret_cast<__m256i*>(reinterpret_cast<PairBs16*>(&o + 1)->bs16 + 16 * h),
                           _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.bsums)));
    }
  }
  if (t_end == n_tok && n_tok % 2 == 1)  // the missing partner of the last token: zeros
    for (int64_t i = 0; i < nsb; ++i) {
      uint8_t* o = packed + ((n_tok / 2) * nsb + i) * rec;
      auto& ps = *reinterpret_cast<PairSuper*>(o);
#pragma GCC unroll 16
      for (int c = 0; c < 8; ++c) std::memset(ps.q[c] + 32, 0, 32);
      std::memset(ps.d + 8, 0, 32);
      std::memset(ps.nd + 4, 0, 16);
      std::memset(ps.bs + 8, 0, 16);
      if (q6) std::memset(reinterpret_cast<PairBs16*>(&ps + 1)->bs16 + 16, 0, 32);
    }
}

/// A row's super-block: scales as VPDPWSSD operands, d, dmin, mins.
struct SuperScales {
  __m512i sc16;     // Q6_K: the 16 scales as int16 in the low 256 bits
  int32_t scw[8];   // Q4_K: scale of chunk c in both int16 halves
  __m256i mn;       // Q4_K: the 8 mins as int16, twice
  float d, dmin;
};

template <GgmlType T>
inline void load_scales(const uint8_t* blk, SuperScales* s) {
  if constexpr (T == GgmlType::Q6_K) {
    const auto* x = reinterpret_cast<const BlockQ6_K*>(blk);
    s->d = load_f16(&x->d);
    s->sc16 = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x->scales))));
  } else {
    const uint8_t* scales = blk + 4;  // Q4_K: d, dmin, scales[12]
    s->d = load_f16(blk);
    s->dmin = load_f16(blk + 2);
    alignas(16) int16_t mn[8];
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      get_scale_min_k4(j, scales, &sc, &m);
      s->scw[j] = sc * 0x10001;
      mn[j] = m;
    }
    const __m128i m8 = _mm_load_si128(reinterpret_cast<const __m128i*>(mn));
    s->mn = _mm256_set_m128i(m8, m8);
  }
}

/// VPDPWSSD scale operand of chunk c.
template <GgmlType T>
inline __m512i chunk_scale(const SuperScales& s, int c) {
  if constexpr (T == GgmlType::Q6_K) {
    // int16 lanes: sc[2c] × 8, sc[2c+1] × 8, in both 256-bit halves.
    const __m512i idx = _mm512_set_epi64(0x0001000100010001LL * (2 * c + 1), 0x0001000100010001LL * (2 * c + 1),
                                         0x0001000100010001LL * (2 * c), 0x0001000100010001LL * (2 * c),
                                         0x0001000100010001LL * (2 * c + 1), 0x0001000100010001LL * (2 * c + 1),
                                         0x0001000100010001LL * (2 * c), 0x0001000100010001LL * (2 * c));
    return _mm512_permutexvar_epi16(idx, s.sc16);
  } else {
    return _mm512_set1_epi32(s.scw[c]);
  }
}

/// The 32 bytes at pa in the low half and those at pb in the high half (pa == pb: one
/// broadcast load).
inline __m512i load_halves(const uint8_t* pa, const uint8_t* pb) {
  const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pa));
  if (pa == pb) return _mm512_broadcast_i64x4(a);
  return _mm512_inserti64x4(_mm512_castsi256_si512(a), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb)), 1);
}

/// Chunk c (elements 32c .. 32c+31) of a super-block as unsigned q: block ba's in the low
/// half, bb's in the high half (the same block twice for the token-pair tiles).
template <GgmlType T>
inline __m512i unpack_chunk(const uint8_t* ba, const uint8_t* bb, int c) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  if constexpr (T == GgmlType::Q6_K) {
    const int h = c / 4, s = c % 4;
    const int64_t lo_off = offsetof(BlockQ6_K, ql) + 64 * h + 32 * (s & 1), hi_off = offsetof(BlockQ6_K, qh) + 32 * h;
    __m512i lo = load_halves(ba + lo_off, bb + lo_off);
    if (s >= 2) lo = _mm512_srli_epi16(lo, 4);
    lo = _mm512_and_si512(lo, m4);
    const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(load_halves(ba + hi_off, bb + hi_off), 2 * s), _mm512_set1_epi8(3));
    return _mm512_or_si512(lo, _mm512_slli_epi16(hi, 4));
  } else {
    const int64_t qs = offsetof(BlockQ4_K, qs) + 32 * (c / 2);
    __m512i v = load_halves(ba + qs, bb + qs);
    if (c & 1) v = _mm512_srli_epi16(v, 4);
    v = _mm512_and_si512(v, m4);
    return v;
  }
}

template <GgmlType T>
constexpr int64_t kBlockBytes = T == GgmlType::Q4_K ? sizeof(BlockQ4_K) : sizeof(BlockQ6_K);

/// res[(r * P + p) * 2 + h] = dot of row rp[r] with token h of pair ap[p].
template <GgmlType T, int R, int P>
void tile(const uint8_t* const* rp, const TilePrefetch& pf, const uint8_t* const* ap, int64_t nsb, float* res) {
  constexpr int64_t rec = T == GgmlType::Q6_K ? sizeof(PairSuper) + sizeof(PairBs16) : sizeof(PairSuper);
  alignas(64) float acc[R][P][16] = {};
  alignas(32) float accm[R][P][8] = {};
  for (int64_t i = 0; i < nsb; ++i) {
    pf.part(i);
    SuperScales sc[R];
    alignas(64) __m512i scv[R][8];  // VPDPWSSD scale operand per row and chunk (memory operands)
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      load_scales<T>(rp[r] + i * kBlockBytes<T>, &sc[r]);
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) scv[r][c] = chunk_scale<T>(sc[r], c);
    }
    __m512i lane[R][P];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
      for (int p = 0; p < P; ++p) lane[r][p] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      __m512i wv[R];
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) wv[r] = unpack_chunk<T>(rp[r] + i * kBlockBytes<T>, rp[r] + i * kBlockBytes<T>, c);
#pragma GCC unroll 16
      for (int p = 0; p < P; ++p) {
        const uint8_t* a = ap[p] + i * rec;
        const __m512i av = _mm512_load_si512(reinterpret_cast<const PairSuper*>(a)->q[c]);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) lane[r][p] = _mm512_dpwssd_epi32(lane[r][p], _mm512_maddubs_epi16(wv[r], av), scv[r][c]);
      }
    }
    if constexpr (T == GgmlType::Q6_K)  // q − 32: lane k −= 32·(sc_2k·bsum_2k + sc_2k+1·bsum_2k+1)
#pragma GCC unroll 16
      for (int p = 0; p < P; ++p) {
        const __m512i bs = _mm512_load_si512(reinterpret_cast<const PairBs16*>(ap[p] + i * rec + sizeof(PairSuper))->bs16);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r)
          lane[r][p] = _mm512_sub_epi32(lane[r][p], _mm512_slli_epi32(_mm512_madd_epi16(_mm512_broadcast_i64x4(_mm512_castsi512_si256(sc[r].sc16)), bs), 5));
      }
    for (int p = 0; p < P; ++p) {
      const auto& a = *reinterpret_cast<const PairSuper*>(ap[p] + i * rec);
      const __m512 da = _mm512_load_ps(a.d);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const __m512 dd = _mm512_mul_ps(da, _mm512_set1_ps(sc[r].d));
        _mm512_store_ps(acc[r][p], _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(lane[r][p]), _mm512_load_ps(acc[r][p])));
        if constexpr (T != GgmlType::Q6_K) {
          __m256i mm = _mm256_madd_epi16(sc[r].mn, _mm256_load_si256(reinterpret_cast<const __m256i*>(a.bs)));
          const __m256 dm = _mm256_mul_ps(_mm256_load_ps(a.nd), _mm256_set1_ps(sc[r].dmin));
          _mm256_store_ps(accm[r][p], _mm256_fmadd_ps(dm, _mm256_cvtepi32_ps(mm), _mm256_load_ps(accm[r][p])));
        }
      }
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p)
#pragma GCC unroll 16
      for (int h = 0; h < 2; ++h) {
        float v = hsum_float_8(acc[r][p] + 8 * h);
        const float* m = accm[r][p] + 4 * h;
        if constexpr (T == GgmlType::Q4_K) v += (m[0] + m[2]) + (m[1] + m[3]);
        res[(r * P + p) * 2 + h] = v;
      }
}

/// VPDPWSSD scale operand of chunk c for a row pair: a's in the low half, b's in the high.
template <GgmlType T>
inline __m512i pair_scale(const SuperScales& a, const SuperScales& b, int c) {
  if constexpr (T == GgmlType::Q6_K) {
    // int16 lanes: a.sc[2c] × 8, a.sc[2c+1] × 8, b.sc[2c] × 8, b.sc[2c+1] × 8.
    const int64_t lo = 0x0001000100010001LL * (2 * c), hi = 0x0001000100010001LL * (2 * c + 1);
    const __m512i idx = _mm512_set_epi64(hi + 0x0010001000100010LL, hi + 0x0010001000100010LL, lo + 0x0010001000100010LL,
                                         lo + 0x0010001000100010LL, hi, hi, lo, lo);
    const __m512i both = _mm512_inserti64x4(a.sc16, _mm512_castsi512_si256(b.sc16), 1);
    return _mm512_permutexvar_epi16(idx, both);
  } else {
    return _mm512_mask_blend_epi32(0xFF00, _mm512_set1_epi32(a.scw[c]), _mm512_set1_epi32(b.scw[c]));
  }
}

/// One token (the low half of token pair a0) against Q row pairs: rows rp[2q] and
/// rp[2q+1] share a register (low / high half) and the token's chunk is duplicated, so no
/// lane is padding. res[2q + h] = dot of row rp[2q+h]. Each row's operations are those of
/// tile() for that row.
template <GgmlType T, int Q>
void tile_row_pairs(const uint8_t* const* rp, const TilePrefetch& pf, const uint8_t* a0, int64_t nsb, float* res) {
  constexpr int64_t rec = T == GgmlType::Q6_K ? sizeof(PairSuper) + sizeof(PairBs16) : sizeof(PairSuper);
  alignas(64) float acc[Q][16] = {};
  alignas(32) float accm[Q][8] = {};
  for (int64_t i = 0; i < nsb; ++i) {
    pf.part(i);
    const uint8_t* a = a0 + i * rec;
    const auto& ps = *reinterpret_cast<const PairSuper*>(a);
    SuperScales sc[2 * Q];
#pragma GCC unroll 16
    for (int r = 0; r < 2 * Q; ++r) load_scales<T>(rp[r] + i * kBlockBytes<T>, &sc[r]);
    alignas(64) __m512i scv[Q][8];
#pragma GCC unroll 16
    for (int q = 0; q < Q; ++q)
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) scv[q][c] = pair_scale<T>(sc[2 * q], sc[2 * q + 1], c);
    __m512i lane[Q];
#pragma GCC unroll 16
    for (int q = 0; q < Q; ++q) lane[q] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      const __m512i av = _mm512_broadcast_i64x4(_mm256_load_si256(reinterpret_cast<const __m256i*>(ps.q[c])));
#pragma GCC unroll 16
      for (int q = 0; q < Q; ++q) {
        const __m512i pr = _mm512_maddubs_epi16(unpack_chunk<T>(rp[2 * q] + i * kBlockBytes<T>, rp[2 * q + 1] + i * kBlockBytes<T>, c), av);
        lane[q] = _mm512_dpwssd_epi32(lane[q], pr, scv[q][c]);
      }
    }
    if constexpr (T == GgmlType::Q6_K) {  // q − 32, as in tile()
      const __m512i bs = _mm512_broadcast_i64x4(_mm256_load_si256(reinterpret_cast<const __m256i*>(reinterpret_cast<const PairBs16*>(a + sizeof(PairSuper))->bs16)));
#pragma GCC unroll 16
      for (int q = 0; q < Q; ++q) {
        const __m512i sc2 = _mm512_inserti64x4(sc[2 * q].sc16, _mm512_castsi512_si256(sc[2 * q + 1].sc16), 1);
        lane[q] = _mm512_sub_epi32(lane[q], _mm512_slli_epi32(_mm512_madd_epi16(sc2, bs), 5));
      }
    }
    const __m512 da = _mm512_broadcast_f32x8(_mm256_load_ps(ps.d));
#pragma GCC unroll 16
    for (int q = 0; q < Q; ++q) {
      const __m512 dw = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(sc[2 * q].d), _mm512_set1_ps(sc[2 * q + 1].d));
      _mm512_store_ps(acc[q], _mm512_fmadd_ps(_mm512_mul_ps(da, dw), _mm512_cvtepi32_ps(lane[q]), _mm512_load_ps(acc[q])));
      if constexpr (T != GgmlType::Q6_K) {
        const __m256i bs = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(ps.bs)));
        const __m256i mn = _mm256_blend_epi32(sc[2 * q].mn, sc[2 * q + 1].mn, 0xF0);
        __m256i mm = _mm256_madd_epi16(mn, bs);
        const __m256 nd = _mm256_broadcast_ps(reinterpret_cast<const __m128*>(ps.nd));
        const __m256 dmin = _mm256_blend_ps(_mm256_set1_ps(sc[2 * q].dmin), _mm256_set1_ps(sc[2 * q + 1].dmin), 0xF0);
        _mm256_store_ps(accm[q], _mm256_fmadd_ps(_mm256_mul_ps(nd, dmin), _mm256_cvtepi32_ps(mm), _mm256_load_ps(accm[q])));
      }
    }
  }
#pragma GCC unroll 16
  for (int q = 0; q < Q; ++q)
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      float v = hsum_float_8(acc[q] + 8 * h);
      const float* m = accm[q] + 4 * h;
      if constexpr (T == GgmlType::Q4_K) v += (m[0] + m[2]) + (m[1] + m[3]);
      res[2 * q + h] = v;
    }
}

/// One token against rows [rt, rt + 2Q) ∩ [.., r1).
template <GgmlType T, int Q>
void run_row_pairs(const WeightView& w, const uint8_t* packed, int64_t rt, int64_t r1, float* y) {
  const auto* base = static_cast<const uint8_t*>(w.data);
  const int64_t nsb = w.cols / QK_K;
  const uint8_t* rp[2 * Q];
#pragma GCC unroll 16
  for (int r = 0; r < 2 * Q; ++r) rp[r] = base + std::min(rt + r, r1 - 1) * w.row_bytes;
  float res[2 * Q];
  tile_row_pairs<T, Q>(rp, TilePrefetch(w, rt + 2 * Q, 2 * Q, nsb), packed, nsb, res);
  for (int r = 0; r < 2 * Q && rt + r < r1; ++r) y[rt + r] = res[r];
}

template <GgmlType T, int R, int P>
void run_tile(const WeightView& w, const uint8_t* packed, int n_tok, int p0, int64_t rt, int64_t r1, float* y, int64_t ldy) {
  const auto* base = static_cast<const uint8_t*>(w.data);
  const int64_t nsb = w.cols / QK_K;
  const uint8_t* rp[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) rp[r] = base + std::min(rt + r, r1 - 1) * w.row_bytes;
  const uint8_t* ap[P];
#pragma GCC unroll 16
  for (int p = 0; p < P; ++p) ap[p] = packed + (p0 + p) * nsb * record_bytes(T);
  float res[R * P * 2];
  tile<T, R, P>(rp, TilePrefetch(w, rt + R, R, nsb), ap, nsb, res);
  for (int r = 0; r < R && rt + r < r1; ++r)
    for (int p = 0; p < P; ++p)
      for (int h = 0; h < 2; ++h) {
        const int t = 2 * (p0 + p) + h;
        if (t < n_tok) y[t * ldy + rt + r] = res[(r * P + p) * 2 + h];
      }
}

template <GgmlType T>
void gemm(const WeightView& w, const uint8_t* act, int64_t, int n_tok, int64_t r0, int64_t r1, float* y, int64_t ldy, QOrder) {
  const int n_pairs = (n_tok + 1) / 2;
  if (n_tok == 1) {  // one token: rows pair up in the registers instead
    for (int64_t rt = r0; rt < r1; rt += 8) run_row_pairs<T, 4>(w, act, rt, r1, y);
    return;
  }
  constexpr int P = 4;
  for (int p0 = 0; p0 < n_pairs; p0 += P) {
    const int np = std::min(P, n_pairs - p0);
    for (int64_t rt = r0; rt < r1; rt += 4) {
      switch (np) {
        case 4: run_tile<T, 4, 4>(w, act, n_tok, p0, rt, r1, y, ldy); break;
        case 3: run_tile<T, 4, 3>(w, act, n_tok, p0, rt, r1, y, ldy); break;
        case 2: run_tile<T, 4, 2>(w, act, n_tok, p0, rt, r1, y, ldy); break;
        default: run_tile<T, 4, 1>(w, act, n_tok, p0, rt, r1, y, ldy); break;
      }
    }
  }
}

}  // namespace

QKernel kquant_pair_kernel(GgmlType t) {
  QKernel k;
  switch (t) {
    case GgmlType::Q4_K: k.gemm = gemm<GgmlType::Q4_K>; break;
    case GgmlType::Q6_K: k.gemm = gemm<GgmlType::Q6_K>; break;
    default: return k;
  }
  k.pack = pack;
  k.pack_bytes = pack_bytes;
  k.pack_align = 2;
  return k;
}

}  // namespace pdserve::kernels::avx512
