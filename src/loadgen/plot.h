// `pdserve bench --plot OUT.png`: latency CDFs (TTFT, TPOT, ITL, E2E) and throughput over
// time, drawn by gnuplot (run as a subprocess) into a PNG.
#pragma once

#include <string>

#include "base/status.h"
#include "loadgen/bench.h"

namespace pdserve::loadgen {

/// Writes the plot of `r` to `png_path` with gnuplot's pngcairo terminal (png when cairo
/// is missing). Errors when gnuplot is not installed or fails (with its message).
Status write_plot(const BenchReport& r, const std::string& png_path);

}  // namespace pdserve::loadgen
