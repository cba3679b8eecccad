// The input of one forward pass: tokens of several sequences (prefill chunks and decode
// steps mixed), where their K/V go (slot mapping) and which rows need logits.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace pdserve::model {

/// Flattened batch of `n_tokens()` tokens. Token i belongs to sequence seq_ids[i], sits at
/// position positions[i] of that sequence, and writes its K/V to cache slot
/// slot_mapping[i] (= block_id * block_size + offset). Attention for token i reads keys
/// 0..positions[i] through block_tables[seq_ids[i]], so a sequence's earlier tokens must
/// already be in the cache or earlier in this batch.
struct Batch {
  std::vector<int32_t> tokens;
  std::vector<int32_t> positions;
  std::vector<int64_t> slot_mapping;
  std::vector<int32_t> seq_ids;                 // index into block_tables
  std::vector<const int32_t*> block_tables;     // per sequence: its block ids
  std::vector<int32_t> logits_rows;             // token indices whose logits are returned, in order

  /// Per token (empty = all 0): kernels::gemm_order_flag(pos, prompt_len) — 1 or 2 for a
  /// prompt token of a prompt of >= 2 tokens (2: in the ragged last prompt_len % 4), 0 for
  /// a generated token (also when a preempted sequence recomputes it) and for the single
  /// token of a 1-token prompt. It picks the matmul reduction order (kernels::matmul):
  /// the reference engine (llama.cpp CPU) multiplies a multi-token prompt batch with
  /// tinyBLAS sgemm and a one-token decode step with ggml_vec_dot_f32, whose float sums
  /// differ in the last bits. Keying the order on the token's role — not on how many
  /// tokens share this batch — reproduces the reference while keeping batch invariance
  /// (DESIGN.md §3): a token gets the same bits alone, batched, chunked or recomputed.
  /// Rule for builders: flag = kernels::gemm_order_flag(pos, prompt_len).
  /// The last layer's FFN and the output head ignore it: they run on the logits rows only,
  /// in decode order, as the reference runs them on its one output token per prompt.
  std::vector<uint8_t> gemm_order;

  /// Per token (empty = positions[i] + 1 each): how many KV entries of its sequence token i
  /// attends to, through its block table — fewer than positions[i] + 1 once the sequence
  /// has evicted tokens (--kv-budget; kv::KvSeq::num_evicted). positions[i] stays the RoPE
  /// position.
  std::vector<int32_t> n_keys;
  /// Per token (empty = none): where to add its attention mass for H2O eviction — a row of
  /// n_keys floats (the keys' softmax probabilities summed over every query head of every
  /// layer, layer by layer, heads in order; kernels::attention_mass_group), or nullptr.
  std::vector<float*> attn_mass;

  /// Called with the layer index as soon as that layer's K/V for every token of the
  /// batch are in the cache (layer-wise KV streaming on a prefill worker); may be empty.
  std::function<void(int layer)> after_layer;

  int n_tokens() const { return static_cast<int>(tokens.size()); }
  /// Keys token i attends to.
  int keys_of(int i) const { return n_keys.empty() ? positions[i] + 1 : n_keys[i]; }
};

}  // namespace pdserve::model
