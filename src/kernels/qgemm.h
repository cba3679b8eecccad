// Internal: the quantised matmul kernels of each instruction set (one table per ISA;
// kernels/matmul.cc is the single dispatch point).
#pragma once

#include <cstdint>

#include "gguf/ggml_types.h"
#include "kernels/matmul.h"
#include "kernels/quants.h"

namespace pdserve::kernels {

/// y[t * ldy + r] = dot(W[r], token t) for r in [r0, r1), t in [0, n_tok); token t's
/// quantised activations (quants.h quantize_act) start at act + t * act_stride
/// (64-byte aligned); every token uses reduction order `order` (quants.h quant_order).
/// Returns nullptr from a table for a type it lacks.
using QGemmFn = void (*)(const WeightView& w, const uint8_t* act, int64_t act_stride, int n_tok, int64_t r0, int64_t r1,
                         float* y, int64_t ldy, QOrder order);

QGemmFn qgemm_scalar(gguf::GgmlType t);
QGemmFn qgemm_avx2(gguf::GgmlType t);        // qgemm_avx2.cc (AVX2 + FMA)
QGemmFn qgemm_avx512vnni(gguf::GgmlType t);  // qgemm_avx512.cc (AVX-512 F/BW/VL + VNNI)

}  // namespace pdserve::kernels
