// Internal: the per-ISA element-wise kernels of ops.h (ops_avx2.cc, ops_avx512.cc; ops.cc
// dispatches and holds the scalar path they reproduce bit for bit).
#pragma once

namespace pdserve::kernels {
namespace avx2 {
/// gate[i] = ggml_v_silu(gate[i]) * up[i] for i < n (n % 16 == 0: the 16-wide chunks of swiglu).
void swiglu_silu_chunks(float* gate, const float* up, int n);
}
namespace avx512 {
/// As avx2::swiglu_silu_chunks.
void swiglu_silu_chunks(float* gate, const float* up, int n);
}
}  // namespace pdserve::kernels
