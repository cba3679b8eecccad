// AVX-512 VNNI row kernels of Q5_K and Q6_K in ggml's orders (quants.h vec_dot_scalar):
//  * kVecDot (decode; Q6_K always): per (row, token) 8 float lanes, acc[k] =
//    fma(d_a*d_w, lane_k, acc[k]) per super-block, lane_k = Σ_c sc · Σ q·a over elements
//    32c+4k .. 32c+4k+3 (Q5_K: sc = chunk c's scale; Q6_K: sub-block 2c + ⌊k/4⌋'s, and
//    lane_k −= 32·(sc_2k·bsum_2k + sc_2k+1·bsum_2k+1) for q − 32); Q5_K's mins term
//    summs = fma(−d_a*dmin, Σ_j m_j·bsum32_j, summs); result hsum_float_8(acc) (+ summs);
//  * kTiled (Q5_K, micro-batches of ≥ 8 tokens): per super-block
//    r = (float)(Σ_j sc_j·Σ(q·a)_j)·d, r = fma(−dmin, (float)Σ_j m_j·bsum32_j, r),
//    acc = fma(r, d_a, acc).
// 16 rows at a time (RowTile: transposed on the fly; Tiles16: as laid out at load, see
// weight_layout.h), so int32 lane r of every vector is row r: VPDPBUSD gives the 16 rows'
// exact 4-element sums q·a against a token's broadcast dword, and the float steps run on 16
// rows per instruction. In kVecDot the 4-element sums of chunks 2p and 2p + 1 (each
// |Σ| ≤ 4·63·128 < 2^15) are packed as the two int16 halves of a dword and meet their two
// scales in one VPDPWSSD, so the 8 lanes stay apart (one VPDPWSSD per two VPDPBUSD: the
// multiply ports run VPDPBUSD, VPDPWSSD and FMA alike); Q6_K's q − 32 is one more VPDPWSSD,
// of the −32-scaled scale pairs and the 16-value sums. Tokens go in tiles of up to 8
// (kVecDot) or 16 (kTiled) over each 16-row tile.
#include <algorithm>
#include <array>
#include <type_traits>
#include <utility>

#include "kernels/cpu_features.h"
#include "kernels/qgemm_avx512.h"

namespace pdserve::kernels::avx512 {
namespace {

using gguf::GgmlType;

constexpr int kMaxTok = 16, kMaxVecDotTok = 8;

template <GgmlType T>
constexpr int64_t kBlock = T == GgmlType::Q5_K ? sizeof(BlockQ5_K) : sizeof(BlockQ6_K);
// The slices (16 bytes of a block) that hold quants: Q5_K qh 1..2, qs 3..10; Q6_K ql 0..7,
// qh 8..11 (then scales, slice 12, and d at byte 208).
template <GgmlType T>
constexpr int kFirstQuantSlice = T == GgmlType::Q5_K ? 1 : 0;
template <GgmlType T>
constexpr int kQuantSlices = T == GgmlType::Q5_K ? 10 : 12;
// A block's stride in the slices' addressing (Src::slice): Q6_K's blocks in a Tiles16 tile
// are its 13 slices, 16 · 208 bytes (weight_layout.h).
template <GgmlType T, class Src>
constexpr int64_t kSliceBlock = T == GgmlType::Q6_K && std::is_same_v<Src, Tiles16> ? 208 : kBlock<T>;
static_assert(offsetof(BlockQ5_K, qh) == 16 && offsetof(BlockQ5_K, qs) == 48);
static_assert(offsetof(BlockQ6_K, qh) == 128 && offsetof(BlockQ6_K, scales) == 192 && offsetof(BlockQ6_K, d) == 208);

/// Dword r = lo's low int16 of dword r | hi's low int16 of dword r << 16: one VPERMT2W
/// (measured 1.07-1.10x over a shift and a VPTERNLOGD in the kVecDot tile).
inline __m512i pack_low_words(__m512i lo, __m512i hi) {
  // word 2r: word 2r of lo (index 2r); word 2r + 1: word 2r of hi (index 32 + 2r)
  const __m512i idx = _mm512_set_epi16(62, 30, 60, 28, 58, 26, 56, 24, 54, 22, 52, 20, 50, 18, 48, 16,  //
                                       46, 14, 44, 12, 42, 10, 40, 8, 38, 6, 36, 4, 34, 2, 32, 0);
  return _mm512_permutex2var_epi16(lo, idx, hi);
}

/// A super-block's scales for 16 rows (int32 lane r = row r).
struct RowScales {
  __m512 d, dmin;    // dmin: Q5_K
  __m512i sc[16];    // the scale as int32 (int16 in the low half for Q6_K): Q5_K chunk c, Q6_K sub-block j
  __m512i pair[8];   // int16 pairs: Q5_K m_2p | m_2p+1 << 16 (p < 4); Q6_K −32·(sc_2k | sc_2k+1 << 16)
  // kVecDot: the VPDPWSSD operand of chunks 2p, 2p + 1 (int16 pair): Q5_K sc_2p | sc_2p+1 << 16
  // (h = 0 only); Q6_K, for dwords k with ⌊k/4⌋ = h, sc_4p+h | sc_4p+2+h << 16.
  __m512i cpair[2][4];
};

template <GgmlType T, class Src>
inline void load_scales(const Src& rt, int64_t i, int64_t nsb, RowScales* s) {
  constexpr int64_t bb = kSliceBlock<T, Src>;
  const __m512i ff = _mm512_set1_epi32(0xFF), lo16 = _mm512_set1_epi32(0xFFFF);
  __m512i hd[4];
  if constexpr (T == GgmlType::Q5_K) {
    // Header of 16 rows: dword 0 = d | dmin << 16, dwords 1..3 = scales[0..11].
    rt.slice(bb, i, 0, hd);
    s->d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(hd[0]));
    s->dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(hd[0], 16)));
    // get_scale_min_k4 on 16 rows (ggml's kmask form): byte j of sc03 / sc47 = scale j / j+4.
    const __m512i km1 = _mm512_set1_epi32(0x3f3f3f3f), km2 = _mm512_set1_epi32(0x0f0f0f0f), km3 = _mm512_set1_epi32(0x03030303);
    const __m512i sc03 = _mm512_and_si512(hd[1], km1), mn03 = _mm512_and_si512(hd[2], km1);
    const __m512i sc47 = _mm512_or_si512(_mm512_and_si512(hd[3], km2), _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(hd[1], 6), km3), 4));
    const __m512i mn47 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(hd[3], 4), km2),
                                         _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(hd[2], 6), km3), 4));
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) s->sc[c] = _mm512_and_si512(_mm512_srli_epi32(c < 4 ? sc03 : sc47, 8 * (c % 4)), ff);
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) s->cpair[0][p] = _mm512_or_si512(s->sc[2 * p], _mm512_slli_epi32(s->sc[2 * p + 1], 16));
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {
      const __m512i mns = p < 2 ? mn03 : mn47;
      const int sh = 16 * (p % 2);
      s->pair[p] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(mns, sh), ff),
                                   _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(mns, sh + 8), ff), 16));
    }
  } else {
    // Slice 12: dword m = the signed scales 4m .. 4m+3.
    rt.slice(bb, i, offsetof(BlockQ6_K, scales), hd);
    static_assert(std::is_same_v<Src, Tiles16>, "Q6_K row kernels read tiles only");
    s->d = rt.f16_at(16 * (nsb * bb + 2 * i));  // after all the blocks' slices
    __m512i s32[16];
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) {
      s32[j] = _mm512_srai_epi32(_mm512_slli_epi32(hd[j / 4], 24 - 8 * (j % 4)), 24);
      s->sc[j] = _mm512_and_si512(s32[j], lo16);
    }
    // −32·sc fits int16 (|sc| <= 128), so the q − 32 correction is one VPDPWSSD into the lane.
    const auto neg32 = [](__m512i x) { return _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(x, 5)); };
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k)
      s->pair[k] = _mm512_or_si512(_mm512_and_si512(neg32(s32[2 * k]), lo16), _mm512_slli_epi32(neg32(s32[2 * k + 1]), 16));
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h)
#pragma GCC unroll 4
      for (int p = 0; p < 4; ++p) s->cpair[h][p] = _mm512_or_si512(s->sc[4 * p + h], _mm512_slli_epi32(s32[4 * p + 2 + h], 16));
  }
}

/// Q5_K: Σ_j m_j·bsum32_j of the 16 rows against token a (exact int32).
inline __m512i q5k_mins_dot(const RowScales& s, const ActQ8K& a) {
  __m512i im = _mm512_setzero_si512();
#pragma GCC unroll 4
  for (int p = 0; p < 4; ++p) im = _mm512_dpwssd_epi32(im, s.pair[p], _mm512_set1_epi32(load_i32(a.bsum32 + 2 * p)));
  return im;
}

/// The unsigned weights of dword k (elements 32c+4k .. 32c+4k+3) of the 8 chunks c of 16
/// rows; line(slice, dword) gives a quant slice's dword.
template <GgmlType T, class Line>
inline void chunk_weights(const Line& line, int k, __m512i w[8]) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  if constexpr (T == GgmlType::Q5_K) {
    // Element 32c + l: nibble (c odd: high) of qs byte 32⌊c/2⌋ + l, bit 4 = bit c of qh[l].
    const __m512i qh = line(1 + k / 4, k % 4);
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {
      const __m512i qs = line(3 + 2 * p + k / 4, k % 4);
      w[2 * p] = add_bit4(_mm512_and_si512(qs, m4), qh, 2 * p);
      w[2 * p + 1] = add_bit4(_mm512_and_si512(_mm512_srli_epi16(qs, 4), m4), qh, 2 * p + 1);
    }
  } else {
    // Element 128h + 32s + l (chunk c = 4h + s): nibble (s ≥ 2: high) of ql[64h + 32(s&1) + l],
    // bits 4..5 = bits 2s..2s+1 of qh[32h + l].
    const __m512i m30 = _mm512_set1_epi8(0x30);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m512i qh = line(8 + 2 * h + k / 4, k % 4);
      const __m512i hi[4] = {_mm512_and_si512(_mm512_slli_epi16(qh, 4), m30), _mm512_and_si512(_mm512_slli_epi16(qh, 2), m30),
                             _mm512_and_si512(qh, m30), _mm512_and_si512(_mm512_srli_epi16(qh, 2), m30)};
#pragma GCC unroll 2
      for (int odd = 0; odd < 2; ++odd) {
        const __m512i ql = line(4 * h + 2 * odd + k / 4, k % 4);
        // (ql & 0x0F) | hi in one VPTERNLOGD (0xEA: (A & B) | C).
        w[4 * h + odd] = _mm512_ternarylogic_epi32(ql, m4, hi[odd], 0xEA);
        w[4 * h + odd + 2] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(ql, 4), m4, hi[odd + 2], 0xEA);
      }
    }
  }
}

/// kVecDot: one 16-row tile against TT tokens (ActQ8K rows).
template <GgmlType T, int TT, class Src>
void tile_vecdot(const Src& rt, const TilePrefetch& pf, const ActQ8K* const* at, int64_t nsb, float* y, int64_t ldy) {
  constexpr bool kQ5 = T == GgmlType::Q5_K;
  alignas(64) float acc[TT][8][16] = {}, summs[TT][16] = {};
  if constexpr (!kQ5)  // Q6_K's d: 32 bytes per super-block after all the blocks' slices (load_scales)
    for (int64_t o = 0; o < 32 * nsb; o += 64) _mm_prefetch(reinterpret_cast<const char*>(rt.tile + 16 * nsb * kSliceBlock<T, Src> + o), _MM_HINT_T0);
  for (int64_t i = 0; i < nsb; ++i) {
    pf.part(i);
    RowScales s;
    load_scales<T>(rt, i, nsb, &s);
    __m512 dd[TT];
#pragma GCC unroll 16
    for (int t = 0; t < TT; ++t) {
      const ActQ8K& a = at[t][i];
      dd[t] = _mm512_mul_ps(_mm512_set1_ps(a.d), s.d);
      if constexpr (kQ5) {
        const __m512 dm = _mm512_mul_ps(_mm512_set1_ps(-a.d), s.dmin);
        _mm512_store_ps(summs[t], _mm512_fmadd_ps(dm, _mm512_cvtepi32_ps(q5k_mins_dot(s, a)), _mm512_load_ps(summs[t])));
      }
    }
    // The quant slices' dwords (RowTile: transposed once per super-block into `staged`).
    constexpr bool kStage = std::is_same_v<Src, RowTile>;
    constexpr int first = kFirstQuantSlice<T>;
    alignas(64) __m512i staged[kStage ? 4 * kQuantSlices<T> : 1];
    if constexpr (kStage)
#pragma GCC unroll 16
      for (int sl = 0; sl < kQuantSlices<T>; ++sl) rt.slice(kSliceBlock<T, Src>, i, 16 * (first + sl), staged + 4 * sl);
    auto line = [&](int sl, int dw) {
      if constexpr (kStage) return staged[4 * (sl - first) + dw];
      else return rt.line(kSliceBlock<T, Src>, i, 16 * sl, dw);
    };
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      __m512i w[8];
      chunk_weights<T>(line, k, w);
#pragma GCC unroll 16
      for (int t = 0; t < TT; ++t) {
        const ActQ8K& a = at[t][i];
        // Chunks 2p and 2p + 1: their 4-value sums (|Σ| <= 4·63·128 < 2^15) as the two int16
        // halves of one VPDPWSSD operand against the pair of their scales.
        __m512i lane = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int p = 0; p < 4; ++p) {
          const __m512i s0 = dpbusd_bcast(_mm512_setzero_si512(), w[2 * p], a.qs + 64 * p + 4 * k);
          const __m512i s1 = dpbusd_bcast(_mm512_setzero_si512(), w[2 * p + 1], a.qs + 64 * p + 32 + 4 * k);
          const __m512i both = pack_low_words(s0, s1);
          lane = _mm512_dpwssd_epi32(lane, both, s.cpair[kQ5 ? 0 : k / 4][p]);
        }
        if constexpr (!kQ5)  // q − 32: lane += −32·sc_2k·bsum_2k − 32·sc_2k+1·bsum_2k+1
          lane = _mm512_dpwssd_epi32(lane, s.pair[k], _mm512_set1_epi32(load_i32(a.bsums + 2 * k)));
        _mm512_store_ps(acc[t][k], _mm512_fmadd_ps(dd[t], _mm512_cvtepi32_ps(lane), _mm512_load_ps(acc[t][k])));
      }
    }
  }
#pragma GCC unroll 16
  for (int t = 0; t < TT; ++t) {
    auto lane = [&](int k) { return _mm512_load_ps(acc[t][k]); };
    // hsum_float_8: ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)), then Q5_K's + summs.
    const __m512 r0 = _mm512_add_ps(lane(0), lane(4)), r1 = _mm512_add_ps(lane(1), lane(5));
    const __m512 r2 = _mm512_add_ps(lane(2), lane(6)), r3 = _mm512_add_ps(lane(3), lane(7));
    __m512 r = _mm512_add_ps(_mm512_add_ps(r0, r2), _mm512_add_ps(r1, r3));
    if constexpr (kQ5) r = _mm512_add_ps(r, _mm512_load_ps(summs[t]));
    _mm512_mask_storeu_ps(y + t * ldy, rt.mask, r);
  }
}

/// kTiled (Q5_K): one 16-row tile against TT tokens.
template <GgmlType T, int TT, class Src>
void tile_tiled(const Src& rt, const TilePrefetch& pf, const ActQ8K* const* at, int64_t nsb, float* y, int64_t ldy) {
  static_assert(T == GgmlType::Q5_K);
  constexpr int64_t kQsOff = offsetof(BlockQ5_K, qs), kQhOff = offsetof(BlockQ5_K, qh);
  __m512 acc[TT];
#pragma GCC unroll 16
  for (int t = 0; t < TT; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t i = 0; i < nsb; ++i) {
    pf.part(i);
    RowScales s;
    load_scales<T>(rt, i, nsb, &s);
    __m512i qh[8];
    rt.slice(kBlock<T>, i, kQhOff, qh);
    rt.slice(kBlock<T>, i, kQhOff + 16, qh + 4);
    __m512i s1[TT];
#pragma GCC unroll 16
    for (int t = 0; t < TT; ++t) s1[t] = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {  // chunks 2p, 2p + 1 share the qs bytes
      __m512i qs[8];
      rt.slice(kBlock<T>, i, kQsOff + 32 * p, qs);
      rt.slice(kBlock<T>, i, kQsOff + 32 * p + 16, qs + 4);
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const int c = 2 * p + h;
        __m512i w[8];
#pragma GCC unroll 8
        for (int k = 0; k < 8; ++k)
          w[k] = add_bit4(_mm512_and_si512(h ? _mm512_srli_epi16(qs[k], 4) : qs[k], _mm512_set1_epi8(0x0F)), qh[k], c);
#pragma GCC unroll 16
        for (int t = 0; t < TT; ++t) {
          const ActQ8K& a = at[t][i];
          // Two VPDPBUSD chains of 4 (the even and the odd dwords; the int32 sum is exact,
          // so any split gives its bits), so that their latency overlaps (in-cache GEMM
          // 1.10x on an Intel Xeon, 32 tokens, 1 thread).
          __m512i half[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
#pragma GCC unroll 8
          for (int k = 0; k < 8; ++k) half[k % 2] = dpbusd_bcast(half[k % 2], w[k], a.qs + 32 * c + 4 * k);
          s1[t] = _mm512_add_epi32(s1[t], _mm512_mullo_epi32(_mm512_add_epi32(half[0], half[1]), s.sc[c]));
        }
      }
    }
#pragma GCC unroll 16
    for (int t = 0; t < TT; ++t) {
      const ActQ8K& a = at[t][i];
      __m512 r = _mm512_mul_ps(_mm512_cvtepi32_ps(s1[t]), s.d);
      r = _mm512_fnmadd_ps(s.dmin, _mm512_cvtepi32_ps(q5k_mins_dot(s, a)), r);  // fma(−dmin, s2, r)
      acc[t] = _mm512_fmadd_ps(r, _mm512_set1_ps(a.d), acc[t]);
    }
  }
#pragma GCC unroll 16
  for (int t = 0; t < TT; ++t) _mm512_mask_storeu_ps(y + t * ldy, rt.mask, acc[t]);
}

template <class Src>
using TileFn = void (*)(const Src&, const TilePrefetch&, const ActQ8K* const*, int64_t, float*, int64_t);

template <GgmlType T, bool kVecDot, class Src, int... I>
constexpr auto tile_table(std::integer_sequence<int, I...>) {
  if constexpr (kVecDot) return std::array<TileFn<Src>, sizeof...(I)>{tile_vecdot<T, I + 1, Src>...};
  else return std::array<TileFn<Src>, sizeof...(I)>{tile_tiled<T, I + 1, Src>...};
}

// Src: RowTile (ggml's layout) or Tiles16 (then r0, r1 are multiples of 16).
template <GgmlType T, bool kVecDot, class Src>
void gemm(const WeightView& w, const uint8_t* act, int64_t act_stride, int n_tok, int64_t r0, int64_t r1, float* y, int64_t ldy,
          QOrder) {
  // kVecDot keeps 8 lanes per (row, token): tiles of up to 8 tokens, whose accumulators
  // and scales stay near the registers (Q6_K in L2, 32 tokens, 1 thread: 8-token tiles
  // 1.25x faster than 4, 16-token tiles slower than 8).
  constexpr int kTok = kVecDot ? kMaxVecDotTok : kMaxTok;
  static constexpr auto tiles = tile_table<T, kVecDot, Src>(std::make_integer_sequence<int, kTok>{});
  const int64_t nsb = w.cols / QK_K;
  int first = 0;  // tokens [0, first) went to the AMX tiles (same bits)
  if constexpr (!kVecDot && std::is_same_v<Src, Tiles16>)
    if (n_tok >= 16 && amx_enabled()) {
      first = n_tok / 16 * 16;
      q5k_tiled_gemm_amx(w, act, act_stride, first, r0, r1, y, ldy);
    }
  for (int t0 = first; t0 < n_tok; t0 += kTok) {
    const int tt = std::min(kTok, n_tok - t0);
    const ActQ8K* at[kMaxTok];
    for (int t = 0; t < tt; ++t) at[t] = reinterpret_cast<const ActQ8K*>(act + (t0 + t) * act_stride);
    for (int64_t r = r0; r < r1; r += 16)
      tiles[tt - 1](Src(w, r, r1), tile_prefetch<Src>(w, r, nsb, n_tok), at, nsb, y + t0 * ldy + r, ldy);
  }
}

// Q6_K: tiles only (on ggml's layout the on-the-fly transposition made it slower than the
// pair kernel: BM_MatmulStream/Q6_K 1,708 -> 3,083 us at 1 thread).
template <GgmlType T, bool kVecDot>
QKernel kernel(WeightLayout layout) {
  QKernel k;
  if (layout == WeightLayout::kTiles16) k.gemm = gemm<T, kVecDot, Tiles16>;
  else if constexpr (T == GgmlType::Q5_K) k.gemm = gemm<T, kVecDot, RowTile>;
  if (k.gemm) k.layout = layout;
  return k;
}

}  // namespace

QKernel kquant_row_kernel(GgmlType t, QOrder order, WeightLayout layout) {
  if (layout != WeightLayout::kRows && layout != WeightLayout::kTiles16) return {};
  if (t == GgmlType::Q5_K && order == QOrder::kVecDot) return kernel<GgmlType::Q5_K, true>(layout);
  if (t == GgmlType::Q5_K && order == QOrder::kTiled) return kernel<GgmlType::Q5_K, false>(layout);
  if (t == GgmlType::Q6_K && order == QOrder::kVecDot) return kernel<GgmlType::Q6_K, true>(layout);
  return {};
}

}  // namespace pdserve::kernels::avx512
