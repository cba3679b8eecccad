#include "engine/metrics.h"

#include "engine/kv_transfer.h"

#include <algorithm>

namespace pdserve::engine {

void Histogram::observe(double v) {
  const size_t i = std::lower_bound(bounds.begin(), bounds.end(), v) - bounds.begin();
  counts[i]++;
  sum += v;
  count++;
}

namespace {
// Bucket bounds in seconds (as vLLM's, trimmed).
const std::vector<double> kTtftBounds = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                         0.75,  1.0,   2.5,  5.0,  7.5,  10.0, 20.0, 40.0, 80.0};
const std::vector<double> kTpotBounds = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1,
                                         0.15,   0.2,   0.3,    0.4,   0.5,  0.75,  1.0,  2.5};
const std::vector<double> kE2eBounds = {0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0,
                                        10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0};
}  // namespace

EngineMetrics::EngineMetrics() : ttft_(kTtftBounds), tpot_(kTpotBounds), e2e_(kE2eBounds), queue_(kE2eBounds) {}

void EngineMetrics::record_request(const std::string& finished_reason, double queue_s, double ttft_s, double tpot_s,
                                   bool has_tpot, double e2e_s, int64_t prompt_tokens, int64_t generation_tokens) {
  std::lock_guard<std::mutex> lk(mu_);
  success_[finished_reason]++;
  prompt_tokens_ += prompt_tokens;
  generation_tokens_ += generation_tokens;
  queue_.observe(queue_s);
  if (ttft_s >= 0) ttft_.observe(ttft_s);
  if (has_tpot) tpot_.observe(tpot_s);
  e2e_.observe(e2e_s);
}

void EngineMetrics::record_class_queue(const std::string& slo_class, double queue_s) {
  std::lock_guard<std::mutex> lk(mu_);
  class_queue_.try_emplace(slo_class, kE2eBounds).first->second.observe(queue_s);
}

void EngineMetrics::add_prefix_query(int64_t queried_tokens, int64_t hit_tokens) {
  std::lock_guard<std::mutex> lk(mu_);
  prefix_queries_ += queried_tokens;
  prefix_hits_ += hit_tokens;
}

void EngineMetrics::record_spec(int proposed, int accepted) {
  std::lock_guard<std::mutex> lk(mu_);
  spec_drafts_++;
  spec_draft_tokens_ += proposed;
  spec_accepted_ += accepted;
  if (spec_per_pos_.size() < static_cast<size_t>(proposed)) spec_per_pos_.resize(proposed, 0);
  for (int i = 0; i < accepted; ++i) spec_per_pos_[i]++;
}

void EngineMetrics::fill(MetricsSnapshot& out) const {
  std::lock_guard<std::mutex> lk(mu_);
  out.spec_drafts = spec_drafts_;
  out.spec_draft_tokens = spec_draft_tokens_;
  out.spec_accepted_tokens = spec_accepted_;
  out.spec_accepted_per_pos = spec_per_pos_;
  out.request_success = success_;
  out.prompt_tokens = prompt_tokens_;
  out.generation_tokens = generation_tokens_;
  out.prefix_cache_queries = prefix_queries_;
  out.prefix_cache_hits = prefix_hits_;
  out.ttft = ttft_;
  out.tpot = tpot_;
  out.e2e = e2e_;
  out.queue_time = queue_;
  out.queue_time_by_class = class_queue_;
}

void TransferMetrics::add_bytes(const std::string& codec, int64_t bytes) {
  std::lock_guard<std::mutex> lk(mu_);
  bytes_[codec] += bytes;
}

void TransferMetrics::add_transfer_seconds(double s) {
  std::lock_guard<std::mutex> lk(mu_);
  seconds_.observe(s);
}

void TransferMetrics::add_failure(const std::string& reason) {
  std::lock_guard<std::mutex> lk(mu_);
  failures_[reason]++;
}

void TransferMetrics::fill(MetricsSnapshot& out) const {
  std::lock_guard<std::mutex> lk(mu_);
  out.has_transfer = true;
  out.kv_transfer_bytes = bytes_;
  out.kv_transfer_failures = failures_;
  out.kv_transfer_seconds = seconds_;
  out.remote_prefills = remote_;
  out.local_prefills = local_;
  out.recompute_fallbacks = fallback_;
}

}  // namespace pdserve::engine
