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
/// Batch invariant: each y[t][r] is one dot product with a fixed reduction order, so a
/// token's result is bit-identical whatever n_tokens is and whatever else is in x.
void matmul(const WeightView& w, const float* x, int n_tokens, float* y);

/// Copies row `r` of `w` into `out` as float32 (embedding lookup).
void dequantize_row(const WeightView& w, int64_t r, float* out);

}  // namespace pdserve::kernels
