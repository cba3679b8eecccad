#include "kernels/matmul_profile.h"

#include <atomic>

namespace pdserve::kernels {

namespace {
std::atomic<bool> g_on{false};
std::atomic<int64_t> g_prep{0}, g_rows{0};
}  // namespace

void matmul_profile_enable(bool on) { g_on.store(on, std::memory_order_relaxed); }
bool matmul_profile_on() { return g_on.load(std::memory_order_relaxed); }

MatmulTimes matmul_profile_take() {
  return {g_prep.exchange(0, std::memory_order_relaxed), g_rows.exchange(0, std::memory_order_relaxed)};
}

void detail::matmul_profile_add(int64_t prep_ns, int64_t rows_ns) {
  if (prep_ns) g_prep.fetch_add(prep_ns, std::memory_order_relaxed);
  if (rows_ns) g_rows.fetch_add(rows_ns, std::memory_order_relaxed);
}

}  // namespace pdserve::kernels
