// server::prometheus_text: numbers in their shortest round-trip form (bucket labels
// le="0.005", not le="0.0050000000000000001"), values that need every digit kept exact.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "support/prometheus.h"

#include "engine/metrics.h"
#include "server/metrics_text.h"

namespace pdserve {
namespace {

TEST(ServerMetricsText, NumbersInShortestRoundTripForm) {
  engine::MetricsSnapshot m;
  m.ttft = engine::Histogram({0.0005, 0.005, 0.1, 2.5, 120});
  m.ttft.observe(0.1 + 0.2);  // 0.30000000000000004: needs 17 digits to read back
  const std::string text = server::prometheus_text(m, "m");
  for (const char* le : {"le=\"0.0005\"", "le=\"0.005\"", "le=\"0.1\"", "le=\"2.5\"", "le=\"120\"", "le=\"+Inf\""})
    EXPECT_NE(text.find(le), std::string::npos) << le << "\n" << text;
  EXPECT_EQ(text.find("0.0050000"), std::string::npos) << text;
  const std::string sum_key = "pdserve_time_to_first_token_seconds_sum{model_name=\"m\"} ";
  const size_t at = text.find(sum_key);
  ASSERT_NE(at, std::string::npos) << text;
  EXPECT_EQ(std::strtod(text.c_str() + at + sum_key.size(), nullptr), 0.1 + 0.2);  // exact round trip
}

/// process_heap_bytes of process_metrics_text() (-1 when absent).
double heap_bytes() {
  for (const auto& s : testing::parse_prometheus_text(server::process_metrics_text()))
    if (s.name == "process_heap_bytes") return s.value;
  return -1;
}

TEST(ServerMetricsText, ProcessHeapBytesFollowsAllocations) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the sanitizer's allocator replaces glibc malloc: mallinfo2 reports 0";
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
  GTEST_SKIP() << "the sanitizer's allocator replaces glibc malloc: mallinfo2 reports 0";
#endif
#endif
  const double before = heap_bytes();
  ASSERT_GT(before, 0) << server::process_metrics_text();
  constexpr size_t kBytes = 64 << 20;
  void* volatile p = std::malloc(kBytes);  // volatile: the allocation is not elided
  ASSERT_NE(p, nullptr);
  const double during = heap_bytes();
  std::free(p);
  const double after = heap_bytes();
  EXPECT_GE(during - before, static_cast<double>(kBytes));
  EXPECT_LT(after, during - static_cast<double>(kBytes) / 2);
  EXPECT_NE(server::process_metrics_text().find("process_heap_free_bytes "), std::string::npos);
}

}  // namespace
}  // namespace pdserve
