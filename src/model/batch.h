// The input of one forward pass: tokens of several sequences (prefill chunks and decode
// steps mixed), where their K/V go (slot mapping) and which rows need logits.
#pragma once

#include <cstdint>
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

  int n_tokens() const { return static_cast<int>(tokens.size()); }
  void clear() {
    tokens.clear(); positions.clear(); slot_mapping.clear(); seq_ids.clear();
    block_tables.clear(); logits_rows.clear();
  }
};

}  // namespace pdserve::model
