// Monotonic and wall clocks in the units the server reports.
#pragma once

#include <chrono>
#include <cstdint>

namespace pdserve {

/// Seconds on a monotonic clock (for latencies: TTFT, TPOT, E2E).
inline double now_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

/// Unix time in whole seconds (for OpenAI `created`).
inline int64_t unix_time() {
  using namespace std::chrono;
  return duration_cast<seconds>(system_clock::now().time_since_epoch()).count();
}

}  // namespace pdserve
