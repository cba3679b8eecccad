// Internal: matrix products against float-type weights (F32, F16, BF16) in llama.cpp's
// reduction orders (see matmul.h); kernels/matmul.cc dispatches and threads them.
#pragma once

#include <cstdint>

#include "kernels/matmul.h"

namespace pdserve::kernels {

/// Rows per tile of matmul_float_rows: row ranges should be multiples of it (any range
/// is correct; a multiple wastes no work).
constexpr int64_t kFloatRowChunk = 48;

/// y[t * ldy + r] for r in [r0, r1), t in [0, n_tok), F32 / F16 / BF16 weights. `x`: the
/// tokens' activations (cols floats each; for F16 weights already rounded to f16), `xb`:
/// the same as bf16 bits (BF16 weights, else unused). gemm_order: per-token flags
/// (matmul.h), nullptr = all 0. isa: the AVX-512 tiles when resolve_isa(isa) is kAvx512Vnni
/// and the CPU has AVX512-BF16, else the portable path (the same bits).
void matmul_float_rows(const WeightView& w, const float* x, const uint16_t* xb, int n_tok, const uint8_t* gemm_order, int64_t r0,
                       int64_t r1, float* y, int64_t ldy, Isa isa = Isa::kAuto);

/// The reference for one row r and one token (its activations as matmul_float_rows
/// takes them, its flag): the portable path, which the AVX-512 tiles reproduce bit for bit.
float dot_float_reference(const WeightView& w, int64_t r, const float* x, const uint16_t* xb, uint8_t flag);

/// dst[i] = x[i] rounded to f16 (RNE) and widened back: F16 weights' activations (ggml's
/// vec_dot_type F16).
void round_to_f16(const float* x, float* dst, int64_t n);
/// dst[i] = x[i] as bf16 bits (RNE, NaN kept quiet): BF16 weights' activations.
void convert_to_bf16(const float* x, uint16_t* dst, int64_t n);

/// ggml_vec_dot_f16's leftovers: `sum` plus the f32 products w[j]·x[j], j in [i, n), added
/// in double; rounded to float.
float f16_decode_tail(double sum, const uint16_t* w, const float* x, int64_t i, int64_t n);
/// ggml_vec_dot_bf16's leftovers: `sum` plus the products of bf16 w[j] and xb[j], j in
/// [i, n), added in double; rounded to float.
float bf16_decode_tail(double sum, const uint16_t* w, const uint16_t* xb, int64_t i, int64_t n);

namespace avx512 {  // matmul_float_avx512.cc (AVX-512 F/BW/VL/DQ + BF16)
/// matmul_float_rows for tokens [t0, t1), all with order `gemm` (true: tinyBLAS).
void matmul_float_run(const WeightView& w, const float* x, const uint16_t* xb, int t0, int t1, bool gemm, int64_t r0, int64_t r1,
                      float* y, int64_t ldy);
/// round_to_f16 / convert_to_bf16 on n values, n % 16 == 0.
void round_to_f16(const float* x, float* dst, int64_t n);
void convert_to_bf16(const float* x, uint16_t* dst, int64_t n);
}  // namespace avx512

}  // namespace pdserve::kernels
