// The mixture-of-experts FFN of one block over a batch (qwen3moe, Mixtral), grouped by
// expert so that each expert's weights are read once per call for all its tokens.
#pragma once

#include <cstdint>

#include "model/model_config.h"
#include "model/weights.h"
#include "model/workspace.h"

namespace pdserve::model {

/// Routing of one token (llama.cpp build_moe_ffn, LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX,
/// norm_w = true, as llm_build_qwen3moe and llm_build_llama with experts call it):
/// `logits` [n_expert] become probabilities in place, as ggml_soft_max computes them
/// (max, then expf(x − max) summed in double, then × (float) (1 / sum)); `sel` [k] gets the
/// k most probable experts, most probable first (ties: lower id first), and `w` [k] their
/// probabilities divided by their float sum (ggml_sum_rows: summed in double), that sum
/// clamped below at 6.103515625e-5 as llama.cpp does.
void moe_route(float* logits, int n_expert, int k, int32_t* sel, float* w);

/// out[t] = Σ_j w_tj · down_e(silu(gate_e · xn[t]) ⊙ up_e · xn[t]), e = sel_tj, over the
/// config's n_expert_used experts of each of the `m` tokens of `xn` ([m][n_embd], already
/// RMS-normed); `out` [m][n_embd]. Every matmul runs in decode order (kernels::matmul
/// flag 0), prompt tokens too: the experts as the reference's ggml_mul_mat_id
/// multiplies each routed row on its own (ggml_compute_forward_mul_mat_id: vec_dot;
/// repacked Q4_K: forward_mul_mat_id's GEMV per row), the router (an F32 mul_mat) because
/// that is what the reference's bits show — measured 2026-12-02 on the zen4 backend: with
/// the tinyBLAS order for prompt tokens the Mixtral Q8_0 / Q4_K_M references are missed by up
/// to 0.020 / 0.014 on one prompt (a routing flip), with the decode order every qwen3moe and
/// Mixtral Q8_0 / Q4_K_M reference is matched to print precision. The experts run one
/// matmul per expert over the rows of its tokens (gathered). The k expert outputs are weighted and summed in slot order (ggml_mul, then
/// ggml_add of slot 0 + slot 1, + slot 2, …), unfused. Batch invariant: each token's
/// result depends only on its own row and flag, whatever else is in the batch (the
/// matmuls are per-row invariant, DESIGN.md §3). Uses ws's MoE buffers, sized for >= m rows.
void moe_ffn(const ModelConfig& c, const LayerWeights& L, const float* xn, int m, Workspace& ws, float* out);

}  // namespace pdserve::model
