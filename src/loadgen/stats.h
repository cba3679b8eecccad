// The serving metrics of `pdserve bench`, computed from per-request records the way
// serving benchmarks define them (TTFT, TPOT, ITL, E2E, throughput, goodput under an SLO).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "loadgen/stream_client.h"

namespace pdserve::loadgen {

/// The p-th percentile (p in [0, 100]) of `sorted` (ascending) by linear interpolation
/// between closest ranks — numpy's default method: rank r = p/100 * (n-1), result
/// x[floor r] + (r - floor r) * (x[floor r + 1] - x[floor r]). NaN when empty.
double percentile_sorted(const std::vector<double>& sorted, double p);
/// Same on unsorted values (sorts a copy).
double percentile(std::vector<double> values, double p);

/// Mean, percentiles and range of a sample (all NaN, count 0, when empty).
struct Distribution {
  size_t count = 0;
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, min = 0, max = 0;
};
Distribution summarize(std::vector<double> values);

/// Service-level objective: a request is "good" when TTFT <= ttft_ms and TPOT <= tpot_ms.
/// A bound <= 0 is not checked; with neither set there is no goodput.
struct Slo {
  double ttft_ms = 0;
  double tpot_ms = 0;
  bool set() const { return ttft_ms > 0 || tpot_ms > 0; }
};

/// Per-request latencies (seconds) derived from a record.
struct RequestMetrics {
  bool ok = false;
  int64_t input_tokens = 0;   // usage.prompt_tokens, else the synthesized length
  int64_t output_tokens = 0;  // usage.completion_tokens, else the number of text chunks
  double ttft_s = 0;          // first text chunk - send
  double e2e_s = 0;           // end of response - send
  std::optional<double> tpot_s;  // (e2e - ttft) / (output_tokens - 1); none for 1 token
};
RequestMetrics request_metrics(const RequestRecord& r, int64_t expected_input_tokens);

/// True when the request is within every bound the SLO sets (no TPOT: that bound holds).
bool meets_slo(const RequestMetrics& m, const Slo& slo);

struct Summary {
  size_t requests = 0, completed = 0, failed = 0, not_sent = 0;
  double duration_s = 0;  // first send to last response end
  int64_t input_tokens = 0, output_tokens = 0;  // over completed requests
  double request_throughput = 0;      // completed / duration
  double output_throughput = 0;       // output tokens / duration
  double total_token_throughput = 0;  // (input + output tokens) / duration
  std::optional<double> goodput;      // good requests / duration (when the SLO is set)
  size_t good_requests = 0;
  Distribution ttft_ms, tpot_ms, itl_ms, e2e_ms;  // over completed requests; ITL pools every
                                                  // gap between consecutive text chunks
};
/// `expected_input[i]` is request i's synthesized prompt length (used without usage).
Summary summarize_run(const std::vector<RequestRecord>& recs, const std::vector<int64_t>& expected_input,
                      const Slo& slo);

/// Throughput over time in fixed bins from the start of the run.
struct Timeline {
  double bin_s = 1;
  std::vector<double> t_s;                  // bin centres
  std::vector<double> output_tok_per_s;     // generated tokens arriving in the bin / bin_s
  std::vector<double> prompt_tok_per_s;     // prompt tokens of requests whose first token
                                            // arrived in the bin (prefill done) / bin_s
  std::vector<double> completed_per_s;      // requests finishing in the bin / bin_s
  std::vector<double> in_flight;            // mean requests in flight (sent, not finished) over the bin
};
/// Each completed request's output tokens are spread evenly over its text chunks; its
/// prompt tokens (usage, else expected_input[i]) count at its first token. bin_s <= 0 picks
/// about 60 bins over the run.
Timeline timeline(const std::vector<RequestRecord>& recs, const std::vector<int64_t>& expected_input,
                  double bin_s = 0);

}  // namespace pdserve::loadgen
