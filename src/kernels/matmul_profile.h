// Time accounting inside kernels::matmul for a per-op profile (`pdserve bench-model
// --profile`, issue #21). Off by default: then each matmul call reads one relaxed atomic
// flag and nothing else changes (same threads, same rows per thread, same results).
#pragma once

#include <chrono>
#include <cstdint>

namespace pdserve::kernels {

/// What matmul calls spent since the last matmul_profile_take(), in nanoseconds.
struct MatmulTimes {
  int64_t prep_ns = 0;  // activation quantisation / rounding and packing (wall, calling thread)
  int64_t rows_ns = 0;  // the row loop's busy time, averaged over the threads that ran it
};

/// Turns the accounting on or off (process-wide; one forward pass at a time).
void matmul_profile_enable(bool on);
bool matmul_profile_on();
/// Returns the times accumulated since the previous call and resets them.
MatmulTimes matmul_profile_take();

namespace detail {
void matmul_profile_add(int64_t prep_ns, int64_t rows_ns);
inline int64_t profile_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace detail

}  // namespace pdserve::kernels
