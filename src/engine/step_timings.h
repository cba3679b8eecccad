// Live step timings: what each engine step ran and how long it took, kept so a cost model
// (planner/profile.h) can be calibrated against the running engine (planner/calibrate.h)
// and exported at /metrics as pdserve_engine_step_seconds{kind}.
//
// A step's duration is wall time from when it could start to the end of its sampling: from
// the engine loop's iteration start, or — when the step admits a request that arrived while
// the engine sat idle — from that request's arrival (a server at a low request rate pays
// the wake-up of an idle engine, which `pdserve profile` measures too: it times a prefill
// from submit to token). Time the engine waited with nothing to do is never counted.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/metrics.h"

namespace pdserve::engine {

/// One engine step as the cost model sees it (planner::step_seconds takes the same shape).
struct StepSample {
  uint64_t seq = 0;        // 1, 2, ... in step order (never reused)
  double end_time = 0;     // now_seconds() at the step's end
  double seconds = 0;      // the step's duration (see the file comment)
  int decodes = 0;         // sequences that computed one token (speculative rows included)
  double mean_context = 0; // their mean KV length after the step (tokens); 0 without decodes
  /// Prefill (or recompute) chunks: (tokens computed this step, tokens already in the KV).
  std::vector<std::pair<int, int>> chunks;

  /// "decode" (decodes only), "prefill" (chunks only) or "mixed".
  const char* kind() const;
};

/// What a step ran, before it runs: filled by the engine from its plan.
struct StepShape {
  int decodes = 0;
  double context_sum = 0;  // over the decodes: KV length after the step
  std::vector<std::pair<int, int>> chunks;
  /// Earliest arrival among requests whose first prefill chunk runs this step (-1: none).
  double earliest_new_arrival = -1;
};

/// The last `capacity` step samples and per-kind duration histograms. Written by the engine
/// thread once per step; read by HTTP handlers (thread-safe).
class StepTimings {
 public:
  explicit StepTimings(size_t capacity = 4096);
  /// Records a step that began its loop iteration at `iteration_start` and ended at `end`
  /// (now_seconds() clock). Returns the sample.
  StepSample record(const StepShape& shape, double iteration_start, double end);
  /// Samples with seq > `since`, oldest first (at most the last `capacity`).
  std::vector<StepSample> since(uint64_t since) const;
  /// Duration histograms by kind ("decode", "prefill", "mixed"; only kinds seen).
  std::vector<std::pair<std::string, Histogram>> histograms() const;

 private:
  mutable std::mutex mu_;
  size_t capacity_;
  std::deque<StepSample> ring_;
  uint64_t next_seq_ = 1;
  double prev_end_ = -1;
  Histogram decode_, prefill_, mixed_;
};

}  // namespace pdserve::engine
