// Live step timings (engine/step_timings.h): what a step's duration counts, the ring of
// recent steps, the per-kind histograms.
#include <gtest/gtest.h>

#include "engine/step_timings.h"

namespace pdserve::engine {
namespace {

StepShape decode_shape(int n, double context_each) {
  StepShape s;
  s.decodes = n;
  s.context_sum = n * context_each;
  return s;
}

StepShape prefill_shape(int tokens, int cached, double arrival) {
  StepShape s;
  s.chunks = {{tokens, cached}};
  s.earliest_new_arrival = arrival;
  return s;
}

TEST(StepTimings, BackToBackStepsCountFromTheirIterationStart) {
  StepTimings t;
  StepSample a = t.record(decode_shape(2, 40), 10.000, 10.002);
  EXPECT_EQ(a.seq, 1u);
  EXPECT_NEAR(a.seconds, 0.002, 1e-12);
  EXPECT_EQ(a.decodes, 2);
  EXPECT_DOUBLE_EQ(a.mean_context, 40);
  EXPECT_STREQ(a.kind(), "decode");
  StepSample b = t.record(decode_shape(1, 41), 10.0021, 10.0031);
  EXPECT_EQ(b.seq, 2u);
  EXPECT_NEAR(b.seconds, 0.001, 1e-9);
}

TEST(StepTimings, APrefillAfterAnIdleEngineCountsFromTheRequestsArrival) {
  StepTimings t;
  t.record(decode_shape(1, 10), 1.0, 1.001);
  // The engine slept from 1.001; the request arrived at 5.000 and the engine's loop only
  // began its iteration at 5.004 (waking took 4 ms): the step counts from the arrival.
  StepSample s = t.record(prefill_shape(64, 0, 5.000), 5.004, 5.020);
  EXPECT_NEAR(s.seconds, 0.020, 1e-9);
  EXPECT_STREQ(s.kind(), "prefill");
  ASSERT_EQ(s.chunks.size(), 1u);
  EXPECT_EQ(s.chunks[0], std::make_pair(64, 0));
}

TEST(StepTimings, ARequestThatArrivedWhileTheEngineWasBusyCountsFromThePreviousStepsEnd) {
  StepTimings t;
  t.record(decode_shape(1, 10), 5.000, 5.020);
  // Arrived at 5.010, during the step above: the wait until 5.020 is queueing, not this step.
  StepSample s = t.record(prefill_shape(16, 0, 5.010), 5.0205, 5.030);
  EXPECT_NEAR(s.seconds, 0.010, 1e-9);
  // A request with a prefill arriving after the iteration began cannot shorten the step.
  StepSample u = t.record(prefill_shape(16, 0, 6.0), 5.031, 5.040);
  EXPECT_NEAR(u.seconds, 0.009, 1e-9);
}

TEST(StepTimings, KeepsTheLastStepsAndHistogramsByKind) {
  StepTimings t(3);
  for (int i = 0; i < 5; ++i) t.record(decode_shape(1, 10 + i), i, i + 0.001);
  StepShape mixed = decode_shape(1, 20);
  mixed.chunks = {{8, 16}};
  t.record(mixed, 10, 10.004);
  t.record(prefill_shape(32, 0, -1), 11, 11.008);
  const auto all = t.since(0);
  ASSERT_EQ(all.size(), 3u);  // the capacity
  EXPECT_EQ(all[0].seq, 5u);
  EXPECT_EQ(all[2].seq, 7u);
  EXPECT_STREQ(all[1].kind(), "mixed");
  ASSERT_EQ(t.since(6).size(), 1u);
  EXPECT_TRUE(t.since(7).empty());
  const auto h = t.histograms();
  ASSERT_EQ(h.size(), 3u);
  EXPECT_EQ(h[0].first, "decode");
  EXPECT_EQ(h[0].second.count, 5u);  // histograms count every step, not only those kept
  EXPECT_NEAR(h[0].second.sum, 0.005, 1e-9);
  EXPECT_EQ(h[1].first, "prefill");
  EXPECT_EQ(h[1].second.count, 1u);
  EXPECT_EQ(h[2].first, "mixed");
}

}  // namespace
}  // namespace pdserve::engine
