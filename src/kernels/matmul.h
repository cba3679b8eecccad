// Matrix products against weight matrices stored in GGUF types.
// y[t][r] = dot(W[r, :], x[t, :]) for every token t and output row r.
#pragma once

#include <cstdint>

#include "gguf/ggml_types.h"

namespace pdserve::kernels {

/// A read-only weight matrix of `rows` × `cols` in a GGUF type (row-major, ggml layout:
/// dims[0] = cols is contiguous). `data` points into the mapped model file.
struct WeightView {
  const void* data = nullptr;
  gguf::GgmlType type = gguf::GgmlType::F32;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t row_bytes = 0;
};

/// True when matmul() supports `type` (F32, F16, BF16 for now).
bool matmul_supports(gguf::GgmlType type);

/// y[n_tokens][w.rows] = x[n_tokens][w.cols] · Wᵀ. Parallel over rows (OpenMP).
///
/// Reduction order, chosen per token by `gemm_order` (n_tokens flags; nullptr = all 0):
/// llama.cpp's CPU backend (ggml-cpu ggml_compute_forward_mul_mat) sends a mul_mat with
/// >= 2 tokens (n >= 2) and k % 16 == 0 to llamafile_sgemm (ggml-cpu/llamafile/sgemm.cpp,
/// tinyBLAS: one 16-lane FMA accumulator over k, then _mm512_reduce_add_ps) and
/// everything else — one-token decode steps, and k % 16 != 0 like a 172-wide ffn_down —
/// to ggml_vec_dot_f32 (four 16-lane accumulators over 64-value chunks, then a tail).
/// To reproduce it without making a token's result depend on its batch, the caller says
/// per token which order the reference would have used (model::Batch::gemm_order: prompt
/// tokens of a prompt of >= 2 tokens), and:
///   * F32 weights, cols % 16 == 0, gemm_order[t] != 0 → tinyBLAS order;
///   * F32 weights otherwise                            → ggml_vec_dot_f32 order;
///   * F16 / BF16 weights: one order for every token (flag ignored for now).
/// Batch invariant: each y[t][r] is one dot product whose order depends only on the
/// weight shape and the token's own flag, so a token's result is bit-identical whatever
/// n_tokens is and whatever else is in x.
void matmul(const WeightView& w, const float* x, int n_tokens, float* y, const uint8_t* gemm_order);

/// Copies row `r` of `w` into `out` as float32 (embedding lookup).
void dequantize_row(const WeightView& w, int64_t r, float* out);

}  // namespace pdserve::kernels
