// `pdserve bench` as a library: build a workload (trace replay or synthetic), synthesize
// exact-length prompts, drive the server, and summarise what it measured.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "loadgen/class_mix.h"
#include "loadgen/stats.h"
#include "loadgen/stream_client.h"
#include "loadgen/workload.h"

namespace pdserve::loadgen {

struct BenchConfig {
  // Server.
  std::string url = "http://127.0.0.1:8080";  // base URL; `endpoint` is appended
  std::string endpoint = "/v1/completions";
  std::string model;                          // "model" field (omitted when empty)
  std::string api_key;
  std::string tokenizer;                      // GGUF whose vocab the server uses
  // Workload: a trace, or a synthetic generator (rate 0 = all at once / closed loop).
  std::string trace_format;                   // "mooncake" | "azure" | "" (synthetic)
  std::string trace_path;
  TraceScaling scaling;                       // for synthetic: max_input/max_output/max_requests/duration_s
  double rate = 0;
  int concurrency = 0;                        // requests in flight at most (0 = no limit)
  std::string input_len = "128", output_len = "128";
  std::vector<std::string> class_mix;         // --class specs (class_mix.h); synthetic only
  bool send_class = true;                     // send each request's class as "slo_class"
  uint64_t seed = 0;
  // Request body.
  double temperature = 0;
  bool ignore_eos = true;
  std::string extra_body;                     // JSON object merged into every request body
  // Measurement and output.
  Slo slo;
  double request_timeout_s = 600;
  bool progress = true;
};

struct BenchReport {
  BenchConfig config;
  std::string workload;                  // Workload::description
  int64_t block_tokens = 0;
  std::optional<PrefixStats> prefix;     // Mooncake: the ideal (infinite-cache) prefix hits
  std::vector<int64_t> expected_input;   // per request: synthesized prompt tokens
  std::vector<int64_t> expected_output;  // per request: max_tokens
  std::vector<RequestRecord> records;
  Summary summary;                       // with a class mix: goodput counts each request
                                         // against its own class's SLO
  std::vector<ClassSpec> classes;        // the class mix (shares normalised), empty without
  std::vector<int> class_of;             // per request: index into classes (-1: none)
  std::vector<ClassSummary> class_summary;
  std::string started_at;                // UTC, ISO 8601
};

/// The workload `cfg` describes (trace read and scaled, or generated), with lengths fitted
/// to a tokenizer whose shortest prompt is `min_input` tokens.
Result<Workload> build_workload(const BenchConfig& cfg, int64_t min_input);

/// The JSON body of one streaming completion request (with `"slo_class": slo_class` when
/// that is not empty).
std::string request_body(const BenchConfig& cfg, const std::string& prompt, int64_t max_tokens,
                         const std::string& slo_class = {});

/// Runs the whole benchmark (progress on stderr when cfg.progress).
Result<BenchReport> run_bench(const BenchConfig& cfg);

}  // namespace pdserve::loadgen
