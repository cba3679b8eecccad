// What `pdserve bench` sends: a list of requests with arrival times and exact token
// lengths, from a scaled trace or from a synthetic (Poisson / closed-loop) generator.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "base/status.h"
#include "loadgen/trace.h"

namespace pdserve::loadgen {

/// One request to send.
struct WorkItem {
  double arrival_s = 0;           // seconds after the start of the run
  int64_t input_len = 0;          // prompt tokens, BOS included
  int64_t output_len = 0;         // max_tokens
  std::vector<int64_t> hash_ids;  // ids of the prompt's leading blocks (Workload::block_tokens each)
  int cls = -1;                   // index into SyntheticOptions::classes (-1: no class mix)
};

/// A run's requests, sorted by arrival.
struct Workload {
  std::vector<WorkItem> items;
  int64_t block_tokens = 0;  // tokens per hash_ids block after scaling (0: no hash ids)
  std::string description;   // one line: source and scaling, printed with the results
};

/// How a trace is fitted to the model and machine under test. Applied in this order:
/// lengths scaled and capped, first `max_requests`, times scaled, arrivals past `duration_s` dropped.
struct TraceScaling {
  double time_scale = 1.0;    // arrival times are multiplied by this (0.01 = 100x faster)
  double length_scale = 1.0;  // input and output lengths are multiplied by this (rounded)
  int64_t max_input = 0;      // cap on prompt tokens after scaling, BOS included (0 = none)
  int64_t max_output = 0;     // cap on output tokens after scaling (0 = none)
  size_t max_requests = 0;    // replay only the first N requests (0 = all)
  double duration_s = 0;      // replay only requests arriving in the first D scaled seconds (0 = all)
};

/// Tokens per Mooncake hash block after scaling: round(512 * length_scale), at least 1.
int64_t scaled_block_tokens(double length_scale);

/// Scales a trace. Prompts get at least `min_input` tokens and outputs at least 1; hash_ids
/// are cut to the blocks that the (capped) prompt still covers.
Workload scale_trace(const std::vector<TraceEntry>& trace, TraceFormat format, const TraceScaling& s,
                     int64_t min_input);

/// A length distribution: "N" (fixed), "uniform:LO:HI" (integers, inclusive),
/// "normal:MEAN:STD" or "exp:MEAN"; samples are rounded and clamped to >= 1.
struct LengthDist {
  enum class Kind { Fixed, Uniform, Normal, Exponential };
  Kind kind = Kind::Fixed;
  double a = 0, b = 0;
  static Result<LengthDist> parse(const std::string& spec);
  int64_t sample(std::mt19937_64& rng) const;
  std::string describe() const;
};

/// Synthetic workload: Poisson arrivals at `rate` req/s, or all at t=0 when rate is 0 (a
/// closed loop once the client caps concurrency).
struct SyntheticOptions {
  double rate = 0;
  LengthDist input, output;
  size_t num_requests = 100;  // at most this many requests
  double duration_s = 0;      // with rate > 0: arrivals only in the first D seconds (0 = no limit)
  int64_t max_input = 0, max_output = 0;
  uint64_t seed = 0;
  int closed_loop_clients = 0;  // for the description only (the client enforces it)
  /// A class mix (`--class`): when not empty, each request draws its class by `share`
  /// (fractions summing to 1), then its lengths from that class instead of input/output.
  struct ClassDraw {
    std::string name;
    double share = 1;
    LengthDist input, output;
  };
  std::vector<ClassDraw> classes;
};
Workload make_synthetic(const SyntheticOptions& o, int64_t min_input);

/// Prefix reuse an infinite prefix cache would see when `w` is served in arrival order.
struct PrefixStats {
  int64_t prompt_tokens = 0;  // all prompt tokens
  int64_t hit_tokens = 0;     // tokens of leading blocks whose whole prefix (block ids up to and
                              // including this one) appeared in an earlier request
  double ratio() const { return prompt_tokens ? static_cast<double>(hit_tokens) / prompt_tokens : 0.0; }
};
PrefixStats ideal_prefix_hits(const Workload& w);

}  // namespace pdserve::loadgen
