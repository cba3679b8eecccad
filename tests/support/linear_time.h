// Test helper: checks that an operation's running time grows linearly with its input by
// timing it on a small and an 8x larger input and comparing the two (linear: ~8x,
// quadratic: ~64x; the bound 24x leaves room for noise). A ratio does not depend on the
// machine's speed or load, unlike an absolute time limit; speed itself is measured by
// benchmarks (bench/), not by tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>

namespace pdserve::testing {

/// The fastest of `reps` timings of f(), in ms (the minimum is what load disturbs least).
template <typename F>
double min_ms(F f, int reps = 5) {
  double best = 1e300;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

/// Expects run(big) to take less than 24x run(small), for big about 8x the size of small
/// (times under 0.05 ms count as 0.05 ms). `what` names the case in the failure message.
template <typename Run>
void expect_linear_time(Run run, const std::string& small, const std::string& big, const std::string& what) {
  run(small);  // warm up
  const double t1 = min_ms([&] { run(small); });
  const double t8 = min_ms([&] { run(big); }, 3);
  EXPECT_LT(t8, 24 * std::max(t1, 0.05)) << what << ": " << small.size() << " bytes in " << t1 << " ms, "
                                          << big.size() << " bytes in " << t8 << " ms";
}

}  // namespace pdserve::testing
