// When to open an OpenMP parallel region.
#pragma once

#include <cstdint>

namespace pdserve::kernels {

/// Multiply-adds (or element operations) below which a loop runs on the calling thread:
/// a parallel region's fork/join costs microseconds, and far more when the machine is
/// oversubscribed (a descheduled worker stalls the barrier for a whole time slice).
constexpr int64_t kMinParallelWork = int64_t{1} << 15;

inline bool worth_parallel(int64_t work) { return work >= kMinParallelWork; }

}  // namespace pdserve::kernels
