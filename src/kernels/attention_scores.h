// Attention probabilities for token eviction (H2O's accumulated attention mass, Zhang et
// al., NeurIPS 2023): a second pass over K for the query heads of one token, separate
// from the fused attention kernels (attention.h), which never materialise probabilities.
#pragma once

#include <cstdint>

#include "kernels/attention.h"

namespace pdserve::kernels {

/// For the n_q query heads q ([n_q][head_dim] float32, rows contiguous) that read KV head
/// `kv_head`, computes each head's softmax(scale * q·k_j) over keys j in [0, n_keys) of the
/// sequence (through `block_table`) and adds it to mass[j], head by head in order. Scores
/// are float32 dot products of q with the stored K converted to float32 (read_k_row); the
/// softmax uses std::exp. The result ranks positions for eviction only — it is not bit-
/// identical to the probabilities inside paged_attention_group, and never feeds the output.
/// Cost: one more read of the n_keys K rows and n_q * n_keys * head_dim multiply-adds,
/// i.e. about the Q·K half of the attention itself; callers run it only for sequences
/// whose eviction policy ranks by mass. Every KV dtype (quantised K is dequantised row by
/// row, as ggml's dequantize_row_*).
void attention_mass_group(const float* q, int n_q, const KvLayerView& kv, int kv_head, const int32_t* block_table,
                          int n_keys, float scale, float* mass);

/// K row of `kv_head` at cache `slot` as float32 [head_dim] — the one per-dtype K read of
/// attention_mass_group.
void read_k_row(const KvLayerView& kv, int64_t slot, int kv_head, float* out);

}  // namespace pdserve::kernels
