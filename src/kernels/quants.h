// Quantised weight formats: dequantisation, ggml's reference quantisers, activation
// quantisation for the integer dot products, and the scalar reference dot of every type.
// Block layouts: kernels/quant_types.h (ggml-common.h). Implementations, one family per
// file: quant_legacy.cc (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0), quant_kquants.cc (Q4_K, Q5_K, Q6_K, Q8_K),
// quant_lowbit.cc (Q2_K, Q3_K, IQ4_NL, IQ4_XS).
#pragma once

#include <cstdint>

#include "gguf/ggml_types.h"

namespace pdserve::kernels {

/// True for the block-quantised weight types the matmul kernels take
/// (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS).
bool is_quantized(gguf::GgmlType t);

/// The activation format a weight type's integer dot uses — ggml's vec_dot_type:
/// Q8_0 for the 32-blocks (Q4_1 and Q5_1 included: we keep per-lane sums for the min term instead
/// of ggml's Q8_1; IQ4_NL too), Q8_K for the K-quants and IQ4_XS. F32 for other types.
gguf::GgmlType vec_dot_type(gguf::GgmlType t);

/// x[0..n) = the values of a row of `n` elements of type `t` (F32, F16, BF16 and every
/// quantised type above; Q8_K too). ggml's dequantize_row_* arithmetic.
void dequantize(gguf::GgmlType t, const void* src, float* dst, int64_t n);
/// True when dequantize() reads `t` (the types of can_quantize); for any other type it writes
/// zeros.
bool can_dequantize(gguf::GgmlType t);

/// True when quantize() can produce `t` (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K,
/// Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, IQ4_NL, IQ4_XS).
bool can_quantize(gguf::GgmlType t);
/// dst = `n` values (a multiple of the block size) of `src` in type `t`, byte-identical to
/// ggml's quantize_row_*_ref (what llama-quantize writes without an importance matrix);
/// F16 / BF16 round to nearest even.
void quantize(gguf::GgmlType t, const float* src, void* dst, int64_t n);

/// Bytes of one quantised activation row of `n` values for weights of type `wt`
/// (a multiple of 64; ActPairQ8 or ActQ8K records).
int64_t act_row_bytes(gguf::GgmlType wt, int64_t n);
/// Quantises one activation row for weights of type `wt` into `dst` (act_row_bytes).
void quantize_act(gguf::GgmlType wt, const float* x, void* dst, int64_t n);

/// Scalar reference dot of one weight row (type `wt`, `n` values) with a quantised
/// activation row. Its arithmetic is the contract every SIMD path reproduces bit for bit:
///  * 32-blocks — ggml's ggml_vec_dot_q8_0_q8_0 / q4_0_q8_0 / q5_0_q8_0 AVX2 order (and
///    llamafile tinyBLAS_Q0_AVX's): exact int32 partial sums p_g over the 4-value groups
///    g = 0..7 of each block; one 8-lane float accumulator, blocks in order:
///    acc[g] = fma(d_w*d_a, p_g, acc[g]) (Q4_1 / Q5_1 then acc[g] = fma(m_w*d_a, Σ group's
///    activations, acc[g])); then hsum_float_8: ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)).
///  * K-quants — ggml's AVX2 ggml_vec_dot_q{4,5,6}_K_q8_K order: per super-block 8 exact
///    int32 lanes, lane k = Σ over the 8 chunks c of 32 of scale · q · a over elements
///    32c+4k .. 32c+4k+3 (q unsigned; Q6_K's −32 offset is then taken per lane from the
///    16-value sums, lane k −= 32·(sc_2k·bsum_2k + sc_2k+1·bsum_2k+1), as llama.cpp's
///    x86 kernel of 2026 does — the lanes, and so the float rounding, differ from
///    subtracting 32 per value); acc[k] = fma(d_a*d_w, lane_k, acc[k]); result
///    hsum_float_8(acc), plus for Q4_K the mins term in 4 lanes
///    (acc_m[m] = fma(-d_a*dmin_w, m_2m·bsum_2m + m_2m+1·bsum_2m+1, acc_m[m]), folded
///    (m0+m2)+(m1+m3)), for Q5_K a scalar summs = fma(-d_a*dmin_w, Σ m_j·bsum_j, summs).
///  * Q2_K / Q3_K / IQ4_XS — ggml's AVX2 ggml_vec_dot_{q2_K,q3_K,iq4_xs}_q8_K order: the
///    same 8 exact int32 lanes, lane k = Σ_c sc(c, k) · Σ v·a over elements 32c+4k ..
///    32c+4k+3, with v the signed value (Q2_K q 0..3, Q3_K q − 4, IQ4_XS kvalues_iq4nl[q])
///    and sc(c, k) the scale of the 16-value sub-block 2c + (k >= 4) (Q3_K: sc − 32; IQ4_XS:
///    its 32-value sub-block's ls − 32); acc[k] = fma(d_a*d_w, lane_k, acc[k]) per
///    super-block, Q2_K first acc[m] = fma(−d_a*dmin_w, m_2m·bsum_2m + m_2m+1·bsum_2m+1,
///    acc[m]) (m = 0..7, the 16-value sums) in the same accumulator; hsum_float_8(acc).
///  * IQ4_NL — ggml_vec_dot_iq4_nl_q8_0 (AVX2): 8 exact lanes of 4 values per block, two
///    8-lane accumulators (even and odd blocks) acc = fma(d_a*d_w, lane, acc), then
///    hsum_float_8(acc_even + acc_odd); an odd last block adds fma(d_a*d_w, Σ, r).
///
/// kRepackGemv / kRepackGemm (Q4_0, Q4_K and IQ4_NL only) are instead the orders of llama.cpp's
/// repacked x86 kernels (ggml-cpu/arch/x86/repack.cpp: ggml_gemv/gemm_q4_0_8x8_q8_0,
/// ggml_gemv/gemm_q4_K_8x8_q8_K): one float accumulator per (row, token), blocks in order.
///  * Q4_0 and IQ4_NL (GEMV and GEMM alike): acc = fma((float) Σ_32 w·a, d_w*d_a, acc).
///  * Q4_K GEMV: per super-block acc = fma((float) Σ_j sc_j·Σ(q·a)_j, d_w*d_a, acc) and
///    acc_m = fma((float) Σ_j m_j·bsum32_j, dmin_w*d_a, acc_m); result acc − acc_m.
///  * Q4_K GEMM (AVX-512 branch): the same, but one fma pair per 64 values (sub-blocks
///    2s, 2s+1, s = 0..3) instead of per super-block.
///
/// kTiled (K-quants that are not repacked) is the order of llama.cpp's tiled K-quant
/// matmul (ggml-cpu/tiled/tiled.cpp + tiled-kernel.cpp, builds of 2026; the reference
/// engine's build 11669 takes it for every mul_mat of >= 8 tokens): one float accumulator
/// per (row, token), super-blocks in order, each with exact int32 sums
/// s1 = Σ_j sc_j · Σ_{sub-block j} q·a (Q6_K: q − 32) and, for types with mins,
/// s2 = Σ_j m_j · bsum_j; r = (float) s1 · d_w, then r = fma(−dmin_w, (float) s2, r);
/// acc = fma(r, d_a, acc) (the AVX2 and AVX-512 VNNI microkernels alike). Q2_K / Q3_K /
/// IQ4_XS likewise, with their 16-value sub-blocks (s2 from the 16-value sums).
enum class QOrder { kVecDot, kRepackGemv, kRepackGemm, kTiled };
/// The order llama.cpp's CPU backend (AVX2 / AVX-512 build) uses for a `rows`-row matrix of
/// type `t` and a token with matmul flag `flag` (matmul.h): ggml_repack_get_optimal_repack_type
/// repacks Q4_0, Q4_K and IQ4_NL when rows % 8 == 0 (q4_0_8x8_q8_0, q4_K_8x8_q8_K,
/// iq4_nl_8x8_q8_0; Q2_K's q2_K_8x8_q8_K needs AVX-512, so not on the AVX2 reference); the repacked
/// mul_mat sends tokens [0, n − n % 4) of its batch to the GEMM kernel (flag 1) and the
/// rest to the GEMV kernel (flags 0 and 2). Everything else (Q6_K included) is not repacked;
/// of those Q4_K, Q5_K, Q2_K, Q3_K and IQ4_XS take kTiled when the flag has kGemmTiledBatch (matmul.h: a
/// micro-batch of >= 8 tokens), else kVecDot (Q6_K always kVecDot: see quants.cc).
QOrder quant_order(gguf::GgmlType t, int64_t rows, uint8_t flag = 0);
float vec_dot_scalar(gguf::GgmlType wt, const void* w, const void* act, int64_t n, QOrder order = QOrder::kVecDot);

// Per-family entry points (used by the dispatchers above and by tests).
void dequantize_legacy(gguf::GgmlType t, const void* src, float* dst, int64_t n);
void quantize_legacy(gguf::GgmlType t, const float* src, void* dst, int64_t n);
/// ActPairQ8 rows (quant_types.h) of n values (quantize_block_q8_0_x86 per 32, d through
/// f16, q + 128, 4-value sums; an odd last block padded): AVX-512 when best_isa() is
/// kAvx512Vnni, else the scalar path; both give the same bytes. `dst` must be aligned as
/// ActPairQ8 (64 bytes; act buffers are): both paths write through ActPairQ8 records.
void quantize_act_q8_0(const float* x, void* dst, int64_t n);
void quantize_act_q8_0_scalar(const float* x, void* dst, int64_t n);
/// One Q8_0 block as ggml's x86 quantize_row_q8_0 computes it (ggml-cpu/arch/x86/quants.c):
/// q[j] = round-half-even(x[j] * 127 / amax) for j < 32; returns d = amax / 127 (f32; the
/// block stores it as f16). Not quantize_row_q8_0_ref (1/d, half away from zero).
float quantize_block_q8_0_x86(const float* x, int8_t* q);
float vec_dot_legacy_scalar(gguf::GgmlType t, const void* w, const void* act, int64_t n);
float vec_dot_q4_0_repack_scalar(const void* w, const void* act, int64_t n);
void dequantize_kquant(gguf::GgmlType t, const void* src, float* dst, int64_t n);
void quantize_kquant(gguf::GgmlType t, const float* src, void* dst, int64_t n);
/// ActQ8K rows (ggml's quantize_row_q8_K_ref per 256 values, plus sums): AVX-512 when
/// best_isa() (cpu_features.h) is kAvx512Vnni, else the scalar path; both give the same bytes.
void quantize_act_q8_k(const float* x, void* dst, int64_t n);
void quantize_act_q8_k_scalar(const float* x, void* dst, int64_t n);
namespace avx512 {
/// quantize_act_q8_k with AVX-512 F/BW (quant_act_avx512.cc).
void quantize_act_q8_k(const float* x, void* dst, int64_t n);
/// quantize_act_q8_0 with AVX-512 F/BW (quant_act_avx512.cc).
void quantize_act_q8_0(const float* x, void* dst, int64_t n);
}
float vec_dot_kquant_scalar(gguf::GgmlType t, const void* w, const void* act, int64_t n);
float vec_dot_q4_K_repack_scalar(const void* w, const void* act, int64_t n, bool gemm);
/// The kTiled order (QOrder) of a K-quant row.
float vec_dot_kquant_tiled_scalar(gguf::GgmlType t, const void* w, const void* act, int64_t n);
void dequantize_lowbit(gguf::GgmlType t, const void* src, float* dst, int64_t n);
void quantize_lowbit(gguf::GgmlType t, const float* src, void* dst, int64_t n);
/// Q2_K / Q3_K / IQ4_XS rows in the kVecDot and kTiled orders, IQ4_NL in its vec_dot order.
float vec_dot_lowbit_scalar(gguf::GgmlType t, const void* w, const void* act, int64_t n);
float vec_dot_lowbit_tiled_scalar(gguf::GgmlType t, const void* w, const void* act, int64_t n);
float vec_dot_iq4_nl_scalar(const void* w, const void* act, int64_t n);
/// IQ4_NL in llama.cpp's repacked order (iq4_nl_8x8_q8_0, the Q4_0 kernels' with the
/// kvalues_iq4nl table): as kRepackGemv / kRepackGemm of Q4_0.
float vec_dot_iq4_nl_repack_scalar(const void* w, const void* act, int64_t n);

/// ggml's hsum_float_8 (ggml-cpu/arch/x86/quants.c): 128-bit halves added, then movehl,
/// then movehdup — ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)).
inline float hsum_float_8(const float* a) {
  const float r0 = a[0] + a[4], r1 = a[1] + a[5], r2 = a[2] + a[6], r3 = a[3] + a[7];
  return (r0 + r2) + (r1 + r3);
}

}  // namespace pdserve::kernels
