// Matrix products against weight matrices stored in GGUF types.
// y[t][r] = dot(W[r, :], x[t, :]) for every token t and output row r.
#pragma once

#include <algorithm>
#include <cstdint>

#include "gguf/ggml_types.h"
#include "kernels/cpu_features.h"  // Isa

namespace pdserve::kernels {

/// How a weight matrix's bytes are laid out in memory.
///  * kRows: ggml's (row-major, each row its blocks in order, as in the GGUF file);
///  * kTiles16: Q4_0 / Q8_0 / K-quants in tiles of 16 rows, made once at load (kernels/weight_layout.h):
///    per tile and block, the 16 rows' bytes transposed so that one 64-byte line holds 4
///    bytes of each row — what the AVX-512 row kernels compute on, so a decode step
///    streams the weights with no shuffles. Same bytes per tile as kRows, so a tile starts
///    where its first row would.
enum class WeightLayout : uint8_t { kRows, kTiles16 };

/// A read-only weight matrix of `rows` × `cols` in a GGUF type (row-major, ggml layout:
/// dims[0] = cols is contiguous, unless `layout` says otherwise). `data` points into the
/// model file's memory (mapped or copied).
struct WeightView {
  const void* data = nullptr;
  gguf::GgmlType type = gguf::GgmlType::F32;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t row_bytes = 0;
  WeightLayout layout = WeightLayout::kRows;
};

/// True when matmul() supports `type`: F32, F16, BF16 and the quantised types of
/// kernels/quants.h (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K).
bool matmul_supports(gguf::GgmlType type);

/// True when `isa` has its own kernel for quantised type `t` (else matmul falls back to
/// the next path down: AVX-512 VNNI → AVX2 → scalar). Every path computes the scalar
/// reference's arithmetic (quants.h vec_dot_scalar) bit for bit; `isa` of matmul() and
/// matmul_multi(): kernels/cpu_features.h (kAuto = best_isa()).
bool has_quant_kernel(Isa isa, gguf::GgmlType t);

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
///   * F16 / BF16 weights: activations rounded to f16 / bf16 (ggml's vec_dot_type), then
///     flag 0 → ggml_vec_dot_f16 / ggml_vec_dot_bf16 (AVX-512 / AVX512-BF16) order, flag 1
///     with cols % 16 (F16) / % 32 (BF16) == 0 → tinyBLAS order (one accumulator).
///   * quantised weights: each token's activations are quantised to the type's
///     vec_dot_type (Q8_0 / Q8_K, as ggml), then exact integer block dots and the float
///     order of quants.h vec_dot_scalar(order = quant_order(type, rows, flag)) — the same
///     bits on the GEMV (1 token) and GEMM (tiles of tokens) code paths of every ISA. Only
///     repacked Q4_K (rows % 8 == 0) looks at the flag: 1 → llama.cpp's GEMM kernel order,
///     0 or 2 → its GEMV order (the repacked mul_mat runs tokens [0, n − n % 4) of a batch
///     through GEMM and the ragged rest through GEMV).
/// Flag values: 0 = decode token (or a 1-token prompt); 1 = prompt token the reference
/// multiplies in a GEMM; 2 = prompt token in the ragged tail (the last prompt_len % 4 of
/// the prompt): still tinyBLAS for float weights, GEMV for repacked quantised weights;
/// either plus kGemmTiledBatch when the token's micro-batch has >= 8 tokens (llama.cpp's
/// tiled K-quant matmul then takes the K-quants that are not repacked: quants.h kTiled).
/// gemm_order_flag() computes it.
/// Batch invariant: each y[t][r] is one dot product whose order depends only on the
/// weight shape and the token's own flag, so a token's result is bit-identical whatever
/// n_tokens is and whatever else is in x.
void matmul(const WeightView& w, const float* x, int n_tokens, float* y, const uint8_t* gemm_order,
            Isa isa = Isa::kAuto);

/// gemm_order flag bit: the token's micro-batch has >= 8 tokens (see matmul()).
constexpr uint8_t kGemmTiledBatch = 4;

/// One weight matrix and its output ([n_tokens][w->rows]) in a matmul_multi().
struct MatmulJob {
  const WeightView* w;
  float* y;
};

/// jobs[j].y = jobs[j].w · x for every job, on the same activations x
/// ([n_tokens][cols], all weights with the same cols) — e.g. Q, K and V, or gate and up.
/// Each value is bit-identical to matmul(*jobs[j].w, x, ...); when every weight is
/// quantised the activations are quantised once per format and all rows run in one
/// parallel loop (one fork/join, no small matrix running alone), else one matmul each.
void matmul_multi(const MatmulJob* jobs, int n_jobs, const float* x, int n_tokens, const uint8_t* gemm_order,
                  Isa isa = Isa::kAuto);

/// The gemm_order flag of the token at position `pos` of a sequence whose prompt has
/// `prompt_len` tokens, as the reference processes a prompt: in micro-batches of `ubatch`
/// tokens (llama.cpp's default n_ubatch 512), each a mul_mat of its tokens.
inline uint8_t gemm_order_flag(int64_t pos, int64_t prompt_len, int64_t ubatch = 512) {
  if (pos >= prompt_len || prompt_len < 2) return 0;
  const int64_t start = pos / ubatch * ubatch;
  const int64_t len = std::min(ubatch, prompt_len - start);
  if (len < 2) return 0;  // a 1-token micro-batch is a decode-shaped mul_mat
  const uint8_t tiled = len >= 8 ? kGemmTiledBatch : 0;  // ggml_tiled_min_batch
  return static_cast<uint8_t>((pos - start < len - len % 4 ? 1 : 2) | tiled);
}

/// Copies row `r` of `w` into `out` as float32 (embedding lookup).
void dequantize_row(const WeightView& w, int64_t r, float* out);

}  // namespace pdserve::kernels
