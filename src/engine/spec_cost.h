// What a draft row costs, measured: the engine's cost-aware backoff for speculative
// decoding. A decode step of R rows takes about a + b·R seconds (a: reading the weights
// and the step's fixed work; b: one more row), and a proposer spends p seconds per token
// it drafts. With B decode sequences a plain step emits B tokens in a + b·B, so one more
// draft row pays iff the chance that its token is accepted exceeds
//   threshold(B) = (b + p) / ((a + b·B) / B).
// Bandwidth-bound decode (a big model at batch 1: a ≫ b) gives a small threshold; a tiny
// model, a large batch or a draft model as slow as the target gives one near or above 1,
// where speculation cannot win and stops. Only timing decides how many tokens are
// proposed, never which are emitted (engine/spec_proposer.h).
#pragma once

namespace pdserve::engine {

/// Online fit of decode step time against rows (least squares over the recent steps,
/// exponentially weighted) and of proposer time per drafted token.
class SpecCostModel {
 public:
  /// A step of only decode sequences: `rows` rows (1 + draft length per sequence) took
  /// `seconds` apart from proposing. Steps far slower than predicted (the machine
  /// preempted us) are skipped.
  void observe_step(int rows, double seconds);
  /// The proposer drafted `tokens` tokens (0 is fine) in `seconds`.
  void observe_proposer(int tokens, double seconds);
  /// The acceptance probability a draft row must exceed with `seqs` decode sequences in
  /// the step; 0 until the fit has seen steps of different sizes (then no gating).
  double threshold(int seqs) const;
  /// Called once per step: true when this step should run without drafts, so that the
  /// fit sees steps of different sizes even when every sequence proposes k_max tokens:
  /// every 4th step before the first fit, every 32nd after it.
  bool plain_step();
  /// Fitted seconds per step and per row (0 before the fit).
  double step_seconds() const { return a_; }
  double row_seconds() const { return b_; }

 private:
  static constexpr double kDecay = 0.97;  // weight of the previous steps (~33-step memory)
  double w_ = 0, sx_ = 0, sy_ = 0, sxx_ = 0, sxy_ = 0;  // weighted sums over steps
  double a_ = 0, b_ = 0;
  bool fit_ = false;
  double prop_seconds_ = 0, prop_tokens_ = 0;  // decayed
  int steps_ = 0;
};

/// One engine step's bookkeeping for SpecCostModel (engine thread only).
struct SpecStepTiming {
  SpecCostModel cost;
  double step_start = 0;        // now_seconds() when the step began
  double proposer_seconds = 0;  // spent in Proposer::propose this step
  int rows = 0;                 // rows the step's plan runs
  bool decode_only = false;     // every planned sequence was a decode
};

}  // namespace pdserve::engine
