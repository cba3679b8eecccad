// Paged attention over a block-structured KV cache (Kwon et al. 2023, vLLM
// PagedAttention) with an online softmax (Milakov & Gimelshein 2018), for prefill and
// decode alike: one query token attends to keys [0, n_keys) of its sequence, found
// through the sequence's block table.
#pragma once

#include <cstdint>

#include "kernels/matmul.h"  // Isa

namespace pdserve::kernels {

enum class KvDtype { F32, F16 };

/// Largest head dimension the attention kernels (and RoPE in the model) take: their
/// per-call scratch arrays live on the stack, sized by it. model::Model::load rejects a
/// model with a larger head_dim.
inline constexpr int kMaxHeadDim = 512;

/// One layer's K and V pools, each shaped [num_blocks][block_size][n_kv_heads][head_dim]
/// in `dtype`.
struct KvLayerView {
  void* k = nullptr;
  void* v = nullptr;
  KvDtype dtype = KvDtype::F16;
  int block_size = 16;
  int n_kv_heads = 0;
  int head_dim = 0;
};

/// Writes one token's K and V (each [n_kv_heads][head_dim] float32) into `slot`
/// (= block_id * block_size + offset in block), converting to the cache dtype.
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
/// falls back to the next one down. Every path gives the same bits. F32 caches are scalar.
void paged_attention_head(const float* q, const KvLayerView& kv, int kv_head,
                          const int32_t* block_table, int n_keys, float scale, float* out,
                          Isa isa = Isa::kAuto);

/// Attention for one query token and the n_q query heads that share KV head kv_head (a GQA
/// group: query heads kv_head * group .. + n_q - 1 in llama.cpp's / HF's head order, or any
/// part of such a group). q: [n_q][head_dim] float32, rows contiguous; out: [n_q][head_dim].
/// Each K and V row is read and converted once for the whole group, and the heads' online
/// softmax and f16 accumulator chains run side by side, each with exactly its own head's
/// operations in the same order, so out row h is bit-identical to
/// paged_attention_head(q + h * head_dim, kv, kv_head, ..., out + h * head_dim, isa) — for
/// every isa, n_q and head_dim. Other arguments, isa and fallbacks: as paged_attention_head.
void paged_attention_group(const float* q, int n_q, const KvLayerView& kv, int kv_head,
                           const int32_t* block_table, int n_keys, float scale, float* out,
                           Isa isa = Isa::kAuto);

/// True when paged_attention_head(..., isa) runs its own SIMD kernel for f16 caches on this
/// CPU (kAvx512Vnni / kAvx2 with their CPU features; kAuto when either is present).
bool attention_has_simd(Isa isa);

// Internal: the f16-cache kernels (kv.dtype F16). The scalar reference (attention.cc) keeps
// llama.cpp's CPU flash-attention numerics, one head per call, with paged_attention_head's
// arguments; the SIMD versions (attention_simd.inc, compiled per instruction set) take
// paged_attention_group's arguments (n_q = 1: one head) and reproduce the reference bit for
// bit, head by head.
void paged_attention_f16_scalar(const float* q, const KvLayerView& kv, int kv_head, const int32_t* block_table,
                                int n_keys, float scale, float* out);
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
