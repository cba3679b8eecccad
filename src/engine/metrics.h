// Engine metrics: counters and latency histograms, exported by the server at /metrics in
// Prometheus text format (names follow vLLM's where they overlap).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
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
  // Disaggregation (present on workers; zero on a monolithic server).
  bool has_transfer = false;
  std::map<std::string, int64_t> kv_transfer_bytes;     // by codec
  std::map<std::string, int64_t> kv_transfer_failures;  // by reason
  Histogram kv_transfer_seconds;
  int64_t remote_prefills = 0, local_prefills = 0, recompute_fallbacks = 0;
  // The router's decode workers (address → 1 healthy, 0 not); empty elsewhere.
  std::map<std::string, int> decode_workers;
};

/// Request-level metrics, written by the engine thread, read by /metrics handlers.
class EngineMetrics {
 public:
  EngineMetrics();
  /// One finished request (one submit: all its choices done).
  void record_request(const std::string& finished_reason, double queue_s, double ttft_s, double tpot_s,
                      bool has_tpot, double e2e_s, int64_t prompt_tokens, int64_t generation_tokens);
  void add_prefix_query(int64_t queried_tokens, int64_t hit_tokens);
  /// Copies the request-level part into `out`.
  void fill(MetricsSnapshot& out) const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, int64_t> success_;
  int64_t prompt_tokens_ = 0, generation_tokens_ = 0;
  int64_t prefix_queries_ = 0, prefix_hits_ = 0;
  Histogram ttft_, tpot_, e2e_, queue_;
};

}  // namespace pdserve::engine
