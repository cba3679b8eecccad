// AMX-INT8 tile kernels (Intel SDM vol. 1 ch. 18; TDPBSSD / TDPBSUD in vol. 2) for the
// matmuls of 16-token groups, on a WeightLayout::kTiles16 matrix, each with the bits of its
// VNNI tile, wherever the order needs exact int32 sums of 32 values or more:
//  * Q4_K, kRepackGemm (q4k_tile<true>): per 64 values, sc_2c·Σ(q·a)_2c + sc_2c+1·Σ(q·a)_2c+1;
//  * Q4_K, kRepackGemv (q4k_tile<false>) and Q5_K, kTiled (tile_tiled): per super-block,
//    Σ_j sc_j·Σ(q·a)_j — both with the scales folded into the weights (see "Scales in the
//    weights");
//  * Q6_K, kVecDot (tile_vecdot): ggml's 8 lanes of 32 values a super-block, the 16-value
//    scales folded into the weights as two bytes (see the Q6_K section);
//  * Q4_0, both repacked orders (q40_tile): per 32-value block.
// One tile product gives those sums for 16 tokens (A: 16 rows of signed activations) × 16
// weight rows (B: K/4 rows of 16 dwords, dword n = 4 weights of row n: the dwords a Tiles16
// slice holds, once unpacked). The float steps are the VNNI tiles', in their order, reading
// the C tile back row by row: row t = token t's sums for the 16 rows, the VNNI tiles' lane
// layout. Q8_0's order (ggml's vec_dot: a float step per 4 values) stays on VNNI.
// On this machine kind (Intel Xeon, 2026-12-06) the tile products with their TILESTORED and
// the vector float steps did not overlap (each alone, then both: the sum of the two), so a
// kernel's time is about its tile work plus its float work: what to save is either.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstring>
#include <utility>

#include "kernels/cpu_features.h"
#include "kernels/qgemm_avx512.h"
#include "kernels/quant_types.h"
#include "kernels/quants.h"

namespace pdserve::kernels::avx512 {
namespace {

using gguf::GgmlType;

/// kConfig's tile registers (32-value products: Q4_0, Q6_K): C0 / C1 (tmm0 / tmm1), A (tmm2),
/// B0 / B1 (tmm4 / tmm5). (GCC's _tile_* macros paste the register number into the
/// instruction: literals below.)
enum : int { kC0 = 0, kC1 = 1, kA = 2, kB0 = 4, kB1 = 5 };

/// LDTILECFG's 64-byte operand, palette 1 (Intel SDM vol. 1 §18.2).
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

constexpr TileConfig make_config() {
  TileConfig c;
  for (int t : {kC0, kC1}) c.rows[t] = 16, c.colsb[t] = 64;  // 16 tokens × 16 int32
  c.rows[kA] = 16, c.colsb[kA] = 32;                          // 16 tokens × 32 int8
  for (int t : {kB0, kB1}) c.rows[t] = 8, c.colsb[t] = 64;   // 8 dwords × 16 rows
  return c;
}
constexpr TileConfig kConfig = make_config();

constexpr int kGroup = 16;      // tokens per A / C tile
constexpr int kMaxGroups = 4;   // token groups per pass over a 16-row tile (the weights' unpacking is shared)

// ---- Scales in the weights: Q4_K (both repacked orders) and Q5_K's tiled order ----
//
// Σ_j sc_j·Σ(q·a)_j over a super-block (kRepackGemv, kTiled) or over sub-blocks 2c, 2c+1
// (kRepackGemm) is an exact int32, so the scales go into the weights: sc = lo + 2^s·hi with
// lo, hi < 2^s (Q4_K: s = 4, q < 16, q·lo ≤ 225; Q5_K: s = 3, q < 32, q·lo ≤ 217) fit unsigned
// bytes, and two products (K = 64 a step: C accumulating over the super-block, or one step
// for kRepackGemm) give Σ lo_j·S_j and Σ hi_j·S_j; the sum is C_lo + 2^s·C_hi (|Σ| < 2^31).

/// Tiles of these kernels: C_lo, C_hi (tmm0, tmm1), A (tmm2: 16 tokens × 64 int8), B_lo,
/// B_hi (tmm3, tmm4: 16 dwords × 16 rows).
constexpr TileConfig make_super_config() {
  TileConfig c;
  for (int t = 0; t < 5; ++t) c.rows[t] = 16, c.colsb[t] = 64;
  return c;
}
constexpr TileConfig kSuperConfig = make_super_config();

template <GgmlType T>
constexpr int kScaleSplit = T == GgmlType::Q4_K ? 4 : 3;

/// A super-block of 16 Q4_K / Q5_K rows: d, dmin, the mins as int16 pairs m_2c | m_2c+1 << 16,
/// and the quants times the scales' parts as B tiles.
struct alignas(64) SuperB {
  __m512 d, dmin;
  __m512i mn_pair[4];
  uint8_t b[4][2][16][64];  // values 64c .. 64c+63, part lo / hi: B row m = values 4m .. 4m+3 of the 16 rows
};

template <GgmlType T>
inline void unpack_super_b(const Tiles16& rt, int64_t i, SuperB* o) {
  static_assert(T == GgmlType::Q4_K || T == GgmlType::Q5_K);
  constexpr int64_t kBlock = T == GgmlType::Q4_K ? sizeof(BlockQ4_K) : sizeof(BlockQ5_K);
  constexpr int64_t kQs = T == GgmlType::Q4_K ? offsetof(BlockQ4_K, qs) : offsetof(BlockQ5_K, qs);
  constexpr int kS = kScaleSplit<T>;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const K4Header hd(rt, kBlock, i);  // Q4_K's and Q5_K's headers are alike
  o->d = hd.d;
  o->dmin = hd.dmin;
  __m512i qh[8];  // Q5_K: bit 4 of value 32c + 4k + l is bit c of byte l of dword k
  if constexpr (T == GgmlType::Q5_K) {
    rt.slice(kBlock, i, offsetof(BlockQ5_K, qh), qh);
    rt.slice(kBlock, i, offsetof(BlockQ5_K, qh) + 16, qh + 4);
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    o->mn_pair[c] = hd.min_pair(c);
    // Sub-blocks 2c (low nibbles) and 2c+1 (high): each part of the scale in both int16
    // halves of its row's dword, for VPMULLW (q·part < 256: each byte's product stays in its byte).
    __m512i part[2][2];
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const int j = 2 * c + h;
      const __m512i sc = _mm512_shuffle_epi8(hd.sc[j / 4], kByteTwice[j % 4].load());  // in both int16 halves
      part[h][0] = _mm512_and_si512(sc, _mm512_set1_epi16((1 << kS) - 1));
      part[h][1] = _mm512_srli_epi16(sc, kS);
    }
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m512i raw[4];
      rt.slice(kBlock, i, kQs + 32 * c + 16 * h, raw);
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        __m512i lo = raw[k], hi = _mm512_srli_epi16(raw[k], 4);
        if constexpr (T == GgmlType::Q5_K) {  // nibble | bit 2c (2c + 1) of qh moved to bit 4 by GF2P8AFFINEQB
          const __m512i q = qh[4 * h + k];
          lo = _mm512_ternarylogic_epi32(lo, m4, _mm512_gf2p8affine_epi64_epi8(q, _mm512_set1_epi64(gf_move_bit(2 * c, 4)), 0), 0xEA);
          hi = _mm512_ternarylogic_epi32(hi, m4, _mm512_gf2p8affine_epi64_epi8(q, _mm512_set1_epi64(gf_move_bit(2 * c + 1, 4)), 0), 0xEA);
        } else {
          lo = _mm512_and_si512(lo, m4);
          hi = _mm512_and_si512(hi, m4);
        }
#pragma GCC unroll 2
        for (int p = 0; p < 2; ++p) {
          _mm512_store_si512(o->b[c][p][4 * h + k], _mm512_mullo_epi16(lo, part[0][p]));
          _mm512_store_si512(o->b[c][p][8 + 4 * h + k], _mm512_mullo_epi16(hi, part[1][p]));
        }
      }
    }
  }
}

/// One 16-row Tiles16 tile of Q4_K (GEMV order) or Q5_K (tiled order) against G groups of
/// 16 tokens (ActQ8K rows at act + t·act_stride); y[t·ldy + r] for the tile's 16 rows.
///  * Q4_K: acc = fma((float) s1, d_w*d_a, acc), acc_m = fma((float) s2, dmin_w*d_a, acc_m);
///    y = acc − acc_m (q4k_tile<false>);
///  * Q5_K: r = (float) s1·d_w, r = fma(−dmin_w, (float) s2, r), acc = fma(r, d_a, acc)
///    (tile_tiled in qgemm_avx512_krows.inc);
/// s1 = Σ_j sc_j·Σ(q·a)_j, s2 = Σ_j m_j·bsum32_j per super-block.
template <GgmlType T, int G>
void super_amx_tile(const Tiles16& rt, const TilePrefetch& pf, const uint8_t* act, int64_t act_stride, int64_t nsb, float* y,
                    int64_t ldy) {
  constexpr int kTok = G * kGroup;
  constexpr bool kQ4 = T == GgmlType::Q4_K;
  alignas(64) float acc[kTok][16] = {}, accm[kQ4 ? kTok : 1][16] = {};
  SuperB w;
  alignas(64) int32_t sums[2][kGroup][16];  // C_lo, C_hi of one group
  for (int64_t i = 0; i < nsb; ++i) {
    pf.part(i);
    unpack_super_b<T>(rt, i, &w);
    for (int g = 0; g < G; ++g) {
      const uint8_t* a = act + g * kGroup * act_stride + i * static_cast<int64_t>(sizeof(ActQ8K));
      _tile_zero(0);
      _tile_zero(1);
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        _tile_loadd(2, a + offsetof(ActQ8K, qs) + 64 * c, act_stride);
        _tile_loadd(3, w.b[c][0], 64);
        _tile_loadd(4, w.b[c][1], 64);
        _tile_dpbsud(0, 2, 3);
        _tile_dpbsud(1, 2, 4);
      }
      _tile_stored(0, sums[0], 64);
      _tile_stored(1, sums[1], 64);
      for (int tg = 0; tg < kGroup; ++tg) {
        const auto& at = *reinterpret_cast<const ActQ8K*>(a + tg * act_stride);
        const int t = g * kGroup + tg;
        const __m512i s1 = _mm512_add_epi32(_mm512_load_si512(sums[0][tg]), _mm512_slli_epi32(_mm512_load_si512(sums[1][tg]), kScaleSplit<T>));
        __m512i s2 = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) s2 = _mm512_dpwssd_epi32(s2, w.mn_pair[c], _mm512_set1_epi32(load_i32(at.bsum32 + 2 * c)));
        const __m512 da = _mm512_set1_ps(at.d);
        if constexpr (kQ4) {
          _mm512_store_ps(acc[t], _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1), _mm512_mul_ps(w.d, da), _mm512_load_ps(acc[t])));
          _mm512_store_ps(accm[t], _mm512_fmadd_ps(_mm512_cvtepi32_ps(s2), _mm512_mul_ps(w.dmin, da), _mm512_load_ps(accm[t])));
        } else {
          const __m512 r = _mm512_fnmadd_ps(w.dmin, _mm512_cvtepi32_ps(s2), _mm512_mul_ps(_mm512_cvtepi32_ps(s1), w.d));
          _mm512_store_ps(acc[t], _mm512_fmadd_ps(r, da, _mm512_load_ps(acc[t])));
        }
      }
    }
  }
  for (int t = 0; t < kTok; ++t) {
    __m512 r = _mm512_load_ps(acc[t]);
    if constexpr (kQ4) r = _mm512_sub_ps(r, _mm512_load_ps(accm[t]));
    _mm512_storeu_ps(y + t * ldy, r);
  }
}

/// Q4_K in the kRepackGemm order (q4k_tile<true>) against G groups of 16 tokens (ActQ8K rows
/// at act + t·act_stride): per 64 values (sub-blocks 2c, 2c+1) sa = fma((float) s_c, d_w·d_a, sa)
/// and sm = fma((float) Σ m_j·bsum32_j, dmin_w·d_a, sm); y = sa − sm. s_c = sc_2c·Σ(q·a)_2c +
/// sc_2c+1·Σ(q·a)_2c+1 is the exact integer q4k_tile's fma(S_2c+1, sc_2c+1, S_2c·sc_2c) gives
/// (|S| < 2^16, sc < 2^6), so the scales go into the B tiles as for the whole-super-block
/// kernels (unpack_super_b) and one pair of products a 64 values gives it: C_lo + 16·C_hi.
/// Tiles: kSuperConfig's.
template <int G>
void q4k_gemm_amx_tile(const Tiles16& rt, const TilePrefetch& pf, const uint8_t* act, int64_t act_stride, int64_t nsb, float* y,
                       int64_t ldy) {
  constexpr int kTok = G * kGroup;
  alignas(64) float acc[kTok][16] = {}, accm[kTok][16] = {};
  SuperB w;
  alignas(64) int32_t sums[4][2][kGroup][16];  // C_lo, C_hi of each 64 values, one group
  for (int64_t i = 0; i < nsb; ++i) {
    pf.part(i);
    unpack_super_b<GgmlType::Q4_K>(rt, i, &w);
    for (int g = 0; g < G; ++g) {
      const uint8_t* a = act + g * kGroup * act_stride + i * static_cast<int64_t>(sizeof(ActQ8K));
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        _tile_loadd(2, a + offsetof(ActQ8K, qs) + 64 * c, act_stride);
        _tile_loadd(3, w.b[c][0], 64);
        _tile_loadd(4, w.b[c][1], 64);
        _tile_zero(0);
        _tile_zero(1);
        _tile_dpbsud(0, 2, 3);
        _tile_dpbsud(1, 2, 4);
        _tile_stored(0, sums[c][0], 64);
        _tile_stored(1, sums[c][1], 64);
      }
      for (int tg = 0; tg < kGroup; ++tg) {
        const auto& at = *reinterpret_cast<const ActQ8K*>(a + tg * act_stride);
        const int t = g * kGroup + tg;
        const __m512 da = _mm512_set1_ps(at.d);
        const __m512 dd = _mm512_mul_ps(w.d, da), dm = _mm512_mul_ps(w.dmin, da);
        __m512 sa = _mm512_load_ps(acc[t]), sm = _mm512_load_ps(accm[t]);
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) {
          const __m512i sc = _mm512_add_epi32(_mm512_load_si512(sums[c][0][tg]), _mm512_slli_epi32(_mm512_load_si512(sums[c][1][tg]), kScaleSplit<GgmlType::Q4_K>));
          const __m512i im = _mm512_dpwssd_epi32(_mm512_setzero_si512(), w.mn_pair[c], _mm512_set1_epi32(load_i32(at.bsum32 + 2 * c)));
          sa = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sc), dd, sa);
          sm = _mm512_fmadd_ps(_mm512_cvtepi32_ps(im), dm, sm);
        }
        _mm512_store_ps(acc[t], sa);
        _mm512_store_ps(accm[t], sm);
      }
    }
  }
  for (int t = 0; t < kTok; ++t) _mm512_storeu_ps(y + t * ldy, _mm512_sub_ps(_mm512_load_ps(acc[t]), _mm512_load_ps(accm[t])));
}

// ---- Q6_K (QOrder::kVecDot, ggml's x86 q6_K vec_dot: per super-block, 8 int32 lanes a (row, token)) ----
//
// Lane k is Σ_c sc_{2c+⌊k/4⌋}·Σ(q·a) over values 32c+4k .. 32c+4k+3 of the 8 chunks c, minus
// 32·(sc_2k·bsum_2k + sc_2k+1·bsum_2k+1) (quants.h vec_dot_kquant_scalar); q < 64, |sc| <= 128.
// So each weight times its scale, w = q·sc (|w| <= 8064), goes into the B tiles as two bytes,
// w = lo + 256·hi (lo unsigned, hi signed: TDPBSUD, TDPBSSD), and a lane is one tile product
// per byte over its 32 values (K = 32: the A tile holds a token's lane-k values, kQ6KAmxBlock):
// lane = C_lo + 256·C_hi (|lane| < 2^26), exact; then the q − 32 correction and the float
// steps are tile_vecdot's. Tiles (kConfig's shapes): C_lo, C_hi tmm0, tmm1; A tmm2; B_lo, B_hi
// tmm4, tmm5.

/// Byte b of each dword, sign-extended into both int16 halves (after >> 8: the byte sits high).
constexpr DwordBytes kByteHighTwice[4] = {{-1, 0, -1, 0}, {-1, 1, -1, 1}, {-1, 2, -1, 2}, {-1, 3, -1, 3}};
/// Bytes (0, 1) and (2, 3) into the high bytes of the two words (256·sc, sign kept).
constexpr DwordBytes kHighPairQ6[2] = {{-1, 0, -1, 1}, {-1, 2, -1, 3}};

/// A super-block of 16 Q6_K rows: d, the q − 32 corrections' int16 pairs −32·(sc_2k, sc_2k+1)
/// and the B tiles of each lane.
struct alignas(64) Q6KSuper {
  __m512 d;
  __m512i pair[8];
  uint8_t b[8][2][8][64];  // lane k, byte lo / hi: B row c = values 32c+4k .. 32c+4k+3 of the 16 rows, times their scale
};

inline void unpack_q6k(const Tiles16& rt, int64_t i, int64_t nsb, Q6KSuper* o) {
  constexpr int64_t kBB = 208;  // a Q6_K block's stride in a tile's slice addressing (weight_layout.h)
  __m512i hd[4];                 // dword r of hd[p]: row r's scales 4p .. 4p+3
  rt.slice(kBB, i, offsetof(BlockQ6_K, scales), hd);
  o->d = rt.f16_at(16 * (nsb * kBB + 2 * i));
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k)
    o->pair[k] = _mm512_sub_epi16(_mm512_setzero_si512(), _mm512_srai_epi16(_mm512_shuffle_epi8(hd[k / 2], kHighPairQ6[k % 2].load()), 3));
  const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30), lo8 = _mm512_set1_epi16(0x00FF), hi8 = _mm512_set1_epi16(-256);
  for (int k = 0; k < 8; ++k) {
    // The lane's 8 dwords (tile_vecdot's chunk_weights): value 128h + 32s + l (chunk 4h + s)
    // is the nibble (s >= 2: high) of ql[64h + 32(s & 1) + l] | bits 2s, 2s+1 of qh[32h + l] at 4, 5.
    __m512i w[8];
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m512i qh = rt.line(kBB, i, 16 * (8 + 2 * h + k / 4), k % 4);
      const __m512i hb[4] = {_mm512_and_si512(_mm512_slli_epi16(qh, 4), m30), _mm512_and_si512(_mm512_slli_epi16(qh, 2), m30),
                             _mm512_and_si512(qh, m30), _mm512_and_si512(_mm512_srli_epi16(qh, 2), m30)};
#pragma GCC unroll 2
      for (int odd = 0; odd < 2; ++odd) {
        const __m512i ql = rt.line(kBB, i, 16 * (4 * h + 2 * odd + k / 4), k % 4);
        w[4 * h + odd] = _mm512_ternarylogic_epi32(ql, m4, hb[odd], 0xEA);
        w[4 * h + odd + 2] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(ql, 4), m4, hb[odd + 2], 0xEA);
      }
    }
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      const int j = 2 * c + k / 4;  // the 16-value sub-block
      const __m512i sc = _mm512_srai_epi16(_mm512_shuffle_epi8(hd[j / 4], kByteHighTwice[j % 4].load()), 8);
      const __m512i pe = _mm512_mullo_epi16(_mm512_and_si512(w[c], lo8), sc);   // bytes 0, 2 of each dword: q·sc (int16)
      const __m512i po = _mm512_mullo_epi16(_mm512_srli_epi16(w[c], 8), sc);    // bytes 1, 3
      _mm512_store_si512(o->b[k][0][c], _mm512_ternarylogic_epi32(pe, lo8, _mm512_slli_epi16(po, 8), 0xEA));  // low bytes
      _mm512_store_si512(o->b[k][1][c], _mm512_ternarylogic_epi32(po, hi8, _mm512_srli_epi16(pe, 8), 0xEA));  // high bytes
    }
  }
}

/// One 16-row Tiles16 tile of Q6_K against G groups of 16 tokens (super-block i of group g at
/// act + (g·nsb + i)·kQ6KAmxBlock: q6k_amx_pack's copy); y[t·ldy + r] for the tile's 16 rows.
template <int G>
void q6k_amx_tile(const Tiles16& rt, const TilePrefetch& pf, const uint8_t* act, int64_t, int64_t nsb, float* y, int64_t ldy) {
  constexpr int kTok = G * kGroup;
  alignas(64) float acc[kTok][8][16] = {};
  Q6KSuper w;
  alignas(64) int32_t sums[8][2][kGroup][16];  // C_lo, C_hi of each lane, one group
  for (int64_t i = 0; i < nsb; ++i) {
    pf.part(i);
    unpack_q6k(rt, i, nsb, &w);
    for (int g = 0; g < G; ++g) {
      const uint8_t* blk = act + (g * nsb + i) * kQ6KAmxBlock;
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        _tile_loadd(2, blk + k * kGroup * 32, 32);
        _tile_loadd(4, w.b[k][0], 64);
        _tile_loadd(5, w.b[k][1], 64);
        _tile_zero(0);
        _tile_zero(1);
        _tile_dpbsud(0, 2, 4);
        _tile_dpbssd(1, 2, 5);
        _tile_stored(0, sums[k][0], 64);
        _tile_stored(1, sums[k][1], 64);
      }
      for (int tg = 0; tg < kGroup; ++tg) {
        float da;
        std::memcpy(&da, blk + kQ6KAmxD + 4 * tg, 4);
        const __m512 dd = _mm512_mul_ps(_mm512_set1_ps(da), w.d);
        const uint8_t* bsums = blk + kQ6KAmxBsums + 32 * tg;
        float(*a)[16] = acc[g * kGroup + tg];
#pragma GCC unroll 8
        for (int k = 0; k < 8; ++k) {
          __m512i lane = _mm512_add_epi32(_mm512_load_si512(sums[k][0][tg]), _mm512_slli_epi32(_mm512_load_si512(sums[k][1][tg]), 8));
          lane = _mm512_dpwssd_epi32(lane, w.pair[k], _mm512_set1_epi32(load_i32(bsums + 4 * k)));
          _mm512_store_ps(a[k], _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(lane), _mm512_load_ps(a[k])));
        }
      }
    }
  }
  for (int t = 0; t < kTok; ++t) {
    auto lane = [&](int k) { return _mm512_load_ps(acc[t][k]); };
    // hsum_float_8: ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)).
    const __m512 r0 = _mm512_add_ps(lane(0), lane(4)), r1 = _mm512_add_ps(lane(1), lane(5));
    const __m512 r2 = _mm512_add_ps(lane(2), lane(6)), r3 = _mm512_add_ps(lane(3), lane(7));
    _mm512_storeu_ps(y + t * ldy, _mm512_add_ps(_mm512_add_ps(r0, r2), _mm512_add_ps(r1, r3)));
  }
}

// ---- Q4_0 (kRepackGemm and kRepackGemv alike: acc = fma((float) Σ_32 w·a, d_w*d_a, acc)) ----

/// One 16-row Tiles16 tile of Q4_0 against G groups of 16 tokens: block b of group g at
/// act + (g·nb + b)·kQ40AmxBlock (q40_pack's AMX copy: the A tile, then the 16 d_a; `act_stride`
/// is unused). Tiles (kConfig's shapes): C tmm0, A tmm2 (16 tokens × 32 int8), B tmm4 (8
/// dwords × 16 rows).
template <int G>
void q40_amx_tile(const Tiles16& rt, const TilePrefetch& pf, const uint8_t* act, int64_t, int64_t nb, float* y, int64_t ldy) {
  constexpr int kTok = G * kGroup;
  __m512 acc[kTok];
#pragma GCC unroll 64
  for (int t = 0; t < kTok; ++t) acc[t] = _mm512_setzero_ps();
  alignas(64) uint8_t wq[8][64];             // B: row m = elements 4m .. 4m+3 of the 16 rows, q − 8
  alignas(64) int32_t sums[G][kGroup][16];   // C of each group
  const __m512i m4 = _mm512_set1_epi8(0x0F), eight = _mm512_set1_epi8(8);
  for (int64_t b = 0; b < nb; ++b) {
    pf.part(b);
    __m512i raw[4];
    __m512 dw;
    rt.q4_0_block(b, raw, &dw);
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      _mm512_store_si512(wq[k], _mm512_sub_epi8(_mm512_and_si512(raw[k], m4), eight));                             // elements 4k ..
      _mm512_store_si512(wq[k + 4], _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(raw[k], 4), m4), eight));  // 16 + 4k ..
    }
    _tile_loadd(4, wq, 64);
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      _tile_loadd(2, act + (g * nb + b) * kQ40AmxBlock, 32);
      _tile_zero(0);
      _tile_dpbssd(0, 2, 4);
      _tile_stored(0, sums[g], 64);
    }
#pragma GCC unroll 64
    for (int t = 0; t < kTok; ++t) {
      float da;
      std::memcpy(&da, act + (t / kGroup * nb + b) * kQ40AmxBlock + 16 * 32 + 4 * (t % kGroup), 4);
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(sums[t / kGroup][t % kGroup])), _mm512_mul_ps(dw, _mm512_set1_ps(da)), acc[t]);
    }
  }
#pragma GCC unroll 64
  for (int t = 0; t < kTok; ++t) _mm512_storeu_ps(y + t * ldy, acc[t]);
}

using AmxTileFn = void (*)(const Tiles16&, const TilePrefetch&, const uint8_t*, int64_t, int64_t, float*, int64_t);

template <int... I>
constexpr auto q40_amx_tiles(std::integer_sequence<int, I...>) {
  return std::array<AmxTileFn, sizeof...(I)>{q40_amx_tile<I + 1>...};
}

template <int... I>
constexpr auto q6k_amx_tiles(std::integer_sequence<int, I...>) {
  return std::array<AmxTileFn, sizeof...(I)>{q6k_amx_tile<I + 1>...};
}

template <int... I>
constexpr auto q4k_amx_tiles(std::integer_sequence<int, I...>) {
  return std::array<AmxTileFn, sizeof...(I)>{q4k_gemm_amx_tile<I + 1>...};
}

template <GgmlType T, int... I>
constexpr auto super_amx_tiles(std::integer_sequence<int, I...>) {
  return std::array<AmxTileFn, sizeof...(I)>{super_amx_tile<T, I + 1>...};
}

/// Tokens [0, n_tok − n_tok % 16) through `tiles` (one per number of groups), 16-row tile by tile.
template <class Tiles>
void run_groups(const Tiles& tiles, const TileConfig& cfg, const WeightView& w, int64_t n_parts, bool next_tile, const uint8_t* act,
                int64_t act_stride, int n_tok, int64_t r0, int64_t r1, float* y, int64_t ldy) {
  _tile_loadconfig(&cfg);
  for (int t0 = 0; t0 + kGroup <= n_tok; t0 += kMaxGroups * kGroup) {
    const int groups = std::min(kMaxGroups, (n_tok - t0) / kGroup);
    for (int64_t r = r0; r < r1; r += 16)
      tiles[groups - 1](Tiles16(w, r, r1), tile_prefetch<Tiles16>(w, r, n_parts, n_tok, next_tile), act + t0 * act_stride, act_stride,
                        n_parts, y + t0 * ldy + r, ldy);
  }
  _tile_release();
}

}  // namespace

void q4k_gemm_amx(const WeightView& w, bool gemm, const uint8_t* act, int64_t act_stride, int n_tok, int64_t r0, int64_t r1, float* y,
                  int64_t ldy) {
  static constexpr auto gemm_tiles = q4k_amx_tiles(std::make_integer_sequence<int, kMaxGroups>{});
  static constexpr auto gemv_tiles = super_amx_tiles<GgmlType::Q4_K>(std::make_integer_sequence<int, kMaxGroups>{});
  if (gemm) run_groups(gemm_tiles, kSuperConfig, w, w.cols / QK_K, true, act, act_stride, n_tok, r0, r1, y, ldy);
  else run_groups(gemv_tiles, kSuperConfig, w, w.cols / QK_K, true, act, act_stride, n_tok, r0, r1, y, ldy);
}

void q5k_tiled_gemm_amx(const WeightView& w, const uint8_t* act, int64_t act_stride, int n_tok, int64_t r0, int64_t r1, float* y,
                        int64_t ldy) {
  static constexpr auto tiles = super_amx_tiles<GgmlType::Q5_K>(std::make_integer_sequence<int, kMaxGroups>{});
  run_groups(tiles, kSuperConfig, w, w.cols / QK_K, true, act, act_stride, n_tok, r0, r1, y, ldy);
}

bool amx_takes(int n_tok) { return n_tok >= 16 && amx_enabled(); }

int64_t q6k_amx_pack_bytes(const WeightView& w, QOrder, int n_tok) {
  if (!amx_takes(n_tok)) return 0;  // gemm reads the rows as they are (a decode step: no copy)
  const int64_t stride = act_row_bytes(w.type, w.cols);
  return amx_copy_offset(stride, n_tok) + n_tok / kGroup * (w.cols / QK_K) * kQ6KAmxBlock;
}

void q6k_amx_pack(const WeightView& w, QOrder, const uint8_t* act, int64_t act_stride, int n_tok, int t_begin, int t_end,
                  uint8_t* packed) {
  // Only called when amx_takes(n_tok) (q6k_amx_pack_bytes). The rows of the tokens the
  // VNNI tiles take: the last n_tok % 16.
  const int amx_end = n_tok / kGroup * kGroup;
  const int r0 = std::max(t_begin, amx_end);
  if (t_end > r0) std::memcpy(packed + r0 * act_stride, act + r0 * act_stride, (t_end - r0) * act_stride);
  const int64_t nsb = w.cols / QK_K;
  uint8_t* amx = packed + amx_copy_offset(act_stride, n_tok);
  for (int t = t_begin; t < std::min(t_end, amx_end); ++t)
    for (int64_t i = 0; i < nsb; ++i) {
      const ActQ8K& a = reinterpret_cast<const ActQ8K*>(act + t * act_stride)[i];
      uint8_t* blk = amx + (t / kGroup * nsb + i) * kQ6KAmxBlock;
      // Lanes k, k + 1: dwords k + 8c, then k + 1 + 8c, of the 64 dwords of qs.
      const __m512i idx = _mm512_setr_epi32(0, 8, 16, 24, 32, 40, 48, 56, 1, 9, 17, 25, 33, 41, 49, 57);
#pragma GCC unroll 4
      for (int k = 0; k < 8; k += 2) {
        const __m512i v = _mm512_i32gather_epi32(_mm512_add_epi32(idx, _mm512_set1_epi32(k)), a.qs, 4);
        _mm256_store_si256(reinterpret_cast<__m256i*>(blk + (k * kGroup + t % kGroup) * 32), _mm512_castsi512_si256(v));
        _mm256_store_si256(reinterpret_cast<__m256i*>(blk + ((k + 1) * kGroup + t % kGroup) * 32), _mm512_extracti64x4_epi64(v, 1));
      }
      std::memcpy(blk + kQ6KAmxD + 4 * (t % kGroup), &a.d, 4);
      std::memcpy(blk + kQ6KAmxBsums + 32 * (t % kGroup), a.bsums, 32);
    }
}

void q6k_gemm_amx(const WeightView& w, const uint8_t* packed, int64_t act_stride, int n_tok, int64_t r0, int64_t r1, float* y,
                  int64_t ldy) {
  static constexpr auto tiles = q6k_amx_tiles(std::make_integer_sequence<int, kMaxGroups>{});
  const int64_t nsb = w.cols / QK_K;
  run_groups(tiles, kConfig, w, nsb, true, packed + amx_copy_offset(act_stride, n_tok), nsb * kQ6KAmxBlock / kGroup, n_tok, r0, r1, y,
             ldy);
}

void q40_gemm_amx(const WeightView& w, const uint8_t* amx, int n_tok, int64_t r0, int64_t r1, float* y, int64_t ldy) {
  static constexpr auto tiles = q40_amx_tiles(std::make_integer_sequence<int, kMaxGroups>{});
  const int64_t nb = w.cols / 32;
  run_groups(tiles, kConfig, w, nb, false, amx, nb * kQ40AmxBlock / kGroup, n_tok, r0, r1, y, ldy);  // a token's share of a group's bytes
}

}  // namespace pdserve::kernels::avx512
