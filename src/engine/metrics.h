// Engine metrics: counters and latency histograms, exported by the server at /metrics in
// Prometheus text format (names follow vLLM's where they overlap).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace pdserve::engine {

/// A Prometheus histogram: cumulative counts per upper bound, plus sum and count.
struct Histogram {
  std::vector<double> bounds;          // upper bounds, ascending (+Inf implied)
  std::vector<uint64_t> counts;        // per bucket (not cumulative), bounds.size() + 1
  double sum = 0;
  uint64_t count = 0;

  explicit Histogram(std::vector<double> b = {}) : bounds(std::move(b)), counts(bounds.size() + 1, 0) {}
  void observe(double v);
};

/// One KV store tier's counters (kv::TierStats; blocks/bytes -1 when the tier cannot tell).
struct KvStoreTierMetrics {
  std::string tier;  // "disk" or "redis"
  int64_t hits = 0, misses = 0, writes = 0, errors = 0;
  int64_t bytes_read = 0, bytes_written = 0;
  int64_t blocks = -1, bytes = -1;
  bool up = true;  // answered its last call
  Histogram get_seconds, put_seconds;
};

/// The router's traffic of one SLO class (the planner's input: arrivals, lengths, SLO
/// attainment against the request's own targets; a target of 0 counts as met).
struct ClassTraffic {
  int64_t arrivals = 0, finished = 0, prompt_tokens = 0, generation_tokens = 0, attained = 0;
};

/// Snapshot of everything /metrics reports about the engine.
struct MetricsSnapshot {
  int64_t requests_running = 0, requests_waiting = 0;
  int64_t kv_blocks_total = 0, kv_blocks_used = 0, kv_blocks_cached = 0, kv_blocks_free = 0;
  int64_t kv_block_bytes = 0;  // K+V of one block, all layers (0: not known, e.g. the router)
  int64_t prefix_cache_queries = 0, prefix_cache_hits = 0;  // in tokens
  int64_t preemptions = 0;
  int64_t prompt_tokens = 0, generation_tokens = 0;
  std::map<std::string, int64_t> request_success;  // by finished_reason
  Histogram ttft, tpot, e2e, queue_time;
  /// Engine step durations by kind ("decode", "prefill", "mixed"; engine/step_timings.h).
  std::vector<std::pair<std::string, Histogram>> step_seconds;
  /// Queue time (arrival to first scheduled) of classed requests, by SLO class name.
  std::map<std::string, Histogram> queue_time_by_class;
  // Disaggregation (present on workers; zero on a monolithic server).
  bool has_transfer = false;
  std::map<std::string, int64_t> kv_transfer_bytes;     // by codec
  std::map<std::string, int64_t> kv_transfer_failures;  // by reason
  Histogram kv_transfer_seconds;
  int64_t remote_prefills = 0, local_prefills = 0, recompute_fallbacks = 0;
  // Speculative decoding (present with --speculative; vLLM's spec_decode_* counters).
  bool has_spec = false;
  int64_t spec_drafts = 0;           // verifications (sequence-steps with a proposal)
  int64_t spec_draft_tokens = 0;     // proposed tokens
  int64_t spec_accepted_tokens = 0;  // proposed tokens equal to the token emitted
  std::vector<int64_t> spec_accepted_per_pos;  // [i]: accepted proposals at draft position i
  // KV store tiers (empty without --kv-offload-dir / --kv-store).
  std::vector<KvStoreTierMetrics> kv_store;
  // The router's decode workers (address → 1 healthy, 0 not); empty elsewhere.
  std::map<std::string, int> decode_workers;
  // The router's requests by SLO class name ("none" without a class); empty elsewhere.
  std::map<std::string, ClassTraffic> router_classes;
};

/// Request-level metrics, written by the engine thread, read by /metrics handlers.
class EngineMetrics {
 public:
  EngineMetrics();
  /// One finished request (one submit: all its choices done).
  void record_request(const std::string& finished_reason, double queue_s, double ttft_s, double tpot_s,
                      bool has_tpot, double e2e_s, int64_t prompt_tokens, int64_t generation_tokens);
  void add_prefix_query(int64_t queried_tokens, int64_t hit_tokens);
  /// One verification: `proposed` draft tokens, the first `accepted` of them matched.
  void record_spec(int proposed, int accepted);
  /// The queue time of one finished request of SLO class `slo_class` ("high", ...).
  void record_class_queue(const std::string& slo_class, double queue_s);
  /// Copies the request-level part into `out`.
  void fill(MetricsSnapshot& out) const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, int64_t> success_;
  int64_t prompt_tokens_ = 0, generation_tokens_ = 0;
  int64_t prefix_queries_ = 0, prefix_hits_ = 0;
  int64_t spec_drafts_ = 0, spec_draft_tokens_ = 0, spec_accepted_ = 0;
  std::vector<int64_t> spec_per_pos_;
  Histogram ttft_, tpot_, e2e_, queue_;
  std::map<std::string, Histogram> class_queue_;
};

}  // namespace pdserve::engine
