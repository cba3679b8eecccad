// server::prometheus_text: numbers in their shortest round-trip form (bucket labels
// le="0.005", not le="0.0050000000000000001"), values that need every digit kept exact.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

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

}  // namespace
}  // namespace pdserve
