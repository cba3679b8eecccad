// Internal to the AVX-512 VNNI quantised kernels (qgemm_avx512*.cc, each compiled for
// AVX-512 F/BW/VL/DQ + VNNI): the kernel families and the helpers they share.
//
// Every kernel reproduces quants.h vec_dot_scalar bit for bit: the integer dot products
// of a block are exact whatever instructions compute them, and the float operations per
// (row, token) are the scalar path's, one for one, in its order. Two layouts:
//  * pair kernels (vec_dot orders): a 512-bit register holds one weight block (or
//    32-value chunk) twice and the same block of two tokens, so its int32 lanes are the
//    scalar path's 8 group lanes for both tokens (qgemm_avx512_legacy.cc, _kquant.cc);
//  * row kernels: 16 rows' weights are transposed (on the fly, RowTile, or once at load,
//    Tiles16) so each int32 lane is one row, and every token's activations are broadcast
//    4 bytes at a time: llama.cpp's repacked orders, one float per row and token
//    (qgemm_avx512_repack.cc), the K-quants' vec_dot / tiled orders
//    (qgemm_avx512_krows.inc) and Q8_0's vec_dot order (qgemm_avx512_q8_0.cc, Tiles16 only).
//    A GEMM of more than kAheadMaxTokens tokens on Tiles16 runs two tiles per pass where
//    that measured faster (Q4_0, Q4_K, Q5_K's tiled order: q40_tile_pair, q4k_tile_pair,
//    tile_tiled_pair), so that each broadcast feeds two VPDPBUSD: one broadcast per VPDPBUSD
//    caps the Ice Lake Xeon at 57 % of its int8 peak (BM_VnniWith/bcast_per_1).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/qgemm.h"
#include "kernels/quant_types.h"
#include "kernels/tile_prefetch.h"

namespace pdserve::kernels::avx512 {

// Pair kernels of the 32-blocks (Q8_0, Q4_0, Q4_1, Q5_0), vec_dot order.
QKernel legacy_pair_kernel(gguf::GgmlType t);
// Pair kernels of the K-quants Q4_K and Q6_K, vec_dot order.
QKernel kquant_pair_kernel(gguf::GgmlType t);
// Row kernels of the repacked orders: Q4_0 (GEMV = GEMM order) and Q4_K (`order`).
QKernel q4_0_row_kernel();
// The row kernels on a WeightLayout::kTiles16 matrix (kernels/weight_layout.h).
QKernel q4_0_tiles16_kernel();
// Q8_0 (ggml's vec_dot order, every token count) on a WeightLayout::kTiles16 matrix
// (qgemm_avx512_q8_0.cc).
QKernel q8_0_tiles16_kernel();
QKernel q4_K_row_kernel(QOrder order);
QKernel q4_K_tiles16_kernel(QOrder order);  // on a WeightLayout::kTiles16 matrix
/// Whether the AMX tiles take a run of n_tok tokens (its whole 16-token groups; the VNNI tiles
/// the rest): n_tok >= 16 and amx_enabled(). Every AMX GEMM's caller asks this one; the packs
/// of Q4_0 and Q6_K then add their AMX copies (below) and their gemms read them.
bool amx_takes(int n_tok);
/// Where a run's AMX copy starts in its packed activations: after n_tok rows of row_bytes,
/// 64-byte aligned.
inline int64_t amx_copy_offset(int64_t row_bytes, int n_tok) { return (n_tok * row_bytes + 63) / 64 * 64; }
/// The AMX-INT8 form of q4_K_tiles16_kernel's GEMM (qgemm_avx512_amx.cc), in the kRepackGemm
/// order (`gemm`) or the kRepackGemv one: tokens [0, n_tok − n_tok % 16) of `act` (ActQ8K
/// rows, act_stride bytes apart) against rows [r0, r1) (multiples of 16) of the kTiles16
/// matrix w, into y[t·ldy + r]; the same bits. Only when amx_takes(n_tok).
void q4k_gemm_amx(const WeightView& w, bool gemm, const uint8_t* act, int64_t act_stride, int n_tok, int64_t r0, int64_t r1, float* y,
                  int64_t ldy);
/// Q5_K's kTiled GEMM (kquant_row_kernel(Q5_K, kTiled, kTiles16)'s) on AMX-INT8 tiles, as
/// q4k_gemm_amx; the same bits. Only when amx_takes(n_tok).
void q5k_tiled_gemm_amx(const WeightView& w, const uint8_t* act, int64_t act_stride, int n_tok, int64_t r0, int64_t r1, float* y,
                        int64_t ldy);
/// q40_pack's record of one token and 32-value block: its bytes, and where d_a lies in it.
constexpr int64_t kQ40Record = 48, kQ40D = 36;
/// The AMX copy of Q4_0's packed activations (q4_0_tiles16_kernel's pack, when amx_takes(n_tok)),
/// after the records (amx_copy_offset(nb·kQ40Record, n_tok)): for each whole group of
/// 16 tokens and each block b, kQ40AmxBlock bytes at (group·nb + b)·kQ40AmxBlock: the 16
/// tokens' 32 signed values (an A tile, rows 32 bytes apart), then their 16 d_a. A tile
/// load of strided records (16 rows of 32 bytes, a record's stride apart) read from L2 took
/// twice as long as the tile product (bench/RESULTS.md, "AMX for Q6_K; Q4_0's activations in tile order").
constexpr int64_t kQ40AmxBlock = 16 * 32 + 16 * 4;
/// The AMX copy of Q8_K activations for Q6_K's AMX GEMM (q6k_amx_pack, when amx_takes), after
/// the n_tok ActQ8K rows (their stride as given; amx_copy_offset(act_stride, n_tok)): for
/// each whole group of 16 tokens and super-block i, kQ6KAmxBlock bytes at
/// (group·nsb + i)·kQ6KAmxBlock: for each lane k = 0..7 an A tile (16 rows of 32 bytes, one a token: its values 32c+4k .. 32c+4k+3 of the
/// chunks c = 0..7, ggml's vec_dot lane k), then the 16 d_a at kQ6KAmxD and the 16 bsums rows
/// (16 int16 each) at kQ6KAmxBsums.
constexpr int64_t kQ6KAmxD = 8 * 16 * 32, kQ6KAmxBsums = kQ6KAmxD + 16 * 4, kQ6KAmxBlock = kQ6KAmxBsums + 16 * 32;
/// QPackBytesFn / QPackFn of the Q6_K tiles16 kernel: when amx_takes(n_tok), room for the
/// n_tok ActQ8K rows with those of the last n_tok % 16 tokens (the VNNI tiles') copied, then the
/// AMX copy; else 0 bytes: no pack, the gemm reads the quantize_act rows.
int64_t q6k_amx_pack_bytes(const WeightView& w, QOrder order, int n_tok);
void q6k_amx_pack(const WeightView& w, QOrder order, const uint8_t* act, int64_t act_stride, int n_tok, int t_begin, int t_end,
                  uint8_t* packed);
/// Q6_K's GEMM (kVecDot, kquant_row_kernel(Q6_K, kVecDot, kTiles16)'s) on AMX-INT8 tiles:
/// tokens [0, n_tok − n_tok % 16) of q6k_amx_pack's `packed` (rows act_stride apart, then the
/// AMX copy) against rows [r0, r1) (multiples of 16) of the kTiles16 matrix w; the same bits.
/// Only when amx_takes(n_tok).
void q6k_gemm_amx(const WeightView& w, const uint8_t* packed, int64_t act_stride, int n_tok, int64_t r0, int64_t r1, float* y,
                  int64_t ldy);
/// Q4_0's GEMM (q4_0_tiles16_kernel's, either repacked order: they are one) on AMX-INT8
/// tiles: tokens [0, n_tok − n_tok % 16) of the AMX copy above (`amx`: its first group),
/// rows [r0, r1) (multiples of 16) of the kTiles16 matrix w; the same bits. Only when
/// amx_takes(n_tok).
void q40_gemm_amx(const WeightView& w, const uint8_t* amx, int n_tok, int64_t r0, int64_t r1, float* y, int64_t ldy);
// Row kernels of Q5_K (kVecDot, kTiled; `layout` kRows or kTiles16) and Q6_K (kVecDot,
// kTiles16 only) in ggml's orders; no kernel (gemm null) for the rest.
QKernel kquant_row_kernel(gguf::GgmlType t, QOrder order, WeightLayout layout);
/// The same kernels built with GFNI (qgemm_avx512_krows_gfni.cc), which kquant_row_kernel
/// returns while gfni_enabled(); perm: the chunk-pair pack by VPERMT2W (prefer_vpermt2w()).
QKernel kquant_row_kernel_gfni(gguf::GgmlType t, QOrder order, WeightLayout layout, bool perm);

/// The GF2P8AFFINEQB matrix (a qword) whose product moves bit `from` of every byte to bit
/// `to`: output bit i is the parity of (matrix byte 7 − i) & input (Intel SDM, GF2P8AFFINEQB).
/// For the files built with GFNI (qgemm_avx512_krows_gfni.cc, qgemm_avx512_amx.cc).
constexpr long long gf_move_bit(int from, int to) { return static_cast<long long>((1ULL << from) << (8 * (7 - to))); }

/// f16 at p (unaligned) as float.
inline float load_f16(const void* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

inline int32_t load_i32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

/// acc + VPDPBUSD(w, the 4 bytes at p broadcast to every int32 lane): w unsigned, p's bytes
/// signed. One instruction with an embedded-broadcast memory operand (m32bcst); GCC 12
/// compiles the intrinsic form, _mm512_dpbusd_epi32(acc, w, _mm512_set1_epi32(...)), to a
/// separate VPBROADCASTD, one more instruction per multiply-add for the front end.
inline __m512i dpbusd_bcast(__m512i acc, __m512i w, const int8_t* p) {
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*reinterpret_cast<const int32_t*>(p)));
  return acc;
}

/// Q5_K nibbles v of chunk c (one dword of 16 rows) with each element's bit 4 added: bit c
/// of the matching qh dword.
inline __m512i add_bit4(__m512i v, __m512i qh, int c) {
  const __mmask64 hb = _mm512_test_epi8_mask(qh, _mm512_set1_epi8(static_cast<char>(1 << c)));
  return _mm512_mask_add_epi8(v, hb, v, _mm512_set1_epi8(16));
}

/// A VPSHUFB control that gives every dword bytes (b0, b1, b2, b3) of itself (each 0..3, or
/// −1 for a zero byte).
struct DwordBytes {
  alignas(64) int8_t c[64];
  constexpr DwordBytes(int b0, int b1, int b2, int b3) : c{} {
    const int b[4] = {b0, b1, b2, b3};
    for (int i = 0; i < 64; ++i) c[i] = static_cast<int8_t>(b[i % 4] < 0 ? -128 : i % 16 / 4 * 4 + b[i % 4]);  // within a 128-bit lane
  }
  __m512i load() const { return _mm512_load_si512(c); }
};
// Bytes (0, 1) and (2, 3) as two words, zero-extended (Q4_K / Q5_K scale and min pairs);
// byte k as the dword.
inline constexpr DwordBytes kLowPair[2] = {{0, -1, 1, -1}, {2, -1, 3, -1}};
inline constexpr DwordBytes kByte[4] = {{0, -1, -1, -1}, {1, -1, -1, -1}, {2, -1, -1, -1}, {3, -1, -1, -1}};
// Byte k in both words of the dword (zero-extended).
inline constexpr DwordBytes kByteTwice[4] = {{0, -1, 0, -1}, {1, -1, 1, -1}, {2, -1, 2, -1}, {3, -1, 3, -1}};

/// The header of a Q4_K or Q5_K super-block for 16 rows (int32 lane r = row r): d, dmin and
/// the 6-bit scales and mins of its 8 sub-blocks, unpacked as ggml's get_scale_min_k4 (its
/// kmask form). Src: RowTile or Tiles16 (slice()).
struct K4Header {
  __m512 d, dmin;
  __m512i sc[2], mn[2];  // byte j of sc[0] / sc[1]: scale j / j + 4 (mn: the mins)
  template <class Src>
  K4Header(const Src& rt, int64_t block_bytes, int64_t i) {
    const __m512i km1 = _mm512_set1_epi32(0x3f3f3f3f), km2 = _mm512_set1_epi32(0x0f0f0f0f), km3 = _mm512_set1_epi32(0x03030303);
    __m512i hd[4];  // dword 0 = d | dmin << 16, dwords 1..3 = scales[0..11]
    rt.slice(block_bytes, i, 0, hd);
    d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(hd[0]));
    dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(hd[0], 16)));
    sc[0] = _mm512_and_si512(hd[1], km1);
    mn[0] = _mm512_and_si512(hd[2], km1);
    sc[1] = _mm512_or_si512(_mm512_and_si512(hd[3], km2), _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(hd[1], 6), km3), 4));
    mn[1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(hd[3], 4), km2),
                            _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(hd[2], 6), km3), 4));
  }
  /// The scale of sub-block j (0..7) of each row, as int32 (one VPSHUFB).
  __m512i scale(int j) const { return _mm512_shuffle_epi8(sc[j / 4], kByte[j % 4].load()); }
  /// sc_2c | sc_2c+1 << 16 of each row (c = 0..3; int16 pairs for VPDPWSSD).
  __m512i scale_pair(int c) const { return _mm512_shuffle_epi8(sc[c / 2], kLowPair[c % 2].load()); }
  /// m_2c | m_2c+1 << 16 of each row (c = 0..3; int16 pairs for VPDPWSSD).
  __m512i min_pair(int c) const { return _mm512_shuffle_epi8(mn[c / 2], kLowPair[c % 2].load()); }
};

/// 16 rows × 16 bytes transposed: out[k] int32 lane r = bytes 4k..4k+3 of the 16 bytes
/// at rp[r] + off.
inline void transpose16x16(const uint8_t* const* rp, int64_t off, __m512i out[4]) {
  __m512i y[4];
#pragma GCC unroll 16
  for (int q = 0; q < 4; ++q) {  // y[q] 128-bit lane i = row 4i + q (masked broadcast loads: no shuffles)
    auto ld = [&](int r) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(rp[r] + off)); };
    __m512i v = _mm512_broadcast_i32x4(ld(q));
    v = _mm512_mask_broadcast_i32x4(v, 0x00F0, ld(4 + q));
    v = _mm512_mask_broadcast_i32x4(v, 0x0F00, ld(8 + q));
    y[q] = _mm512_mask_broadcast_i32x4(v, 0xF000, ld(12 + q));
  }
  const __m512i t0 = _mm512_unpacklo_epi32(y[0], y[1]), t1 = _mm512_unpackhi_epi32(y[0], y[1]);
  const __m512i t2 = _mm512_unpacklo_epi32(y[2], y[3]), t3 = _mm512_unpackhi_epi32(y[2], y[3]);
  out[0] = _mm512_unpacklo_epi64(t0, t2);
  out[1] = _mm512_unpackhi_epi64(t0, t2);
  out[2] = _mm512_unpacklo_epi64(t1, t3);
  out[3] = _mm512_unpackhi_epi64(t1, t3);
}

/// Row pointers of a 16-row tile (rows past r1 repeat the last row) and the mask of the
/// real ones.
struct RowTile {
  const uint8_t* rp[16];
  __mmask16 mask;
  RowTile(const WeightView& w, int64_t rt, int64_t r1) {
    const auto* base = static_cast<const uint8_t*>(w.data);
#pragma GCC unroll 16
    for (int r = 0; r < 16; ++r) rp[r] = base + std::min(rt + r, r1 - 1) * w.row_bytes;
    mask = static_cast<__mmask16>((1u << std::min<int64_t>(16, r1 - rt)) - 1);
  }
  /// Bytes [off, off + 16) of block i (of `block_bytes` a row) of the 16 rows, transposed.
  void slice(int64_t block_bytes, int64_t i, int64_t off, __m512i out[4]) const { transpose16x16(rp, i * block_bytes + off, out); }
  /// Q4_0 block b of the 16 rows: the quant bytes transposed, the scales as floats.
  void q4_0_block(int64_t b, __m512i raw[4], __m512* dw) const {
    const int64_t bo = b * static_cast<int64_t>(sizeof(BlockQ4_0));
    transpose16x16(rp, bo + 2, raw);
    // The 16 rows' scales: scalar loads (a gather here costs more than the rest of the block).
    alignas(32) uint16_t dh[16];
#pragma GCC unroll 16
    for (int r = 0; r < 16; ++r) std::memcpy(&dh[r], rp[r] + bo, 2);
    *dw = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(dh)));
  }
};

/// A 16-row tile of a WeightLayout::kTiles16 matrix (weight_layout.h): the same Q4_0
/// blocks and K-quant slices as RowTile's, loaded as they lie.
struct Tiles16 {
  const uint8_t* tile;
  static constexpr __mmask16 mask = 0xFFFF;
  Tiles16(const WeightView& w, int64_t rt, int64_t) : tile(static_cast<const uint8_t*>(w.data) + rt * w.row_bytes) {}
  void slice(int64_t block_bytes, int64_t i, int64_t off, __m512i out[4]) const {
    const uint8_t* p = tile + 16 * (i * block_bytes + off);  // off % 16 == 0: slice off / 16
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) out[k] = _mm512_loadu_si512(p + 64 * k);
  }
  /// One 64-byte line of a slice: dword k of the 16 rows in slice off / 16 of block i.
  __m512i line(int64_t block_bytes, int64_t i, int64_t off, int k) const {
    return _mm512_loadu_si512(tile + 16 * (i * block_bytes + off) + 64 * k);
  }
  /// The 16 rows' f16 at byte `off` of the tile (Q6_K's d), as floats.
  __m512 f16_at(int64_t off) const { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(tile + off))); }
  void q4_0_block(int64_t b, __m512i raw[4], __m512* dw) const {
    const uint8_t* p = tile + b * 16 * static_cast<int64_t>(sizeof(BlockQ4_0));
    *dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) raw[k] = _mm512_loadu_si512(p + 32 + 64 * k);
  }
};

/// The prefetch of a 16-row tile's kernel at row r over n_parts iterations, in a call of
/// n_tok tokens. A Tiles16 call of up to kAheadMaxTokens tokens (near the memory bound)
/// reads its tile front to back and prefetches TilePrefetch::ahead() (B=8 batched decode
/// 1.05-1.08x as fast as with the next tile's prefetch); otherwise the next tile (RowTile: 16 rows
/// read side by side; Tiles16 GEMMs, bound by compute, which ahead() made 0.88-0.91x as
/// fast: Q4_K_M B=32 and pp512, paired, 2026-12-05), or nothing where the caller measured
/// that better (`next_tile` false). `l1_on_amd`: ahead()'s.
constexpr int kAheadMaxTokens = 8;
template <class Src>
TilePrefetch tile_prefetch(const WeightView& w, int64_t r, int64_t n_parts, int n_tok, bool next_tile = true, bool l1_on_amd = true) {
  if (std::is_same_v<Src, Tiles16> && n_tok <= kAheadMaxTokens) return TilePrefetch::ahead(w, r, 16, n_parts, l1_on_amd);
  return next_tile ? TilePrefetch(w, r + 16, 16, n_parts) : TilePrefetch();
}

/// The two-tile passes of a Tiles16 GEMM (q40_tile_pair, q4k_tile_pair, tile_tiled_pair: each
/// broadcast feeds both tiles). In a call of more than kAheadMaxTokens tokens, pair(rt, pf, r)
/// runs on rows r .. r + 31 of [r0, r1) while 32 rows remain, pf prefetching the next pair's
/// two tiles in n_parts parts each. Returns the first row left for the one-tile kernel.
template <class PairFn>
int64_t tile_pairs(const WeightView& w, int64_t r0, int64_t r1, int n_tok, int64_t n_parts, PairFn&& pair) {
  int64_t r = r0;
  if (n_tok <= kAheadMaxTokens) return r;
  for (; r + 32 <= r1; r += 32) {
    const Tiles16 rt[2] = {Tiles16(w, r, r1), Tiles16(w, r + 16, r1)};
    const TilePrefetch pf[2] = {TilePrefetch(w, r + 32, 16, n_parts), TilePrefetch(w, r + 48, 16, n_parts)};
    pair(rt, pf, r);
  }
  return r;
}

}  // namespace pdserve::kernels::avx512
