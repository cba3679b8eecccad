// Internal to the AVX-512 VNNI quantised kernels (qgemm_avx512*.cc, each compiled for
// AVX-512 F/BW/VL/DQ + VNNI): the kernel families and the helpers they share.
//
// Every kernel reproduces quants.h vec_dot_scalar bit for bit: the integer dot products
// of a block are exact whatever instructions compute them, and the float operations per
// (row, token) are the scalar path's, one for one, in its order. Two layouts:
//  * pair kernels (vec_dot orders): a 512-bit register holds one weight block (or
//    32-value chunk) twice and the same block of two tokens, so its int32 lanes are the
//    scalar path's 8 group lanes for both tokens (qgemm_avx512_legacy.cc, _kquant.cc);
//  * row kernels (llama.cpp's repacked orders, one float per row and token): 16 rows'
//    weights are transposed on the fly so each int32 lane is one row, and every token's
//    activations are broadcast 4 bytes at a time (qgemm_avx512_repack.cc).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/qgemm.h"
#include "kernels/tile_prefetch.h"

namespace pdserve::kernels::avx512 {

// Pair kernels of the 32-blocks (Q8_0, Q4_0, Q4_1, Q5_0), vec_dot order.
QKernel legacy_pair_kernel(gguf::GgmlType t);
// Pair kernels of the K-quants (Q4_K, Q5_K, Q6_K), vec_dot order.
QKernel kquant_pair_kernel(gguf::GgmlType t);
// Row kernels of the repacked orders: Q4_0 (GEMV = GEMM order) and Q4_K (`order`).
QKernel q4_0_row_kernel();
// The row kernels on a WeightLayout::kTiles16 matrix (kernels/weight_layout.h).
QKernel q4_0_tiles16_kernel();
QKernel q4_K_row_kernel(QOrder order);
QKernel q4_K_tiles16_kernel(QOrder order);  // on a WeightLayout::kTiles16 matrix

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

}  // namespace pdserve::kernels::avx512
