// AVX-512 VNNI row kernels of llama.cpp's repacked orders (quants.h kRepackGemv /
// kRepackGemm), which keep one float accumulator per (row, token):
//  * Q4_0: acc = fma((float) Σ_32 w·a, d_w*d_a, acc) per block;
//  * Q4_K: acc = fma((float) Σ_j sc_j·Σ(q·a)_j, d_w*d_a, acc) and
//    acc_m = fma((float) Σ_j m_j·bsum32_j, dmin_w*d_a, acc_m) per super-block (GEMV) or
//    per 64 values (GEMM); result acc − acc_m.
// 16 rows are processed together, transposed on the fly (transpose16x16) so int32 lane r
// holds row r's 4 weights of each dword; a token's 4 activations are broadcast, and
// VPDPBUSD accumulates the exact block sum of all 16 rows at once. The float steps then
// run on 16 rows per instruction. Tokens go in tiles of up to 16 over each 16-row tile.
// Q4_0 and Q4_K in WeightLayout::kTiles16 (transposed once at load, weight_layout.h) skip
// the transposition: the same arithmetic on the bytes as they lie.
#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>
#include <utility>

#include "kernels/cpu_features.h"
#include "kernels/qgemm_avx512.h"
#include "kernels/quant_types.h"

namespace pdserve::kernels::avx512 {
namespace {

using gguf::GgmlType;

constexpr int kMaxTok = 16;

// ---- Q4_0 ----

/// Packed activations of one token and block: signed values, −8·Σ values, d_a.
struct alignas(16) Q40Block {
  int8_t q[32];
  int32_t neg_corr;
  float d;
  int32_t pad[2];
};
static_assert(sizeof(Q40Block) == kQ40Record && offsetof(Q40Block, d) == kQ40D);  // q40_gemm_amx reads these

int64_t q40_pack_bytes(const WeightView& w, QOrder, int n_tok) {
  return int64_t{n_tok} * (w.cols / 32) * static_cast<int64_t>(sizeof(Q40Block));
}

int64_t q40_tiles16_pack_bytes(const WeightView& w, QOrder o, int n_tok) {
  const int64_t nb = w.cols / 32;
  if (!amx_takes(n_tok)) return q40_pack_bytes(w, o, n_tok);
  return amx_copy_offset(nb * kQ40Record, n_tok) + n_tok / 16 * nb * kQ40AmxBlock;
}

void q40_pack(const WeightView& w, QOrder, const uint8_t* act, int64_t act_stride, int, int t_begin, int t_end, uint8_t* packed) {
  const int64_t nb = w.cols / 32;
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int t = t_begin; t < t_end; ++t) {
    const auto* src = reinterpret_cast<const ActPairQ8*>(act + t * act_stride);
    auto* out = reinterpret_cast<Q40Block*>(packed) + t * nb;
    for (int64_t b = 0; b < nb; ++b) {
      const ActPairQ8& p = src[b / 2];
      const int h = static_cast<int>(b % 2);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].q),
                          _mm256_xor_si256(_mm256_load_si256(reinterpret_cast<const __m256i*>(p.qu + 32 * h)), flip));
      int32_t s = 0;
      for (int g = 0; g < 8; ++g) s += p.s4[8 * h + g];
      out[b].neg_corr = -8 * s;  // weights enter VPDPBUSD as q + 8 (unsigned nibbles)
      out[b].d = p.d[8 * h];
      out[b].pad[0] = out[b].pad[1] = 0;
    }
  }
}

void q40_tiles16_pack(const WeightView& w, QOrder o, const uint8_t* act, int64_t act_stride, int n_tok, int t_begin, int t_end,
                      uint8_t* packed) {
  if (!amx_takes(n_tok)) return q40_pack(w, o, act, act_stride, n_tok, t_begin, t_end, packed);
  // Tokens [0, amx_end) only in the AMX copy (the AMX tiles take them all), the rest as records.
  const int amx_end = n_tok / 16 * 16;
  if (t_end > amx_end) q40_pack(w, o, act, act_stride, n_tok, std::max(t_begin, amx_end), t_end, packed);
  const int64_t nb = w.cols / 32;
  uint8_t* amx = packed + amx_copy_offset(nb * kQ40Record, n_tok);
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int t = t_begin; t < std::min(t_end, amx_end); ++t) {
    const auto* src = reinterpret_cast<const ActPairQ8*>(act + t * act_stride);
    for (int64_t b = 0; b < nb; ++b) {
      const ActPairQ8& p = src[b / 2];
      const int h = static_cast<int>(b % 2);
      uint8_t* blk = amx + (t / 16 * nb + b) * kQ40AmxBlock;
      _mm256_store_si256(reinterpret_cast<__m256i*>(blk + 32 * (t % 16)),
                         _mm256_xor_si256(_mm256_load_si256(reinterpret_cast<const __m256i*>(p.qu + 32 * h)), flip));
      std::memcpy(blk + 16 * 32 + 4 * (t % 16), &p.d[8 * h], 4);
    }
  }
}

// Src: RowTile (ggml's layout) or Tiles16 (then r0, r1 are multiples of 16).
template <int TT, class Src>
void q40_tile(const Src& rt, const TilePrefetch& pf, const Q40Block* const* at, int64_t nb, float* y, int64_t ldy) {
  __m512 acc[TT];
#pragma GCC unroll 16
  for (int t = 0; t < TT; ++t) acc[t] = _mm512_setzero_ps();
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  for (int64_t b = 0; b < nb; ++b) {
    pf.part(b);
    __m512i raw[4], wv[8];
    __m512 dw;
    rt.q4_0_block(b, raw, &dw);
#pragma GCC unroll 16
    for (int k = 0; k < 4; ++k) {
      wv[k] = _mm512_and_si512(raw[k], m4);                             // elements 4k .. 4k+3
      wv[k + 4] = _mm512_and_si512(_mm512_srli_epi16(raw[k], 4), m4);  // elements 16+4k ..
    }
#pragma GCC unroll 16
    for (int t = 0; t < TT; ++t) {
      const Q40Block& a = at[t][b];
      // Two VPDPBUSD chains of 4 (the sum is exact int32, so any split gives its bits).
      __m512i s0 = _mm512_set1_epi32(a.neg_corr), s1 = _mm512_setzero_si512();
#pragma GCC unroll 16
      for (int k = 0; k < 4; ++k) {
        s0 = _mm512_dpbusd_epi32(s0, wv[k], _mm512_set1_epi32(load_i32(a.q + 4 * k)));
        s1 = _mm512_dpbusd_epi32(s1, wv[k + 4], _mm512_set1_epi32(load_i32(a.q + 16 + 4 * k)));
      }
      const __m512i s = _mm512_add_epi32(s0, s1);
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, _mm512_set1_ps(a.d)), acc[t]);
    }
  }
#pragma GCC unroll 16
  for (int t = 0; t < TT; ++t) _mm512_mask_storeu_ps(y + t * ldy, rt.mask, acc[t]);
}

/// Two 16-row tiles of Q4_0 (rt[0], rt[1]) against TT tokens: q40_tile's operations for each
/// tile, with the same operands in the same order (the same bits), one activation broadcast
/// for both tiles' VPDPBUSD (see q4k_tile_pair); the accumulators wait in memory.
template <int TT>
void q40_tile_pair(const Tiles16* rt, const Q40Block* const* at, int64_t nb, float* y, int64_t ldy) {
  alignas(64) float acc[2][TT][16] = {};
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  for (int64_t b = 0; b < nb; ++b) {
    __m512i wv[2][8];
    __m512 dw[2];
#pragma GCC unroll 2
    for (int e = 0; e < 2; ++e) {
      __m512i raw[4];
      rt[e].q4_0_block(b, raw, &dw[e]);
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        wv[e][k] = _mm512_and_si512(raw[k], m4);
        wv[e][k + 4] = _mm512_and_si512(_mm512_srli_epi16(raw[k], 4), m4);
      }
    }
#pragma GCC unroll 16
    for (int t = 0; t < TT; ++t) {
      const Q40Block& a = at[t][b];
      __m512i s0[2], s1[2];
      asm("vpbroadcastd %1, %0" : "=v"(s0[0]) : "m"(a.neg_corr));
      s0[1] = s0[0];
      s1[0] = s1[1] = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        __m512i lo, hi;  // in registers, each for both tiles
        asm("vpbroadcastd %1, %0" : "=v"(lo) : "m"(*reinterpret_cast<const int32_t*>(a.q + 4 * k)));
        asm("vpbroadcastd %1, %0" : "=v"(hi) : "m"(*reinterpret_cast<const int32_t*>(a.q + 16 + 4 * k)));
#pragma GCC unroll 2
        for (int e = 0; e < 2; ++e) {
          s0[e] = _mm512_dpbusd_epi32(s0[e], wv[e][k], lo);
          s1[e] = _mm512_dpbusd_epi32(s1[e], wv[e][k + 4], hi);
        }
      }
      const __m512 da = _mm512_set1_ps(a.d);
#pragma GCC unroll 2
      for (int e = 0; e < 2; ++e)
        _mm512_store_ps(acc[e][t], _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0[e], s1[e])), _mm512_mul_ps(dw[e], da),
                                                   _mm512_load_ps(acc[e][t])));
    }
  }
#pragma GCC unroll 2
  for (int e = 0; e < 2; ++e)
#pragma GCC unroll 16
    for (int t = 0; t < TT; ++t) _mm512_storeu_ps(y + e * 16 + t * ldy, _mm512_load_ps(acc[e][t]));
}

template <int... I>
constexpr auto q40_tile_pairs(std::integer_sequence<int, I...>) {
  return std::array<void (*)(const Tiles16*, const Q40Block* const*, int64_t, float*, int64_t), sizeof...(I)>{q40_tile_pair<I + 1>...};
}

template <class Src, int... I>
constexpr auto q40_tiles(std::integer_sequence<int, I...>) {
  return std::array<void (*)(const Src&, const TilePrefetch&, const Q40Block* const*, int64_t, float*, int64_t), sizeof...(I)>{
      q40_tile<I + 1, Src>...};
}

template <class Src>
void q40_gemm(const WeightView& w, const uint8_t* act, int64_t, int n_tok, int64_t r0, int64_t r1, float* y, int64_t ldy, QOrder) {
  static constexpr auto tiles = q40_tiles<Src>(std::make_integer_sequence<int, kMaxTok>{});
  // A Tiles16 GEMM prefetches nothing: its tile is one sequential stream, which the hardware
  // prefetchers follow (measured: gate+up 7.0 -> 6.7 ms a step without the next tile's
  // prefetch, TinyLlama Q4_0, 2 threads); the 16 row streams of RowTile need it.
  constexpr bool kNextTile = std::is_same_v<Src, RowTile>;
  const int64_t nb = w.cols / 32;
  const auto* packed = reinterpret_cast<const Q40Block*>(act);
  int first = 0;  // tokens [0, first) went to the AMX tiles (same bits)
  if constexpr (std::is_same_v<Src, Tiles16>)
    if (amx_takes(n_tok)) {
      first = n_tok / 16 * 16;
      q40_gemm_amx(w, act + amx_copy_offset(nb * kQ40Record, n_tok), first, r0, r1, y, ldy);
    }
  for (int t0 = first; t0 < n_tok; t0 += kMaxTok) {
    const int tt = std::min(kMaxTok, n_tok - t0);
    const Q40Block* at[kMaxTok];
    for (int t = 0; t < tt; ++t) at[t] = packed + (t0 + t) * nb;
    int64_t r = r0;
    if constexpr (std::is_same_v<Src, Tiles16>) {  // a GEMM: two tiles a pass, no prefetch (as above)
      static constexpr auto pairs = q40_tile_pairs(std::make_integer_sequence<int, kMaxTok>{});
      r = tile_pairs(w, r0, r1, n_tok, nb, [&](const Tiles16* rt, const TilePrefetch*, int64_t rp) {
        pairs[tt - 1](rt, at, nb, y + t0 * ldy + rp, ldy);
      });
    }
    for (; r < r1; r += 16)
      tiles[tt - 1](Src(w, r, r1), tile_prefetch<Src>(w, r, nb, n_tok, kNextTile, /*l1_on_amd=*/false), at, nb, y + t0 * ldy + r, ldy);
  }
}

// ---- Q4_K ----

/// The end of super-block i of a Q4_K tile for TT tokens (q4k_tile, q4k_tile_pair): kGemm,
/// per 64 values c in order, acc = fma(fsum_c, d·d_a, acc) and accm = fma(Σ m·bsum32 of c,
/// dmin·d_a, accm) (the min terms need only the header and bsum32, so they are made here);
/// GEMV, acc = fma(isum >> 4, d·d_a, acc), accm = fma(imin, dmin·d_a, accm).
template <bool kGemm, int TT>
__attribute__((always_inline)) inline void q4k_end_super_block(const K4Header& hd, const ActQ8K* const* at, int64_t i,
                                                               const float (*fsum)[kGemm ? 4 : 1][16], const int32_t (*isum)[16],
                                                               const int32_t (*imin)[16], float (*acc)[16], float (*accm)[16]) {
  if constexpr (kGemm) {
    __m512i mn_pair[4];  // m_2c | m_2c+1 << 16 (int16 pairs for VPDPWSSD)
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) mn_pair[c] = hd.min_pair(c);
#pragma GCC unroll 16
    for (int t = 0; t < TT; ++t) {
      const ActQ8K& a = at[t][i];
      const __m512 da = _mm512_set1_ps(a.d);
      const __m512 dd = _mm512_mul_ps(hd.d, da), dm = _mm512_mul_ps(hd.dmin, da);
      __m512 s = _mm512_load_ps(acc[t]), sm = _mm512_load_ps(accm[t]);
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        const __m512i im = _mm512_dpwssd_epi32(_mm512_setzero_si512(), mn_pair[c], _mm512_set1_epi32(load_i32(a.bsum32 + 2 * c)));
        s = _mm512_fmadd_ps(_mm512_load_ps(fsum[t][c]), dd, s);
        sm = _mm512_fmadd_ps(_mm512_cvtepi32_ps(im), dm, sm);
      }
      _mm512_store_ps(acc[t], s);
      _mm512_store_ps(accm[t], sm);
    }
  } else {
#pragma GCC unroll 16
    for (int t = 0; t < TT; ++t) {
      const __m512 da = _mm512_set1_ps(at[t][i].d);
      const __m512i is = _mm512_srai_epi32(_mm512_load_si512(isum[t]), 4);
      _mm512_store_ps(acc[t], _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), _mm512_mul_ps(hd.d, da), _mm512_load_ps(acc[t])));
      _mm512_store_ps(accm[t], _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(imin[t])), _mm512_mul_ps(hd.dmin, da), _mm512_load_ps(accm[t])));
    }
  }
}

/// One 16-row tile of Q4_K against TT tokens (ActQ8K rows); kGemm: one fma pair per 64
/// values, else per super-block.
template <bool kGemm, int TT, class Src>
void q4k_tile(const Src& rt, const TilePrefetch& pf, const ActQ8K* const* at, int64_t nsb, float* y, int64_t ldy) {
  alignas(64) float acc[TT][16] = {}, accm[TT][16] = {};
  // fsum (kGemm): each 64 values' Σ_j sc_j·Σ(q·a)_j of the super-block, as float (exact);
  // isum (GEMV): their int32 sum.
  alignas(64) float fsum[TT][kGemm ? 4 : 1][16];
  alignas(64) int32_t isum[TT][16], imin[TT][16];
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  for (int64_t i = 0; i < nsb; ++i) {
    constexpr int64_t kBlock = sizeof(BlockQ4_K);
    const K4Header hd(rt, kBlock, i);
    __m512i mn_pair[4];  // m_2c | m_2c+1 << 16 (int16 pairs for VPDPWSSD)
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) mn_pair[c] = hd.min_pair(c);
    for (int c = 0; c < 4; ++c) {  // sub-blocks 2c, 2c+1
      // A quarter of the prefetch per 64 values (9 lines of a 16-row tile), not 36 lines per
      // super-block: BM_GemvLayers/Q4_K 14.8 -> 15.8 GB/s (1 thread, Intel Xeon, 2026-12-06).
      pf.part(4 * i + c);
      // The GEMV's sub-block 2c scale times 16 (see wh), the float scales for the GEMM.
      const __m512i sc_lo = hd.scale(2 * c), sc_hi = hd.scale(2 * c + 1), sc_lo16 = _mm512_slli_epi32(sc_lo, 4);
      const __m512 sc_lo_f = _mm512_cvtepi32_ps(sc_lo);
      const __m512 sc_hi_f16 = _mm512_mul_ps(_mm512_cvtepi32_ps(sc_hi), _mm512_set1_ps(0.0625f));  // sc_hi / 16, exact
      // Weights: qs[32c .. 32c+31]; low nibbles = sub-block 2c, high = 2c+1; dword m of a
      // sub-block = elements 4m .. 4m+3. The high nibbles stay in place (16·q, one VPANDND
      // rather than a shift and a VPANDD): their sums come out 16 times too big, exactly, and
      // the scale steps divide it out (sc_lo16, sc_hi_f16).
      __m512i wl[8], wh[8];
#pragma GCC unroll 16
      for (int h = 0; h < 2; ++h) {
        __m512i raw[4];
        rt.slice(kBlock, i, offsetof(BlockQ4_K, qs) + 32 * c + 16 * h, raw);
#pragma GCC unroll 16
        for (int k = 0; k < 4; ++k) {
          wl[4 * h + k] = _mm512_and_si512(raw[k], m4);
          wh[4 * h + k] = _mm512_andnot_si512(m4, raw[k]);
        }
      }
#pragma GCC unroll 16
      for (int t = 0; t < TT; ++t) {
        const ActQ8K& a = at[t][i];
        // Two chains per sub-block (its even and its odd dwords; the int32 sum is exact, so
        // any split gives its bits), so that VPDPBUSD's latency overlaps.
        __m512i s0[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()}, s1[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
#pragma GCC unroll 16
        for (int m = 0; m < 8; ++m) {
          s0[m % 2] = dpbusd_bcast(s0[m % 2], wl[m], a.qs + 64 * c + 4 * m);
          s1[m % 2] = dpbusd_bcast(s1[m % 2], wh[m], a.qs + 64 * c + 32 + 4 * m);
        }
        const __m512i sl = _mm512_add_epi32(s0[0], s0[1]), shi = _mm512_add_epi32(s1[0], s1[1]);
        if constexpr (kGemm) {
          // Σ_j sc_j·Σ(q·a)_j in float: |Σ(q·a)_j| ≤ 32·15·128 < 2^16 and sc_j < 2^6, so
          // each product and the sum (< 2^24) are exact: the int32 sum's value, without
          // VPMULLD (two µops on port 0 of Intel cores) or the conversion later.
          // shi = 16·Σ(q·a)_2c+1 (< 2^24, exact as float) times sc / 16: the same exact product.
          _mm512_store_ps(fsum[t][c], _mm512_fmadd_ps(_mm512_cvtepi32_ps(shi), sc_hi_f16, _mm512_mul_ps(_mm512_cvtepi32_ps(sl), sc_lo_f)));
        } else {
          // 16 times the sub-blocks' Σ_j sc_j·Σ(q·a)_j (< 2^31: 8·32·15·128·63·16), made exact
          // int32 again by >> 4 after the super-block.
          const __m512i is = _mm512_add_epi32(_mm512_mullo_epi32(sl, sc_lo16), _mm512_mullo_epi32(shi, sc_hi));
          const __m512i im = _mm512_dpwssd_epi32(_mm512_setzero_si512(), mn_pair[c], _mm512_set1_epi32(load_i32(a.bsum32 + 2 * c)));
          _mm512_store_si512(isum[t], c == 0 ? is : _mm512_add_epi32(_mm512_load_si512(isum[t]), is));
          _mm512_store_si512(imin[t], c == 0 ? im : _mm512_add_epi32(_mm512_load_si512(imin[t]), im));
        }
      }
    }
    q4k_end_super_block<kGemm, TT>(hd, at, i, fsum, isum, imin, acc, accm);
  }
#pragma GCC unroll 16
  for (int t = 0; t < TT; ++t) _mm512_mask_storeu_ps(y + t * ldy, rt.mask, _mm512_sub_ps(_mm512_load_ps(acc[t]), _mm512_load_ps(accm[t])));
}

/// Two 16-row tiles of Q4_K (rt[0], rt[1]) against TT tokens: q4k_tile's operations for
/// each tile, with the same operands in the same order (the same bits), but every activation
/// broadcast feeds both tiles' VPDPBUSD. On the Ice Lake Xeon VPDPBUSD with one broadcast
/// each (q4k_tile's) runs at 57 % of the int8 peak, with one per two at 91 %
/// (BM_VnniWith/bcast_per_1, _2): Q4_K_M pp512 1.14x, B=32 1.18x (bench/RESULTS.md, "One
/// broadcast per two VPDPBUSD"). GEMMs only (more than kAheadMaxTokens tokens).
/// A sub-block pair runs in two passes over the tokens, its low nibbles (sub-block 2c), then
/// its high ones (2c + 1), so that a pass's weights (8 dwords of two tiles) stay in registers;
/// the first pass's scaled sums wait in `lo`.
template <bool kGemm, int TT>
void q4k_tile_pair(const Tiles16* rt, const TilePrefetch* pf, const ActQ8K* const* at, int64_t nsb, float* y, int64_t ldy) {
  constexpr int64_t kBlock = sizeof(BlockQ4_K);
  alignas(64) float acc[2][TT][16] = {}, accm[2][TT][16] = {};
  alignas(64) float fsum[2][TT][kGemm ? 4 : 1][16];
  alignas(64) int32_t isum[2][TT][16], imin[2][TT][16];
  alignas(64) int32_t lo[2][TT][16];  // the low pass's product (kGemm: as float bits)
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  for (int64_t i = 0; i < nsb; ++i) {
    const K4Header hd[2] = {K4Header(rt[0], kBlock, i), K4Header(rt[1], kBlock, i)};
    for (int c = 0; c < 4; ++c) {
      pf[0].part(4 * i + c);
      pf[1].part(4 * i + c);
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        // h = 0: sub-block 2c (low nibbles), its scale times 16 (GEMV) or as float (GEMM);
        // h = 1: sub-block 2c + 1 (high nibbles kept in place, 16·q), its scale (GEMV) or / 16.
        __m512i w[2][8], sci[2];
        __m512 scf[2];
#pragma GCC unroll 2
        for (int e = 0; e < 2; ++e) {
          const __m512i sc = hd[e].scale(2 * c + h);
          sci[e] = h ? sc : _mm512_slli_epi32(sc, 4);
          scf[e] = h ? _mm512_mul_ps(_mm512_cvtepi32_ps(sc), _mm512_set1_ps(0.0625f)) : _mm512_cvtepi32_ps(sc);
#pragma GCC unroll 2
          for (int q = 0; q < 2; ++q) {
            __m512i raw[4];
            rt[e].slice(kBlock, i, offsetof(BlockQ4_K, qs) + 32 * c + 16 * q, raw);
#pragma GCC unroll 4
            for (int k = 0; k < 4; ++k) w[e][4 * q + k] = h ? _mm512_andnot_si512(m4, raw[k]) : _mm512_and_si512(raw[k], m4);
          }
        }
#pragma GCC unroll 16
        for (int t = 0; t < TT; ++t) {
          const ActQ8K& a = at[t][i];
          __m512i s[2][2] = {{_mm512_setzero_si512(), _mm512_setzero_si512()}, {_mm512_setzero_si512(), _mm512_setzero_si512()}};
#pragma GCC unroll 8
          for (int m = 0; m < 8; ++m) {
            __m512i b;  // one broadcast in a register for both tiles (not two embedded ones)
            asm("vpbroadcastd %1, %0" : "=v"(b) : "m"(*reinterpret_cast<const int32_t*>(a.qs + 64 * c + 32 * h + 4 * m)));
            s[0][m % 2] = _mm512_dpbusd_epi32(s[0][m % 2], w[0][m], b);
            s[1][m % 2] = _mm512_dpbusd_epi32(s[1][m % 2], w[1][m], b);
          }
#pragma GCC unroll 2
          for (int e = 0; e < 2; ++e) {
            const __m512i sum = _mm512_add_epi32(s[e][0], s[e][1]);
            if constexpr (kGemm) {
              // q4k_tile's fmadd(cvt(shi), sc_hi / 16, mul(cvt(sl), sc_lo)), its mul in the first pass.
              if (h == 0) _mm512_store_ps(reinterpret_cast<float*>(lo[e][t]), _mm512_mul_ps(_mm512_cvtepi32_ps(sum), scf[e]));
              else _mm512_store_ps(fsum[e][t][c], _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), scf[e], _mm512_load_ps(reinterpret_cast<const float*>(lo[e][t]))));
            } else if (h == 0) {
              _mm512_store_si512(lo[e][t], _mm512_mullo_epi32(sum, sci[e]));
            } else {  // the mins' sum waits for the super-block's end (no store here)
              const __m512i is = _mm512_add_epi32(_mm512_load_si512(lo[e][t]), _mm512_mullo_epi32(sum, sci[e]));
              _mm512_store_si512(isum[e][t], c == 0 ? is : _mm512_add_epi32(_mm512_load_si512(isum[e][t]), is));
            }
          }
        }
      }
    }
#pragma GCC unroll 2
    for (int e = 0; e < 2; ++e) {
      // GEMV: Σ_j m_j·bsum32_j of each token here, in registers (exact int32, so q4k_tile's
      // per-64-value sums' bits), not a 64-byte store per tile and token every 64 values: this
      // VM's stores cost that much (B=32 1.04×, bench/RESULTS.md, "Vector loads and stores").
      if constexpr (!kGemm) {
        __m512i mn_pair[4];
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) mn_pair[c] = hd[e].min_pair(c);
#pragma GCC unroll 16
        for (int t = 0; t < TT; ++t) {
          const ActQ8K& a = at[t][i];
          __m512i im = _mm512_setzero_si512();
#pragma GCC unroll 4
          for (int c = 0; c < 4; ++c) im = _mm512_dpwssd_epi32(im, mn_pair[c], _mm512_set1_epi32(load_i32(a.bsum32 + 2 * c)));
          _mm512_store_si512(imin[e][t], im);
        }
      }
      q4k_end_super_block<kGemm, TT>(hd[e], at, i, fsum[e], isum[e], imin[e], acc[e], accm[e]);
    }
  }
#pragma GCC unroll 2
  for (int e = 0; e < 2; ++e)
#pragma GCC unroll 16
    for (int t = 0; t < TT; ++t) _mm512_storeu_ps(y + e * 16 + t * ldy, _mm512_sub_ps(_mm512_load_ps(acc[e][t]), _mm512_load_ps(accm[e][t])));
}

template <bool kGemm, int... I>
constexpr auto q4k_tile_pairs(std::integer_sequence<int, I...>) {
  return std::array<void (*)(const Tiles16*, const TilePrefetch*, const ActQ8K* const*, int64_t, float*, int64_t), sizeof...(I)>{
      q4k_tile_pair<kGemm, I + 1>...};
}

template <bool kGemm, class Src, int... I>
constexpr auto q4k_tiles(std::integer_sequence<int, I...>) {
  return std::array<void (*)(const Src&, const TilePrefetch&, const ActQ8K* const*, int64_t, float*, int64_t), sizeof...(I)>{
      q4k_tile<kGemm, I + 1, Src>...};
}

// Src: RowTile (ggml's layout) or Tiles16 (then r0, r1 are multiples of 16).
template <bool kGemm, class Src>
void q4k_gemm(const WeightView& w, const uint8_t* act, int64_t act_stride, int n_tok, int64_t r0, int64_t r1, float* y, int64_t ldy,
              QOrder) {
  static constexpr auto tiles = q4k_tiles<kGemm, Src>(std::make_integer_sequence<int, kMaxTok>{});
  const int64_t nsb = w.cols / QK_K;
  int first = 0;  // tokens [0, first) went to the AMX tiles (same bits)
  if constexpr (std::is_same_v<Src, Tiles16>)
    if (amx_takes(n_tok)) {
      first = n_tok / 16 * 16;
      q4k_gemm_amx(w, kGemm, act, act_stride, first, r0, r1, y, ldy);
    }
  for (int t0 = first; t0 < n_tok; t0 += kMaxTok) {
    const int tt = std::min(kMaxTok, n_tok - t0);
    const ActQ8K* at[kMaxTok];
    for (int t = 0; t < tt; ++t) at[t] = reinterpret_cast<const ActQ8K*>(act + (t0 + t) * act_stride);
    // Both layouts prefetch (Tiles16 measured: gate+up 6.4 -> 6.0 ms a step with the next
    // tile's prefetch, TinyLlama Q4_K_M, 2 threads; a GEMV now with ahead()), in 4 parts per
    // super-block.
    int64_t r = r0;
    if constexpr (std::is_same_v<Src, Tiles16>) {  // a GEMM: two tiles a pass
      static constexpr auto pairs = q4k_tile_pairs<kGemm>(std::make_integer_sequence<int, kMaxTok>{});
      r = tile_pairs(w, r0, r1, n_tok, 4 * nsb, [&](const Tiles16* rt, const TilePrefetch* pf, int64_t rp) {
        pairs[tt - 1](rt, pf, at, nsb, y + t0 * ldy + rp, ldy);
      });
    }
    for (; r < r1; r += 16) tiles[tt - 1](Src(w, r, r1), tile_prefetch<Src>(w, r, 4 * nsb, n_tok), at, nsb, y + t0 * ldy + r, ldy);
  }
}

}  // namespace

QKernel q4_0_row_kernel() {
  QKernel k;
  k.gemm = q40_gemm<RowTile>;
  k.pack = q40_pack;
  k.pack_bytes = q40_pack_bytes;
  return k;
}

QKernel q4_0_tiles16_kernel() {
  QKernel k = q4_0_row_kernel();
  k.gemm = q40_gemm<Tiles16>;
  k.pack = q40_tiles16_pack;
  k.pack_bytes = q40_tiles16_pack_bytes;
  k.layout = WeightLayout::kTiles16;
  return k;
}

QKernel q4_K_row_kernel(QOrder order) {
  QKernel k;
  k.gemm = order == QOrder::kRepackGemm ? q4k_gemm<true, RowTile> : q4k_gemm<false, RowTile>;
  return k;
}

QKernel q4_K_tiles16_kernel(QOrder order) {
  QKernel k;
  k.gemm = order == QOrder::kRepackGemm ? q4k_gemm<true, Tiles16> : q4k_gemm<false, Tiles16>;
  k.layout = WeightLayout::kTiles16;
  return k;
}

}  // namespace pdserve::kernels::avx512
