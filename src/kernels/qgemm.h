// Internal: the quantised matmul kernels of each instruction set (one table per ISA;
// kernels/matmul.cc is the single dispatch point).
#pragma once

#include <cstdint>

#include "gguf/ggml_types.h"
#include "kernels/matmul.h"
#include "kernels/quants.h"

namespace pdserve::kernels {

/// y[t * ldy + r] = dot(W[r], token t) for r in [r0, r1), t in [0, n_tok); every token
/// uses reduction order `order` (quants.h quant_order). `act` holds the tokens'
/// activations: the QKernel's packed layout when it has a pack function, else the
/// quants.h quantize_act rows, token t at act + t * act_stride (64-byte aligned).
using QGemmFn = void (*)(const WeightView& w, const uint8_t* act, int64_t act_stride, int n_tok, int64_t r0, int64_t r1,
                         float* y, int64_t ldy, QOrder order);

/// Bytes of a kernel's packed activations for `n_tok` tokens; 0: this run is not packed (gemm
/// reads the quantize_act rows, as for a kernel without a pack function).
using QPackBytesFn = int64_t (*)(const WeightView& w, QOrder order, int n_tok);

/// Converts tokens [t_begin, t_end) of `n_tok` quantize_act rows (token t at
/// act + t * act_stride) into the kernel's layout in `packed` (QPackBytesFn bytes, 64-byte
/// aligned). Calls for disjoint ranges starting at multiples of QKernel::pack_align may
/// run concurrently; the one with t_end == n_tok also writes any padding.
using QPackFn = void (*)(const WeightView& w, QOrder order, const uint8_t* act, int64_t act_stride, int n_tok, int t_begin,
                         int t_end, uint8_t* packed);

/// One ISA's kernel for one weight type. `gemm` is nullptr when the ISA has none.
struct QKernel {
  QGemmFn gemm = nullptr;
  QPackFn pack = nullptr;  // nullptr: gemm reads the quantize_act rows directly
  QPackBytesFn pack_bytes = nullptr;
  int pack_align = 1;
  WeightLayout layout = WeightLayout::kRows;  // the weight layout gemm reads
};

QKernel qgemm_scalar(gguf::GgmlType t, QOrder order);
QKernel qgemm_avx2(gguf::GgmlType t, QOrder order);        // qgemm_avx2.cc (AVX2 + FMA)
QKernel qgemm_avx512vnni(gguf::GgmlType t, QOrder order);  // qgemm_avx512.cc (AVX-512 F/BW/VL/DQ + VNNI)
/// The AVX-512 VNNI kernel that reads a non-kRows layout in place, if there is one.
QKernel qgemm_avx512vnni_layout(gguf::GgmlType t, QOrder order, WeightLayout layout);

}  // namespace pdserve::kernels
