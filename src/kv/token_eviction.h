// Per-sequence token eviction under a KV budget (--kv-budget): which cached positions of a
// sequence are kept when it holds more than `budget` tokens of KV.
//
//  * streaming — StreamingLLM (Xiao et al., "Efficient Streaming Language Models with
//    Attention Sinks", ICLR 2024): the first `sinks` positions (attention sinks) plus the
//    most recent budget - sinks positions.
//  * h2o — H2O (Zhang et al., "H2O: Heavy-Hitter Oracle for Efficient Generative Inference
//    of Large Language Models", NeurIPS 2023): the sinks, the `recent` most recent
//    positions, and the budget - sinks - recent other positions with the largest
//    accumulated attention mass (the heavy hitters). The paper keeps one set per head and
//    layer; a paged block table has one slot per position for every layer and head, so
//    here a position's mass is the SUM over all query heads of all layers (and over every
//    query that attended to it) of its softmax attention probability — one score per
//    position (see kernels/attention_scores.h for how it is computed).
//
// The kept entries keep the RoPE positions they were computed at (their K is stored
// rotated); queries use their true position. StreamingLLM instead renumbers positions
// inside the cache to run past the trained context; here context stays bounded by the
// model's context length, as in H2O, so no re-rotation is needed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pdserve::kv {

enum class TokenEvictionPolicy {
  kH2o,        // sinks + recent window + heavy hitters
  kStreaming,  // sinks + recent window
};

/// The --kv-evict spelling: "h2o" / "streaming".
inline const char* token_eviction_name(TokenEvictionPolicy p) { return p == TokenEvictionPolicy::kH2o ? "h2o" : "streaming"; }

/// Server-wide eviction settings; the budget itself is per sequence (0 = keep all).
struct TokenEvictionConfig {
  TokenEvictionPolicy policy = TokenEvictionPolicy::kH2o;
  int sinks = 4;              // --kv-sinks: leading positions always kept
  int recent = -1;            // --kv-recent as tokens; < 0: recent_ratio of the budget
  double recent_ratio = 0.5;  // --kv-recent as a ratio in [0, 1) (H2O's even heavy/recent split)

  /// Recent-window length of a sequence with `budget` tokens kept. streaming: budget - sinks
  /// (the window fills the budget); h2o: `recent`, or floor(recent_ratio * budget).
  int recent_for(int budget) const;
  /// The smallest budget >= 1 with budget >= sinks + recent_for(budget) (requests below it are
  /// refused).
  int min_budget() const;
  /// True when the policy ranks positions by attention mass (h2o).
  bool needs_attention_mass() const { return policy == TokenEvictionPolicy::kH2o; }
  /// "" when `budget` (0 = keep all) is valid, else why not (names --kv-budget and the minimum).
  std::string check(int budget) const;
};

/// Which of `n` entries (in position order; `mass`[i] = entry i's accumulated attention
/// mass, read only by h2o, may be null for streaming) are kept under `budget` (> 0, >=
/// cfg.min_budget()). Returns ascending indices; all of them when n <= budget, else exactly
/// `budget`. The heavy hitters are the entries outside sinks and recent window with the
/// largest mass, ties going to the later position, so the choice is a pure function of
/// (n, mass) — deterministic.
std::vector<int32_t> select_kept(const TokenEvictionConfig& cfg, int budget, int n, const float* mass);

/// Adds one query token's attention mass `row` (length n: keys 0..n-1 of the sequence's
/// kept entries) into `mass`, growing it to n with zeros first. Rows must be added in
/// position order, so the float sums do not depend on batching or chunking.
void add_attention_mass(std::vector<float>& mass, const float* row, int n);

}  // namespace pdserve::kv
