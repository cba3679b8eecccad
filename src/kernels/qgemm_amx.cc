// AMX-INT8 GEMMs in llama.cpp's repacked Q4_K GEMM order (quants.h kRepackGemm), on a
// WeightLayout::kTiles16 matrix, for 16-token groups:
//   per super-block and 64 values (sub-blocks 2c, 2c+1)
//   acc = fma((float) Σ_j sc_j·Σ(q·a)_j, d_w*d_a, acc), acc_m = fma((float) Σ_j m_j·bsum32_j,
//   dmin_w*d_a, acc_m); result acc − acc_m
// as the VNNI tile (qgemm_avx512_repack.cc q4k_tile) computes it: only the exact int32 sums
// Σ(q·a)_j of 32 values come from elsewhere. One TDPBSUD (Intel SDM vol. 2, "TDPBSUD")
// gives a 32-value sub-block's sums for 16 tokens (A: 16 rows of 32 signed activations) ×
// 16 weight rows (B: 8 rows of 16 dwords, dword n = 4 unsigned weights of row n): exactly
// the transposed dwords a Tiles16 slice holds, once the nibbles are split. The float steps
// then read the C tile row by row: row t = token t's sums for the 16 weight rows, the
// VNNI tile's lane layout.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <utility>

#include "kernels/qgemm_avx512.h"
#include "kernels/quant_types.h"

namespace pdserve::kernels::avx512 {
namespace {

/// Tile registers: C0 / C1 (tmm0 / tmm1) the sums of sub-blocks 2c / 2c+1, A0 / A1 (tmm2 /
/// tmm3) their activations, B0 / B1 (tmm4 / tmm5) their weights. (GCC's _tile_* macros
/// paste the register number into the instruction: literals below.)
enum : int { kC0 = 0, kC1 = 1, kA0 = 2, kA1 = 3, kB0 = 4, kB1 = 5 };

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
  for (int t : {kA0, kA1}) c.rows[t] = 16, c.colsb[t] = 32;  // 16 tokens × 32 int8
  for (int t : {kB0, kB1}) c.rows[t] = 8, c.colsb[t] = 64;   // 8 dwords × 16 rows
  return c;
}
constexpr TileConfig kConfig = make_config();

constexpr int kGroup = 16;      // tokens per A / C tile
constexpr int kMaxGroups = 4;   // token groups per pass over a 16-row tile (the weights' unpacking is shared)

/// A super-block of 16 rows: its header decoded as q4k_tile decodes it (the scales as
/// floats, the mins as int16 pairs m_2c | m_2c+1 << 16) and its quants as B tiles.
struct alignas(64) Q4KSuper {
  __m512 d, dmin, sc[4][2];
  __m512i mn_pair[4];
  uint8_t wq[4][2][8][64];  // sub-block 2c + h: B row m = elements 4m .. 4m+3 of the 16 rows
};

inline void unpack_super(const Tiles16& rt, int64_t i, Q4KSuper* o) {
  constexpr int64_t kBlock = sizeof(BlockQ4_K);
  const __m512i m4 = _mm512_set1_epi8(0x0F), ff = _mm512_set1_epi32(0xFF);
  const __m512i km1 = _mm512_set1_epi32(0x3f3f3f3f), km2 = _mm512_set1_epi32(0x0f0f0f0f), km3 = _mm512_set1_epi32(0x03030303);
  __m512i hd[4];  // dword 0 = d | dmin << 16, dwords 1..3 = scales[0..11]
  rt.slice(kBlock, i, 0, hd);
  o->d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(hd[0]));
  o->dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(hd[0], 16)));
  const __m512i sc03 = _mm512_and_si512(hd[1], km1), mn03 = _mm512_and_si512(hd[2], km1);
  const __m512i sc47 = _mm512_or_si512(_mm512_and_si512(hd[3], km2), _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(hd[1], 6), km3), 4));
  const __m512i mn47 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(hd[3], 4), km2),
                                       _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(hd[2], 6), km3), 4));
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    const int sh = 16 * (c % 2);
    const __m512i mns = c < 2 ? mn03 : mn47, scs = c < 2 ? sc03 : sc47;
    o->mn_pair[c] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(mns, sh), ff),
                                    _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(mns, sh + 8), ff), 16));
    o->sc[c][0] = _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(scs, sh), ff));
    o->sc[c][1] = _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(scs, sh + 8), ff));
    // qs[32c .. 32c+31]: low nibbles = sub-block 2c, high = 2c+1.
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m512i raw[4];
      rt.slice(kBlock, i, offsetof(BlockQ4_K, qs) + 32 * c + 16 * h, raw);
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        _mm512_store_si512(o->wq[c][0][4 * h + k], _mm512_and_si512(raw[k], m4));
        _mm512_store_si512(o->wq[c][1][4 * h + k], _mm512_and_si512(_mm512_srli_epi16(raw[k], 4), m4));
      }
    }
  }
}

/// Sub-blocks 2c, 2c+1 of 16 tokens (their quants at a_qs + 64c, act_stride apart) × the
/// super-block's 16 rows: sums[h][t][r] = Σ(q·a) of sub-block 2c + h, exact.
inline void tile_sums(const uint8_t* a_qs, int64_t act_stride, const Q4KSuper& w, int c, int32_t sums[2][kGroup][16]) {
  _tile_loadd(2, a_qs + 64 * c, act_stride);
  _tile_loadd(3, a_qs + 64 * c + 32, act_stride);
  _tile_loadd(4, w.wq[c][0], 64);
  _tile_loadd(5, w.wq[c][1], 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_dpbsud(0, 2, 4);
  _tile_dpbsud(1, 3, 5);
  _tile_stored(0, sums[0], 64);
  _tile_stored(1, sums[1], 64);
}

/// q4k_tile's fma pair of every 64 values of a super-block for one token (row tg of the
/// group's sums).
inline void float_steps(const Q4KSuper& w, const ActQ8K& a, const int32_t (*sums)[2][kGroup][16], int tg, float* acc, float* accm) {
  const __m512 da = _mm512_set1_ps(a.d);
  const __m512 dd = _mm512_mul_ps(w.d, da), dm = _mm512_mul_ps(w.dmin, da);
  __m512 sa = _mm512_load_ps(acc), sm = _mm512_load_ps(accm);
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    // Σ_j sc_j·Σ(q·a)_j in float, exact (q4k_tile: |Σ(q·a)_j| < 2^16, sc_j < 2^6).
    const __m512 sl = _mm512_cvtepi32_ps(_mm512_load_si512(sums[c][0][tg]));
    const __m512 sh = _mm512_cvtepi32_ps(_mm512_load_si512(sums[c][1][tg]));
    const __m512 fs = _mm512_fmadd_ps(sh, w.sc[c][1], _mm512_mul_ps(sl, w.sc[c][0]));
    const __m512i im = _mm512_dpwssd_epi32(_mm512_setzero_si512(), w.mn_pair[c], _mm512_set1_epi32(load_i32(a.bsum32 + 2 * c)));
    sa = _mm512_fmadd_ps(fs, dd, sa);
    sm = _mm512_fmadd_ps(_mm512_cvtepi32_ps(im), dm, sm);
  }
  _mm512_store_ps(acc, sa);
  _mm512_store_ps(accm, sm);
}

/// One 16-row Tiles16 tile of Q4_K against G groups of 16 tokens (ActQ8K rows at
/// act + t·act_stride); y[t·ldy + r] for the tile's 16 rows.
template <int G>
void q4k_amx_tile(const Tiles16& rt, const TilePrefetch& pf, const uint8_t* act, int64_t act_stride, int64_t nsb, float* y,
                  int64_t ldy) {
  constexpr int kTok = G * kGroup;
  alignas(64) float acc[kTok][16] = {}, accm[kTok][16] = {};
  Q4KSuper w;
  alignas(64) int32_t sums[4][2][kGroup][16];  // C tiles of one group
  for (int64_t i = 0; i < nsb; ++i) {
    pf.part(i);
    unpack_super(rt, i, &w);
    for (int g = 0; g < G; ++g) {
      const uint8_t* a = act + g * kGroup * act_stride + i * static_cast<int64_t>(sizeof(ActQ8K));
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) tile_sums(a + offsetof(ActQ8K, qs), act_stride, w, c, sums[c]);
      for (int tg = 0; tg < kGroup; ++tg)
        float_steps(w, *reinterpret_cast<const ActQ8K*>(a + tg * act_stride), sums, tg, acc[g * kGroup + tg], accm[g * kGroup + tg]);
    }
  }
  for (int t = 0; t < kTok; ++t) _mm512_storeu_ps(y + t * ldy, _mm512_sub_ps(_mm512_load_ps(acc[t]), _mm512_load_ps(accm[t])));
}

// ---- The GEMV order (kRepackGemv: one fma pair per super-block; batched decode) ----
//
// A super-block's Σ_j sc_j·Σ(q·a)_j is one exact int32 there, so the scales go into the
// weights: sc = lo + 16·hi (lo < 16, hi < 4), B_lo = q·lo (≤ 225) and B_hi = q·hi (≤ 45)
// fit unsigned bytes, and two products over the whole super-block (K = 64 per step, C
// accumulating) give Σ lo_j·S_j and Σ hi_j·S_j; the sum is C_lo + 16·C_hi (|Σ| < 2^31).

/// Tiles of the GEMV kernel: C_lo, C_hi (tmm0, tmm1), A (tmm2: 16 tokens × 64 int8),
/// B_lo, B_hi (tmm3, tmm4: 16 dwords × 16 rows).
constexpr TileConfig make_gemv_config() {
  TileConfig c;
  for (int t = 0; t < 5; ++t) c.rows[t] = 16, c.colsb[t] = 64;
  return c;
}
constexpr TileConfig kGemvConfig = make_gemv_config();

/// A super-block of 16 rows for the GEMV order: d, dmin, the mins as int16 pairs, and the
/// quants times the scales' parts as B tiles.
struct alignas(64) Q4KSuperGemv {
  __m512 d, dmin;
  __m512i mn_pair[4];
  uint8_t b[4][2][16][64];  // values 64c .. 64c+63, part lo / hi: B row m = values 4m .. 4m+3 of the 16 rows
};

inline void unpack_super_gemv(const Tiles16& rt, int64_t i, Q4KSuperGemv* o) {
  constexpr int64_t kBlock = sizeof(BlockQ4_K);
  const __m512i m4 = _mm512_set1_epi8(0x0F), ff = _mm512_set1_epi32(0xFF), w16 = _mm512_set1_epi32(0x10001);
  const __m512i km1 = _mm512_set1_epi32(0x3f3f3f3f), km2 = _mm512_set1_epi32(0x0f0f0f0f), km3 = _mm512_set1_epi32(0x03030303);
  __m512i hd[4];  // dword 0 = d | dmin << 16, dwords 1..3 = scales[0..11]
  rt.slice(kBlock, i, 0, hd);
  o->d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(hd[0]));
  o->dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(hd[0], 16)));
  const __m512i sc03 = _mm512_and_si512(hd[1], km1), mn03 = _mm512_and_si512(hd[2], km1);
  const __m512i sc47 = _mm512_or_si512(_mm512_and_si512(hd[3], km2), _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(hd[1], 6), km3), 4));
  const __m512i mn47 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(hd[3], 4), km2),
                                       _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(hd[2], 6), km3), 4));
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    const int sh = 16 * (c % 2);
    const __m512i mns = c < 2 ? mn03 : mn47, scs = c < 2 ? sc03 : sc47;
    o->mn_pair[c] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(mns, sh), ff),
                                    _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(mns, sh + 8), ff), 16));
    // Sub-blocks 2c (low nibbles) and 2c+1 (high): each part of the scale in both int16
    // halves of its row's dword, for VPMULLW (q·part ≤ 225: each byte's product stays in its byte).
    __m512i part[2][2];
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m512i sc = _mm512_and_si512(_mm512_srli_epi32(scs, sh + 8 * h), ff);
      part[h][0] = _mm512_mullo_epi32(_mm512_and_si512(sc, _mm512_set1_epi32(15)), w16);
      part[h][1] = _mm512_mullo_epi32(_mm512_srli_epi32(sc, 4), w16);
    }
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m512i raw[4];
      rt.slice(kBlock, i, offsetof(BlockQ4_K, qs) + 32 * c + 16 * h, raw);
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        const __m512i lo = _mm512_and_si512(raw[k], m4), hi = _mm512_and_si512(_mm512_srli_epi16(raw[k], 4), m4);
#pragma GCC unroll 2
        for (int p = 0; p < 2; ++p) {
          _mm512_store_si512(o->b[c][p][4 * h + k], _mm512_mullo_epi16(lo, part[0][p]));
          _mm512_store_si512(o->b[c][p][8 + 4 * h + k], _mm512_mullo_epi16(hi, part[1][p]));
        }
      }
    }
  }
}

/// The GEMV order's q4k_amx_tile.
template <int G>
void q4k_amx_tile_gemv(const Tiles16& rt, const TilePrefetch& pf, const uint8_t* act, int64_t act_stride, int64_t nsb, float* y,
                       int64_t ldy) {
  constexpr int kTok = G * kGroup;
  alignas(64) float acc[kTok][16] = {}, accm[kTok][16] = {};
  Q4KSuperGemv w;
  alignas(64) int32_t sums[2][kGroup][16];  // C_lo, C_hi of one group
  for (int64_t i = 0; i < nsb; ++i) {
    pf.part(i);
    unpack_super_gemv(rt, i, &w);
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
        const __m512i is = _mm512_add_epi32(_mm512_load_si512(sums[0][tg]), _mm512_slli_epi32(_mm512_load_si512(sums[1][tg]), 4));
        __m512i im = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) im = _mm512_dpwssd_epi32(im, w.mn_pair[c], _mm512_set1_epi32(load_i32(at.bsum32 + 2 * c)));
        const __m512 da = _mm512_set1_ps(at.d);
        _mm512_store_ps(acc[t], _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), _mm512_mul_ps(w.d, da), _mm512_load_ps(acc[t])));
        _mm512_store_ps(accm[t], _mm512_fmadd_ps(_mm512_cvtepi32_ps(im), _mm512_mul_ps(w.dmin, da), _mm512_load_ps(accm[t])));
      }
    }
  }
  for (int t = 0; t < kTok; ++t) _mm512_storeu_ps(y + t * ldy, _mm512_sub_ps(_mm512_load_ps(acc[t]), _mm512_load_ps(accm[t])));
}

using AmxTileFn = void (*)(const Tiles16&, const TilePrefetch&, const uint8_t*, int64_t, int64_t, float*, int64_t);

template <bool kGemm, int... I>
constexpr auto q4k_amx_tiles(std::integer_sequence<int, I...>) {
  if constexpr (kGemm) return std::array<AmxTileFn, sizeof...(I)>{q4k_amx_tile<I + 1>...};
  else return std::array<AmxTileFn, sizeof...(I)>{q4k_amx_tile_gemv<I + 1>...};
}

}  // namespace

void q4k_gemm_amx(const WeightView& w, bool gemm, const uint8_t* act, int64_t act_stride, int n_tok, int64_t r0, int64_t r1, float* y,
                  int64_t ldy) {
  static constexpr auto gemm_tiles = q4k_amx_tiles<true>(std::make_integer_sequence<int, kMaxGroups>{});
  static constexpr auto gemv_tiles = q4k_amx_tiles<false>(std::make_integer_sequence<int, kMaxGroups>{});
  const auto& tiles = gemm ? gemm_tiles : gemv_tiles;
  const int64_t nsb = w.cols / QK_K;
  _tile_loadconfig(gemm ? &kConfig : &kGemvConfig);
  for (int t0 = 0; t0 + kGroup <= n_tok; t0 += kMaxGroups * kGroup) {
    const int groups = std::min(kMaxGroups, (n_tok - t0) / kGroup);
    for (int64_t r = r0; r < r1; r += 16)
      tiles[groups - 1](Tiles16(w, r, r1), tile_prefetch<Tiles16>(w, r, nsb, n_tok), act + t0 * act_stride, act_stride, nsb,
                        y + t0 * ldy + r, ldy);
  }
  _tile_release();
}

}  // namespace pdserve::kernels::avx512
