// Paged attention over a block-structured KV cache (Kwon et al. 2023, vLLM
// PagedAttention) with an online softmax (Milakov & Gimelshein 2018), for prefill and
// decode alike: one query token attends to keys [0, n_keys) of its sequence, found
// through the sequence's block table.
#pragma once

#include <cstdint>

#include "kernels/matmul.h"  // Isa

namespace pdserve::kernels {

/// The KV cache's storage type. F32 / F16 / BF16: one value per element; Q8_0 / Q4_0:
/// GGUF's 32-value blocks with an f16 scale (kernels/quant_types.h), a (token, KV head) row
/// of head_dim values is head_dim / 32 whole blocks, so no block spans two heads' rows.
enum class KvDtype { F32, F16, BF16, Q8_0, Q4_0 };

/// Bytes of one (token, KV head) row of head_dim values in `dtype` (Q8_0: 34 per 32
/// values, Q4_0: 18 per 32). Only meaningful when kv_dtype_fits(dtype, head_dim).
int64_t kv_row_bytes(KvDtype dtype, int head_dim);
/// False when rows of head_dim values cannot be stored in `dtype` (Q8_0 / Q4_0 need a
/// multiple of 32, their block size).
bool kv_dtype_fits(KvDtype dtype, int head_dim);

/// Largest head dimension the attention kernels (and RoPE in the model) take: their
/// per-call scratch arrays live on the stack, sized by it. model::Model::load rejects a
/// model with a larger head_dim.
inline constexpr int kMaxHeadDim = 512;

/// One layer's K and V pools, each shaped [num_blocks][block_size][n_kv_heads][row], a row
/// being head_dim values in `dtype` (kv_row_bytes(dtype, head_dim) bytes).
struct KvLayerView {
  void* k = nullptr;
  void* v = nullptr;
  KvDtype dtype = KvDtype::F16;
  int block_size = 16;
  int n_kv_heads = 0;
  int head_dim = 0;
};

/// Writes one token's K and V (each [n_kv_heads][head_dim] float32) into `slot`
/// (= block_id * block_size + offset in block), converting to the cache dtype as llama.cpp's
/// CPU set_rows does (the CPU type's from_float): F16 / BF16 round to nearest even, Q8_0 is
/// ggml's x86 quantize_row_q8_0 (d = amax/127, q = round-half-even(x * 127/amax)), Q4_0 its
/// reference quantize_row_q4_0_ref (quantize_kv_row).
void kv_store(const KvLayerView& kv, int64_t slot, const float* k, const float* v);

/// Attention for one query token and one query head.
/// q: [head_dim]; kv_head: the KV head this query head reads (GQA: head / group size);
/// block_table: block ids of the sequence; n_keys: keys 0..n_keys-1 are attended (causal
/// masking = passing the query position + 1). scale: usually 1/sqrt(head_dim).
/// out: [head_dim]; head_dim <= kMaxHeadDim. Keys are visited in position order, so the
/// result does not depend on how the sequence was batched, chunked or cached.
/// isa: the code path of an f16 cache — kAuto = the best this CPU has (checked once at run
/// time: AVX-512 F/BW/VL/VNNI → attention_avx512.cc, AVX2+FMA+F16C → attention_avx2.cc,
/// else scalar); kScalar = the reference (paged_attention_f16_scalar); a path the CPU lacks
/// falls back to the next one down. Every path gives the same bits, NaN results aside: an Inf
/// or NaN in Q or the cache gives NaN on every path, but which NaN (sign, payload) depends on
/// the operand order each compiled path's instructions have (a break test, 2026-12-06: about
/// a quarter of its Inf/NaN inputs). F32 and BF16 caches are
/// scalar; Q8_0 / Q4_0 caches have their own kernels (attention_quant.cc, numerics there)
/// with the same dispatch.
/// Gemma's options (defaults: off): `first_key` > 0 — keys [first_key, n_keys) only (a
/// sliding-window layer: llama.cpp's SWA mask, whose masked keys its flash attention skips);
/// `softcap` > 0 — attention logit soft-capping as ggml_flash_attn_ext computes it: the scale
/// is divided by softcap first, then s = softcap · tanh(s · scale) (tanh_cr). Either one runs
/// the scalar reference of the cache dtype (no SIMD kernel has them yet).
void paged_attention_head(const float* q, const KvLayerView& kv, int kv_head,
                          const int32_t* block_table, int n_keys, float scale, float* out,
                          Isa isa = Isa::kAuto, int first_key = 0, float softcap = 0.f);

/// Attention for one query token and the n_q query heads that share KV head kv_head (a GQA
/// group: query heads kv_head * group .. + n_q - 1 in llama.cpp's / HF's head order, or any
/// part of such a group). q: [n_q][head_dim] float32, rows contiguous; out: [n_q][head_dim].
/// Each K and V row is read and converted once for the whole group, and the heads' online
/// softmax and f16 accumulator chains run side by side, each with exactly its own head's
/// operations in the same order, so out row h is bit-identical to
/// paged_attention_head(q + h * head_dim, kv, kv_head, ..., out + h * head_dim, isa) — for
/// every isa, n_q and head_dim. Other arguments, isa and fallbacks: as paged_attention_head.
/// first_key, softcap: as paged_attention_head.
void paged_attention_group(const float* q, int n_q, const KvLayerView& kv, int kv_head,
                           const int32_t* block_table, int n_keys, float scale, float* out,
                           Isa isa = Isa::kAuto, int first_key = 0, float softcap = 0.f);

/// f32 row x[0..head_dim) -> one KV row of `dtype` (kv_row_bytes bytes), as kv_store
/// converts each (token, head) row.
void quantize_kv_row(KvDtype dtype, const float* x, void* row, int head_dim);

/// True when paged_attention_head(..., isa) runs its own SIMD kernel for f16 caches on this
/// CPU (kAvx512Vnni / kAvx2 with their CPU features; kAuto when either is present).
bool attention_has_simd(Isa isa);

// Internal: the f16-cache kernels (kv.dtype F16). The scalar reference (attention.cc) keeps
// llama.cpp's CPU flash-attention numerics, one head per call, with paged_attention_head's
// arguments; the SIMD versions (attention_simd.inc, compiled per instruction set) take
// paged_attention_group's arguments (n_q = 1: one head) and reproduce the reference bit for
// bit, head by head.
void paged_attention_f16_scalar(const float* q, const KvLayerView& kv, int kv_head, const int32_t* block_table,
                                int n_keys, float scale, float* out, int first_key = 0, float softcap = 0.f);
/// Internal: the Q8_0 / Q4_0 / BF16 cache kernels. Scalar reference (attention_quant.cc),
/// one head per call with paged_attention_head's arguments; the SIMD versions
/// (attention_quant_simd.inc, Q8_0 / Q4_0 only) take paged_attention_group's and reproduce
/// it bit for bit, head by head.
void paged_attention_quant_scalar(const float* q, const KvLayerView& kv, int kv_head, const int32_t* block_table,
                                  int n_keys, float scale, float* out, int first_key = 0, float softcap = 0.f);
namespace avx2 {
void paged_attention_quant_group(const float* q, int n_q, const KvLayerView& kv, int kv_head,
                                 const int32_t* block_table, int n_keys, float scale, float* out);
}
namespace avx512 {
void paged_attention_quant_group(const float* q, int n_q, const KvLayerView& kv, int kv_head,
                                 const int32_t* block_table, int n_keys, float scale, float* out);
}
namespace avx2 {
/// y[i] = expf_glibc(x[i]), i < n, with this ISA's vectors (what the softmax uses).
void expf_batch(const float* x, float* y, int n);
void paged_attention_f16_group(const float* q, int n_q, const KvLayerView& kv, int kv_head,
                               const int32_t* block_table, int n_keys, float scale, float* out);
}
namespace avx512 {
/// y[i] = expf_glibc(x[i]), i < n, with this ISA's vectors (what the softmax uses).
void expf_batch(const float* x, float* y, int n);
void paged_attention_f16_group(const float* q, int n_q, const KvLayerView& kv, int kv_head,
                               const int32_t* block_table, int n_keys, float scale, float* out);
}

}  // namespace pdserve::kernels
