// pdserve bench metrics on hand-computed data: percentiles (linear interpolation, numpy's
// default), TTFT/TPOT/ITL/E2E, throughput and goodput under an SLO, the timeline.
#include <gtest/gtest.h>

#include <cmath>

#include "loadgen/stats.h"

namespace pdserve::loadgen {
namespace {

TEST(BenchPercentile, LinearInterpolationBetweenClosestRanks) {
  const std::vector<double> x = {4, 1, 3, 2};  // sorted: 1 2 3 4, n-1 = 3
  EXPECT_DOUBLE_EQ(percentile(x, 0), 1.0);
  EXPECT_DOUBLE_EQ(percentile(x, 100), 4.0);
  EXPECT_DOUBLE_EQ(percentile(x, 50), 2.5);   // rank 1.5
  EXPECT_DOUBLE_EQ(percentile(x, 90), 3.7);   // rank 2.7
  EXPECT_DOUBLE_EQ(percentile(x, 99), 3.97);  // rank 2.97
  EXPECT_DOUBLE_EQ(percentile(x, 25), 1.75);  // rank 0.75
  // numpy.percentile([10, 20, 30, 40, 50, 60, 70, 80, 90, 1000], [50, 90, 99])
  //   = [55.0, 181.0, 918.1]
  const std::vector<double> y = {10, 20, 30, 40, 50, 60, 70, 80, 90, 1000};
  EXPECT_NEAR(percentile(y, 50), 55.0, 1e-12);
  EXPECT_NEAR(percentile(y, 90), 181.0, 1e-12);
  EXPECT_NEAR(percentile(y, 99), 918.1, 1e-9);
}

TEST(BenchPercentile, EdgeCases) {
  EXPECT_TRUE(std::isnan(percentile({}, 50)));
  EXPECT_DOUBLE_EQ(percentile({7}, 0), 7.0);
  EXPECT_DOUBLE_EQ(percentile({7}, 99), 7.0);
  EXPECT_DOUBLE_EQ(percentile({5, 5, 5}, 90), 5.0);
  EXPECT_DOUBLE_EQ(percentile({1, 2}, 150), 2.0);  // clamped to [0, 100]
}

TEST(BenchPercentile, SummarizeMeanRangeAndOrder) {
  Distribution d = summarize({3, 1, 2, 10});
  EXPECT_EQ(d.count, 4u);
  EXPECT_DOUBLE_EQ(d.mean, 4.0);
  EXPECT_DOUBLE_EQ(d.min, 1.0);
  EXPECT_DOUBLE_EQ(d.max, 10.0);
  EXPECT_DOUBLE_EQ(d.p50, 2.5);
  EXPECT_DOUBLE_EQ(d.p90, 7.9);  // rank 2.7: 3 + 0.7 * 7
  EXPECT_LE(d.p50, d.p90);
  EXPECT_LE(d.p90, d.p99);
  Distribution e = summarize({});
  EXPECT_EQ(e.count, 0u);
  EXPECT_TRUE(std::isnan(e.p50));
}

RequestRecord rec(double send, std::vector<double> chunks, double end, int64_t out_tokens) {
  RequestRecord r;
  r.arrival_s = send;
  r.send_s = send;
  r.chunk_s = std::move(chunks);
  r.first_token_s = r.chunk_s.empty() ? -1 : r.chunk_s.front();
  r.end_s = end;
  r.usage_completion_tokens = out_tokens;
  r.ok = true;
  r.http_status = 200;
  return r;
}

TEST(BenchMetrics, PerRequestLatencies) {
  // Sent at 1.0, first token at 1.2, 5 tokens, done at 2.0: TTFT 200 ms, E2E 1000 ms,
  // TPOT (1000 - 200) / 4 = 200 ms.
  RequestRecord r = rec(1.0, {1.2, 1.4, 1.6, 1.8, 2.0}, 2.0, 5);
  RequestMetrics m = request_metrics(r, 10);
  EXPECT_NEAR(m.ttft_s, 0.2, 1e-12);
  EXPECT_NEAR(m.e2e_s, 1.0, 1e-12);
  ASSERT_TRUE(m.tpot_s);
  EXPECT_NEAR(*m.tpot_s, 0.2, 1e-12);
  EXPECT_EQ(m.input_tokens, 10);  // no usage.prompt_tokens: the synthesized length
  EXPECT_EQ(m.output_tokens, 5);
  // One token: no TPOT; without usage the chunk count is the output.
  RequestRecord one = rec(0, {0.5}, 0.5, -1);
  RequestMetrics m1 = request_metrics(one, 3);
  EXPECT_FALSE(m1.tpot_s);
  EXPECT_EQ(m1.output_tokens, 1);
}

TEST(BenchMetrics, SloChecksEachBoundThatIsSet) {
  RequestMetrics m;
  m.ok = true;
  m.ttft_s = 0.1;
  m.tpot_s = 0.02;
  EXPECT_TRUE(meets_slo(m, {100, 20}));   // bounds are inclusive
  EXPECT_FALSE(meets_slo(m, {99, 20}));
  EXPECT_FALSE(meets_slo(m, {100, 19}));
  EXPECT_TRUE(meets_slo(m, {0, 20}));     // TTFT unchecked
  EXPECT_TRUE(meets_slo(m, {100, 0}));    // TPOT unchecked
  m.tpot_s.reset();                       // a 1-token request has no TPOT to violate
  EXPECT_TRUE(meets_slo(m, {100, 1}));
  m.ok = false;
  EXPECT_FALSE(meets_slo(m, {1000, 1000}));
}

TEST(BenchMetrics, RunSummaryThroughputGoodputAndItl) {
  std::vector<RequestRecord> recs;
  // A: send 0, tokens at 0.1 0.2 0.3 0.4, end 0.4 -> TTFT 100, TPOT 100, E2E 400, ITL 100 x3
  recs.push_back(rec(0.0, {0.1, 0.2, 0.3, 0.4}, 0.4, 4));
  // B: send 0.5, tokens at 1.0 1.1, end 1.1 -> TTFT 500, TPOT 100, E2E 600, ITL 100
  recs.push_back(rec(0.5, {1.0, 1.1}, 1.1, 2));
  // C: send 1.0, tokens 1.05 1.5 2.0, end 2.0 -> TTFT 50, TPOT 475, E2E 1000, ITL 450 500
  recs.push_back(rec(1.0, {1.05, 1.5, 2.0}, 2.0, 3));
  // D: failed (sent at 1.5, ended at 1.6); E: never sent.
  RequestRecord d;
  d.send_s = 1.5;
  d.end_s = 1.6;
  d.error = "HTTP 500";
  recs.push_back(d);
  recs.push_back(RequestRecord{});
  recs[0].usage_prompt_tokens = 20;  // B and C fall back to the synthesized lengths
  const std::vector<int64_t> expected_in = {99, 30, 40, 50, 60};

  const Summary s = summarize_run(recs, expected_in, Slo{200, 150});
  EXPECT_EQ(s.requests, 5u);
  EXPECT_EQ(s.completed, 3u);
  EXPECT_EQ(s.failed, 1u);
  EXPECT_EQ(s.not_sent, 1u);
  EXPECT_DOUBLE_EQ(s.duration_s, 2.0);  // first send 0 to last end 2.0
  EXPECT_EQ(s.input_tokens, 20 + 30 + 40);
  EXPECT_EQ(s.output_tokens, 4 + 2 + 3);
  EXPECT_DOUBLE_EQ(s.request_throughput, 1.5);
  EXPECT_DOUBLE_EQ(s.output_throughput, 4.5);
  EXPECT_DOUBLE_EQ(s.total_token_throughput, 49.5);
  // Good: A (100 ms, 100 ms). B fails TTFT (500), C fails TPOT (475).
  EXPECT_EQ(s.good_requests, 1u);
  ASSERT_TRUE(s.goodput);
  EXPECT_DOUBLE_EQ(*s.goodput, 0.5);

  EXPECT_EQ(s.ttft_ms.count, 3u);
  EXPECT_NEAR(s.ttft_ms.mean, (100 + 500 + 50) / 3.0, 1e-9);
  EXPECT_NEAR(s.ttft_ms.p50, 100, 1e-9);
  EXPECT_NEAR(s.ttft_ms.p90, 420, 1e-9);  // sorted 50 100 500, rank 1.8
  EXPECT_NEAR(s.tpot_ms.p50, 100, 1e-9);
  EXPECT_NEAR(s.tpot_ms.max, 475, 1e-9);
  EXPECT_NEAR(s.e2e_ms.mean, (400 + 600 + 1000) / 3.0, 1e-9);
  EXPECT_NEAR(s.e2e_ms.p99, 992, 1e-9);  // sorted 400 600 1000, rank 1.98
  EXPECT_EQ(s.itl_ms.count, 6u);         // 3 + 1 + 2 gaps
  EXPECT_NEAR(s.itl_ms.mean, (100 * 4 + 450 + 500) / 6.0, 1e-9);
  EXPECT_NEAR(s.itl_ms.p50, 100, 1e-9);
  EXPECT_NEAR(s.itl_ms.max, 500, 1e-9);

  // No SLO, no goodput.
  EXPECT_FALSE(summarize_run(recs, expected_in, Slo{}).goodput);
  // One bound only: TTFT <= 100 ms -> A and C.
  EXPECT_EQ(summarize_run(recs, expected_in, Slo{100, 0}).good_requests, 2u);
}

TEST(BenchMetrics, TimelineSpreadsTokensOverChunks) {
  std::vector<RequestRecord> recs;
  recs.push_back(rec(0.0, {0.5, 1.5}, 1.5, 4));   // 2 tokens per chunk
  recs.push_back(rec(0.2, {1.2, 1.7}, 1.8, 2));   // 1 token per chunk
  recs[0].usage_prompt_tokens = 30;            // B falls back to its synthesized length (50)
  const Timeline tl = timeline(recs, {10, 50}, 1.0);
  ASSERT_EQ(tl.t_s.size(), 2u);
  EXPECT_DOUBLE_EQ(tl.t_s[0], 0.5);
  EXPECT_DOUBLE_EQ(tl.output_tok_per_s[0], 2.0);
  EXPECT_DOUBLE_EQ(tl.output_tok_per_s[1], 2.0 + 1.0 + 1.0);
  EXPECT_DOUBLE_EQ(tl.prompt_tok_per_s[0], 30.0);  // A's first token at 0.5
  EXPECT_DOUBLE_EQ(tl.prompt_tok_per_s[1], 50.0);  // B's at 1.2
  EXPECT_DOUBLE_EQ(tl.completed_per_s[0], 0.0);
  EXPECT_DOUBLE_EQ(tl.completed_per_s[1], 2.0);
  EXPECT_NEAR(tl.in_flight[0], 1.0 + 0.8, 1e-12);  // A all of [0, 1), B from 0.2
  EXPECT_NEAR(tl.in_flight[1], 0.5 + 0.8, 1e-12);  // A until 1.5, B until 1.8
}

}  // namespace
}  // namespace pdserve::loadgen
