// N-gram proposer ("prompt lookup decoding", Saxena 2023; vLLM's `ngram` method,
// llama.cpp's lookup): the last n tokens of a sequence are looked up in its own prompt
// and output, and the tokens that followed the match are proposed.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/spec_proposer.h"

namespace pdserve::engine {

/// Up to `k` tokens proposed for `tokens` (prompt + output so far): for n from `n_max`
/// down to `n_min`, the most recent earlier occurrence of the last n tokens decides; the
/// tokens after it (at most k, up to the end of `tokens`) are the proposal. Empty when no
/// suffix of those lengths occurs earlier. O(len · n_max) per call.
std::vector<int32_t> ngram_lookup(const std::vector<int32_t>& tokens, int n_min, int n_max, int k);

/// `--speculative ngram`: ngram_lookup on each sequence's tokens, before scheduling.
class NgramProposer final : public Proposer {
 public:
  NgramProposer(int n_min, int n_max) : n_min_(n_min), n_max_(n_max) {}
  bool after_schedule() const override { return false; }
  void propose(const std::vector<Sequence*>& seqs, const std::vector<int>& max_k,
               std::vector<std::vector<int32_t>>& out) override;

 private:
  int n_min_, n_max_;
};

}  // namespace pdserve::engine
