// Model-based proposers: self-speculation by early exit (`--speculative layerskip`) and a
// separate draft model with its own paged KV cache (`--speculative draft`). Both draft
// greedily (argmax), k tokens one forward step at a time for all sequences together.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "engine/spec_proposer.h"
#include "kv/kv_cache_manager.h"

namespace pdserve::engine {

/// Self-speculative decoding (LayerSkip, Elhoushi et al. 2024; Draft & Verify, Zhang et
/// al. 2023): the target's first `layers` layers and its output head propose
/// (model::Model::forward_first_layers). Runs after scheduling, in the draft slots the
/// scheduler granted: it writes K/V of those layers there, which the verification rows
/// then overwrite (every row's K/V is stored before any row attends), so nothing it
/// writes is ever read by the target.
class LayerSkipProposer final : public Proposer {
 public:
  LayerSkipProposer(model::Model& target, kv::KvCacheManager& kv, int layers)
      : target_(target), kv_(kv), layers_(layers) {}
  bool after_schedule() const override { return true; }
  void propose(const std::vector<Sequence*>& seqs, const std::vector<int>& max_k,
               std::vector<std::vector<int32_t>>& out) override;

 private:
  model::Model& target_;
  kv::KvCacheManager& kv_;
  int layers_;
};

/// Speculative decoding with a draft model (Leviathan et al. 2023): a smaller model with
/// the target's vocabulary keeps its own paged KV per sequence (no prefix sharing),
/// catches up on the tokens the sequence gained since its last proposal (positions whose
/// token differs from what it computed are recomputed) and drafts k tokens.
class DraftModelProposer final : public Proposer {
 public:
  /// A pool of `num_blocks` blocks of `block_size` tokens for `draft`.
  DraftModelProposer(std::unique_ptr<model::Model> draft, int block_size, int32_t num_blocks);
  ~DraftModelProposer() override;
  bool after_schedule() const override { return true; }
  bool cheap_probe() const override { return false; }  // the first proposal computes the prompt
  void propose(const std::vector<Sequence*>& seqs, const std::vector<int>& max_k,
               std::vector<std::vector<int32_t>>& out) override;
  void release(int64_t seq_id, int choice_index) override;

 private:
  struct State {
    kv::KvSeq kv;
    std::vector<int32_t> computed;  // tokens whose K/V the draft cache holds, by position
  };
  std::unique_ptr<model::Model> draft_;
  std::unique_ptr<kv::KvCacheManager> kv_;
  std::map<std::pair<int64_t, int>, State> states_;
};

}  // namespace pdserve::engine
