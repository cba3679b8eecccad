// Element-wise and row-wise CPU kernels for the transformer forward pass.
// All take row-major float32 arrays; n is the row length.
#pragma once

#include <cstdint>

#include "kernels/cpu_features.h"

namespace pdserve::kernels {

/// RMSNorm (Zhang & Sennrich 2019): out[i] = x[i] / sqrt(mean(x²) + eps) * w[i].
/// The sum of squares is accumulated in double, in index order (batch invariant).
void rms_norm(float* out, const float* x, const float* w, int n, float eps);

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

/// out[i] += x[i].
void add_inplace(float* out, const float* x, int n);

/// log-softmax of `logits` into `out` (n values), computed in double for stability.
void log_softmax(const float* logits, float* out, int n);

}  // namespace pdserve::kernels
