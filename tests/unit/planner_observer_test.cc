// The planner's observation of the router (planner/plan_observer.h): per-class rates
// and mean lengths from two /metrics pages, the forecast, and a page that is no router's.
#include <gtest/gtest.h>

#include "planner/plan_observer.h"

namespace pdserve::planner {
namespace {

std::string page(double arrivals, double finished, double prompt, double gen, double attained, double q, double h) {
  auto n = [](double v) { return std::to_string(v); };
  return "# HELP pdserve_router_class_requests_total x\n"
         "pdserve_router_class_requests_total{model_name=\"m\",slo_class=\"low\"} " + n(arrivals) + "\n"
         "pdserve_router_class_finished_total{model_name=\"m\",slo_class=\"low\"} " + n(finished) + "\n"
         "pdserve_router_class_prompt_tokens_total{model_name=\"m\",slo_class=\"low\"} " + n(prompt) + "\n"
         "pdserve_router_class_generation_tokens_total{model_name=\"m\",slo_class=\"low\"} " + n(gen) + "\n"
         "pdserve_router_class_slo_attained_total{model_name=\"m\",slo_class=\"low\"} " + n(attained) + "\n"
         "pdserve_prefix_cache_queries_total{model_name=\"m\"} " + n(q) + "\n"
         "pdserve_prefix_cache_hits_total " + n(h) + "\n";
}

TEST(PlannerObserver, RatesAndLengthsFromCounterDeltas) {
  Observer obs(5);
  auto s0 = parse_router_sample(page(10, 10, 1000, 200, 10, 500, 100), 100.0);
  ASSERT_TRUE(s0.ok()) << s0.error();
  auto o0 = obs.add(s0.value());
  EXPECT_EQ(o0.classes["low"].rate, 0);
  // 2 s later: 8 more arrivals, 4 more finished with 600 prompt and 80 generated tokens.
  auto s1 = parse_router_sample(page(18, 14, 1600, 280, 13, 1100, 400), 102.0);
  ASSERT_TRUE(s1.ok());
  auto o1 = obs.add(s1.value());
  EXPECT_DOUBLE_EQ(o1.classes["low"].rate, 4.0);
  EXPECT_DOUBLE_EQ(o1.classes["low"].input_tokens, 150.0);
  EXPECT_DOUBLE_EQ(o1.classes["low"].output_tokens, 20.0);
  EXPECT_DOUBLE_EQ(o1.cached_fraction, 0.5);
  EXPECT_DOUBLE_EQ(o1.attainment, 0.75);
  EXPECT_DOUBLE_EQ(o1.classes["low"].forecast, 4.0);  // one point: the last value
}

TEST(PlannerObserver, LinearForecast) {
  EXPECT_DOUBLE_EQ(forecast_linear({}), 0);
  EXPECT_DOUBLE_EQ(forecast_linear({3, 5}), 5);
  EXPECT_NEAR(forecast_linear({1, 2, 3, 4}), 5, 1e-12);   // a rising line continues
  EXPECT_NEAR(forecast_linear({4, 4, 4}), 4, 1e-12);
  EXPECT_DOUBLE_EQ(forecast_linear({9, 5, 1}), 0);        // falling below 0 is clamped
}

TEST(PlannerObserver, NotARouterIsAnError) {
  auto s = parse_router_sample("# HELP go_goroutines x\ngo_goroutines 12\n", 0);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().find("router"), std::string::npos);
}

}  // namespace
}  // namespace pdserve::planner
