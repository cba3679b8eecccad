#include "engine/step_timings.h"

#include <algorithm>

namespace pdserve::engine {

namespace {
// Step durations in seconds: a decode step of a small model is ~0.1-2 ms, a long prefill
// chunk of a big one seconds.
const std::vector<double> kStepBounds = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                         0.05,   0.1,     0.25,   0.5,   1.0,    2.5,   5.0,  10.0};
}  // namespace

const char* StepSample::kind() const {
  if (chunks.empty()) return "decode";
  return decodes > 0 ? "mixed" : "prefill";
}

StepTimings::StepTimings(size_t capacity)
    : capacity_(std::max<size_t>(1, capacity)), decode_(kStepBounds), prefill_(kStepBounds), mixed_(kStepBounds) {}

StepSample StepTimings::record(const StepShape& shape, double iteration_start, double end) {
  std::lock_guard<std::mutex> lk(mu_);
  StepSample s;
  s.seq = next_seq_++;
  s.end_time = end;
  // A request that arrived while the engine waited idle: its wait for the engine to wake
  // counts (from its arrival, not before the previous step's end).
  double start = iteration_start;
  if (shape.earliest_new_arrival >= 0 && shape.earliest_new_arrival < start)
    start = std::max(shape.earliest_new_arrival, prev_end_);
  s.seconds = std::max(0.0, end - start);
  s.decodes = shape.decodes;
  s.mean_context = shape.decodes > 0 ? shape.context_sum / shape.decodes : 0;
  s.chunks = shape.chunks;
  prev_end_ = end;
  Histogram& h = s.chunks.empty() ? decode_ : (s.decodes > 0 ? mixed_ : prefill_);
  h.observe(s.seconds);
  ring_.push_back(s);
  if (ring_.size() > capacity_) ring_.pop_front();
  return s;
}

std::vector<StepSample> StepTimings::since(uint64_t since) const {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<StepSample> out;
  for (const StepSample& s : ring_)
    if (s.seq > since) out.push_back(s);
  return out;
}

std::vector<std::pair<std::string, Histogram>> StepTimings::histograms() const {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<std::pair<std::string, Histogram>> out;
  if (decode_.count) out.emplace_back("decode", decode_);
  if (prefill_.count) out.emplace_back("prefill", prefill_);
  if (mixed_.count) out.emplace_back("mixed", mixed_);
  return out;
}

}  // namespace pdserve::engine
