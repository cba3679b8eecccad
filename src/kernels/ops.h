// Element-wise and row-wise CPU kernels for the transformer forward pass.
// All take row-major float32 arrays; n is the row length.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cpu_features.h"

namespace pdserve::kernels {

/// RMSNorm (Zhang & Sennrich 2019): out[i] = x[i] / sqrt(mean(x²) + eps) * w[i].
/// The sum of squares is accumulated in double, in index order (batch invariant).
void rms_norm(float* out, const float* x, const float* w, int n, float eps);
/// rms_norm of `rows` rows of n values each (row r at x + r·n, written to out + r·n; out may
/// be x). Each row's result is rms_norm's, bit for bit: eight rows' double sums run side by
/// side, each in its own index order, so the adds' latency is paid once per eight rows
/// instead of once per row (a 2,048-value row is a chain of 2,048 dependent double adds).
void rms_norm_rows(float* out, const float* x, const float* w, int rows, int n, float eps);

/// RoPE (Su et al. 2021, RoFormer) rotates the first `rot_dim` dims of each head vector
/// with theta_i = pos * freq_scale * base^(-2i/rot_dim) (freq_scale < 1 is linear RoPE
/// scaling): pairs (x[2i], x[2i+1]) — llama.cpp's LLAMA_ROPE_TYPE_NORM used for `llama` —
/// or, `neox`, pairs (x[i], x[i + rot_dim/2]) — LLAMA_ROPE_TYPE_NEOX (qwen2).
///
/// RoPE's cos/sin at position `pos` for the rot_dim/2 rotated pairs (theta_i =
/// pos·freq_scale·base^(−2i/rot_dim), by repeated multiplication as ggml): cs[2i] = cos θ_i,
/// cs[2i+1] = sin θ_i. One table serves every head of a token.
void rope_cache(int rot_dim, int pos, float base, float freq_scale, float* cs);
/// rope_cache with per-pair frequency factors and a magnitude scale, in ggml's order
/// (ggml-cpu ops.cpp ggml_rope_cache_init + rope_yarn with ext_factor 0): theta = pos,
/// multiplied by base^(−2/rot_dim) per pair; angle_i = freq_scale · (theta / ff[i]);
/// cs = (cos angle_i · mscale, sin angle_i · mscale). `ff` (rot_dim/2 values) may be null
/// (all 1). Llama 3's rope_freqs, Phi-3's long-RoPE factors and attention factor.
void rope_cache_factors(int rot_dim, int pos, float base, float freq_scale, const float* ff, float mscale, float* cs);
/// Rotates one head's first rot_dim values with a rope_cache table: pairs (2i, 2i+1), or
/// (i, i + rot_dim/2) for NeoX.
void rope_apply(float* x, int rot_dim, const float* cs, bool neox);

/// SwiGLU gate (Shazeer 2020) on ONE token row of n = n_ff values:
/// gate[i] = silu(gate[i]) * up[i], silu(x) = x / (1 + e^-x). Mirrors ggml_vec_swiglu_f32
/// of llama.cpp's AVX-512 build: ggml_v_silu (a polynomial exp) on 16-wide chunks from the
/// row start and expf on the row's n % 16 tail — so call it per row, never on a flattened
/// [n_tokens][n_ff] array (that would make a token's numerics depend on its place in the
/// batch). Every `isa` path (cpu_features.h; kAuto = best_isa()) gives the same bits.
void swiglu(float* gate, const float* up, int n, Isa isa = Isa::kAuto);

/// GeGLU gate (Shazeer 2020; Gemma) on one token row: gate[i] = gelu(gate[i]) * up[i], with
/// ggml's tanh-approximation GELU as ggml_vec_geglu_f32 computes it (GGML_GELU_FP16): 0 for
/// x <= -10, x for x >= 10, else the f16 table value at f16(x), the table holding
/// f16(0.5·x·(1 + tanh(√(2/π)·x·(1 + 0.044715·x²)))) for every f16 x (tanh_cr, and the FMA
/// GCC contracts 1 + a·x·x into).
void geglu(float* gate, const float* up, int n);

/// tanhf correctly rounded, = (float) tanh((double) x): the reference engine's glibc
/// (2.41+, CORE-MATH) tanhf, which this machine's older glibc tanhf is not (it differs in the
/// last bit for ~3 % of inputs). Gemma's soft-capping and GELU use it.
inline float tanh_cr(float x);

/// x[i] = cap · tanh_cr(x[i] · (1/cap)) for i < n: final logit soft-capping as llama.cpp's
/// graph computes it (ggml_scale by 1/cap, ggml_tanh, ggml_scale by cap).
void softcap_inplace(float* x, int n, float cap);

/// out[i] += x[i].
void add_inplace(float* out, const float* x, int n);

/// The residual step between two blocks, on `rows` rows of n values (row r at + r·n): p[r]
/// is RMS-normed in place with post_w when post_w is given (Gemma's post-norms), x[r] +=
/// p[r] when p is given, then out[r] = rms_norm(x[r]) · w when out is given. Each row gets
/// the bits of those separate calls (rms_norm_rows, add_inplace), in that order (but for
/// which NaN's payload a sum of two NaNs keeps); rows go in groups of eight so the norms'
/// double sums run side by side and x is still in cache.
void residual_rms_norm(float* x, float* p, const float* post_w, float* out, const float* w, int rows, int n, float eps);

/// log-softmax of `logits` into `out` (n values), computed in double for stability.
void log_softmax(const float* logits, float* out, int n);

inline float tanh_cr(float x) { return static_cast<float>(std::tanh(static_cast<double>(x))); }

}  // namespace pdserve::kernels
