// Weight layouts other than ggml's row order (WeightLayout, kernels/matmul.h), made once at
// load time in the model's private copy of the weights.
//
// kTiles16 (Q4_0, Q8_0, Q4_K, Q5_K, Q6_K): a matrix of R rows (R % 16 == 0) is R / 16 tiles;
// tile T holds rows 16T .. 16T + 15 in the bytes those rows take in ggml's layout
// (16 · row_bytes, at the same offset), block after block: block b of the 16 rows (Q4_0 /
// Q8_0: 32 values, 18 / 34 bytes a row; K-quants: a 256-value super-block, Q4_K / Q5_K /
// Q6_K 144 / 176 / 210 bytes a row) is 16 · block bytes at that many times b, and inside it
//   Q4_0: bytes [0, 32) the 16 rows' f16 scales d, row r at 2r; then for k = 0..3,
//         bytes [32 + 64k, 96 + 64k): quant bytes 4k .. 4k + 3 of every row, row r at 4r;
//   Q8_0: as Q4_0, with k = 0..7 (bytes [32 + 64k, 96 + 64k): quant bytes 4k .. 4k + 3).
//         A block is 544 bytes, so every other block's lines straddle two cache lines;
//         Q6_K's way (the d of all blocks after them, every line aligned) decoded no
//         faster than the old pair kernel here, this one 17–20 % faster (bench/RESULTS.md,
//         "Q8_0 in 16-row tiles");
//   K-quants: for each whole 16-byte slice s of the block (Q4_K s = 0..8: d, dmin,
//         scales, qs; Q5_K 0..10: the same with qh before qs; Q6_K 0..12: ql, qh,
//         scales) and k = 0..3, bytes [256s + 64k, 256s + 64k + 64): the slice's bytes
//         4k .. 4k + 3 of every row, row r at 4r. Q6_K's blocks are 16 · 208 bytes
//         apart instead (its 13 slices; 64-byte multiples), and the tile ends with
//         every block's d: block b's 16 f16 at 32b after all the blocks, row r at 2r.
// So one 64-byte load holds one int32 lane per row: what the AVX-512 row kernels
// (qgemm_avx512_repack.cc, qgemm_avx512_krows.inc) otherwise build with a 16×16
// transposition per slice (Q8_0's, qgemm_avx512_q8_0.cc, runs on tiles only). This is
// llama.cpp's idea of repacking at load (ggml-cpu/repack.cpp: block_q4_0x8, block_q4_Kx8)
// with the interleave our kernels need. The bits of every product are unchanged: the
// kernels' arithmetic does not depend on the layout.
#pragma once

#include <cstdint>

#include "kernels/matmul.h"

namespace pdserve::kernels {

/// True when `w` can take WeightLayout::kTiles16: Q4_0, Q8_0, Q4_K, Q5_K or Q6_K in ggml's layout,
/// rows % 16 == 0.
bool can_tile16(const WeightView& w);

/// Rewrites `w`'s bytes (which must be writable: the model's private copy) into
/// kTiles16 and sets w.layout. Requires can_tile16(w). Parallel over tiles (OpenMP).
void tile16_in_place(WeightView& w);

/// Writes rows [r0, r1) of a kTiles16 matrix to `out` in ggml's row layout
/// ((r1 − r0) · row_bytes bytes).
void untile16_rows(const WeightView& w, int64_t r0, int64_t r1, uint8_t* out);

}  // namespace pdserve::kernels
