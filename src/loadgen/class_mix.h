// A multi-class synthetic load for `pdserve bench` (`--class`): each request belongs to one
// SLO class — a name sent as the request's `slo_class` field (pdserve's extension, see
// gateway/slo_class.h), a share of the requests, its own prompt/output length
// distributions and its own SLO — and the report gives SLO attainment per class and the
// goodput over all classes (requests within their own class's SLO per second, as in
// DistServe, Zhong et al. 2024).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "loadgen/stats.h"
#include "loadgen/stream_client.h"

namespace pdserve::loadgen {

/// One class of a mix. Parsed from `NAME:KEY=VALUE,...` with keys `share` (relative
/// weight > 0, default 1), `input` / `output` (length distributions as --input-len, default
/// 128), `ttft_ms` / `tpot_ms` (the class's SLO; default pdserve's class targets: high 300 /
/// 50, medium 1000 / 100, low 10000 / 500 ms; other names have none unless given).
/// Example: `high:share=0.6,input=uniform:32:96,output=64,ttft_ms=300,tpot_ms=50`.
struct ClassSpec {
  std::string name;
  double share = 1;                  // after parse_class_mix: the fraction of requests (sums to 1)
  std::string input = "128", output = "128";
  Slo slo;
};

/// Parses one `--class` value; errors name the spec and the bad part.
Result<ClassSpec> parse_class_spec(const std::string& spec);
/// Parses every `--class` value, refuses duplicate names, and normalises the shares to
/// fractions summing to 1. Empty input gives an empty mix.
Result<std::vector<ClassSpec>> parse_class_mix(const std::vector<std::string>& specs);

/// What one class got in a run.
struct ClassSummary {
  std::string name;
  Slo slo;
  size_t requests = 0;   // sent
  size_t completed = 0, failed = 0;
  size_t attained = 0;   // completed within the class's SLO (a failed request never attains)
  double attainment = 0; // attained / requests (0 without requests)
  double goodput = 0;    // attained / run duration, req/s
  Distribution ttft_ms, tpot_ms;  // over completed requests
};

/// Per-class results. `class_of[i]` is request i's index into `classes` (-1: none, skipped);
/// `duration_s` is the run's (first send to last end), shared by every class's goodput.
/// Requests never sent are not counted.
std::vector<ClassSummary> summarize_classes(const std::vector<RequestRecord>& recs,
                                            const std::vector<int64_t>& expected_input,
                                            const std::vector<int>& class_of, const std::vector<ClassSpec>& classes,
                                            double duration_s);

}  // namespace pdserve::loadgen
