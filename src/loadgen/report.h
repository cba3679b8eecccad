// Output of `pdserve bench`: the text table and the JSON report.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "loadgen/bench.h"

namespace pdserve::loadgen {

/// The human-readable result table (workload and scaling first).
std::string format_table(const BenchReport& r);

/// The per-class rows of a class mix: share, requests sent / failed, SLO attainment,
/// goodput, TTFT and TPOT p50/p99 (ms) and the class's SLO.
std::string format_class_table(const BenchReport& r);

/// The JSON report: "config", "workload", "summary" (latencies in ms, throughputs per
/// second) and "requests" (one object per request: lengths, usage, latencies, error, and
/// "chunk_s", the arrival of every text chunk in seconds from the run start).
nlohmann::json report_json(const BenchReport& r);

/// Writes report_json(r) to `path`.
Status write_json(const BenchReport& r, const std::string& path);

}  // namespace pdserve::loadgen
