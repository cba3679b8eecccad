// Test helper: checks that an operation's running time grows linearly with its input by
// timing it on a small and an 8x larger input and comparing the two (linear: ~8x,
// quadratic: ~64x; the bound 24x leaves room for noise). A ratio does not depend on the
// machine's speed or load, unlike an absolute time limit; speed itself is measured by
// benchmarks (bench/), not by tests. Times are the calling thread's CPU time: a run that
// another process preempts is not charged for the wait (wall time made an 8x input look
// 25x slower on a loaded 2-core machine, 2026-12-03), so only single-threaded work is timed.
#pragma once

#include <gtest/gtest.h>

#include <time.h>

#include <algorithm>
#include <string>

namespace pdserve::testing {

/// The calling thread's CPU time in ms (CLOCK_THREAD_CPUTIME_ID).
inline double thread_cpu_ms() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/// The fastest of `reps` runs of f() on this thread, in ms of its CPU time (the minimum is
/// what cache and frequency noise disturb least).
template <typename F>
double min_ms(F f, int reps = 5) {
  double best = 1e300;
  for (int i = 0; i < reps; ++i) {
    const double t0 = thread_cpu_ms();
    f();
    best = std::min(best, thread_cpu_ms() - t0);
  }
  return best;
}

/// Expects run(big) to take less than 24x run(small), for big about 8x the size of small
/// (times under 0.05 ms count as 0.05 ms). `what` names the case in the failure message.
template <typename Run>
void expect_linear_time(Run run, const std::string& small, const std::string& big, const std::string& what) {
  run(small);  // warm up
  const double t1 = min_ms([&] { run(small); });
  const double t8 = min_ms([&] { run(big); }, 5);
  EXPECT_LT(t8, 24 * std::max(t1, 0.05)) << what << ": " << small.size() << " bytes in " << t1 << " ms, "
                                          << big.size() << " bytes in " << t8 << " ms";
}

}  // namespace pdserve::testing
