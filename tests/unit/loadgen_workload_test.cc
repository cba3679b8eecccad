// pdserve bench workloads: the two production trace readers, trace scaling, the ideal
// prefix-hit ratio, synthetic length distributions and arrivals.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "loadgen/trace.h"
#include "loadgen/workload.h"

namespace pdserve::loadgen {
namespace {

constexpr const char* kMooncake = "../shared/traces/mooncake_conversation_trace.jsonl";
constexpr const char* kAzure = "../shared/traces/azure_llm_inference_2023_conv.csv";

std::string temp_file(const std::string& content) {
  char path[] = "/tmp/pdserve-bench-trace-XXXXXX";
  const int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  std::FILE* f = fdopen(fd, "w");
  std::fputs(content.c_str(), f);
  std::fclose(f);
  return path;
}

TEST(BenchTrace, ReadsTheMooncakeTrace) {
  auto t = read_mooncake_trace(kMooncake);
  ASSERT_TRUE(t.ok()) << t.error();
  ASSERT_EQ(t.value().size(), 12031u);
  const TraceEntry& e = t.value()[0];
  EXPECT_EQ(e.timestamp_s, 0.0);
  EXPECT_EQ(e.input_len, 6758);
  EXPECT_EQ(e.output_len, 500);
  ASSERT_EQ(e.hash_ids.size(), 14u);
  EXPECT_EQ(e.hash_ids[13], 13);
  EXPECT_DOUBLE_EQ(t.value()[10].timestamp_s, 3.0);  // 3000 ms
  for (const TraceEntry& x : t.value())  // one id per started 512-token block
    ASSERT_EQ(static_cast<int64_t>(x.hash_ids.size()), (x.input_len + 511) / 512);
}

TEST(BenchTrace, ReadsTheAzureTrace) {
  auto t = read_azure_trace(kAzure);
  ASSERT_TRUE(t.ok()) << t.error();
  ASSERT_EQ(t.value().size(), 19366u);
  const auto& v = t.value();
  EXPECT_EQ(v[0].timestamp_s, 0.0);
  EXPECT_EQ(v[0].input_len, 374);
  EXPECT_EQ(v[0].output_len, 44);
  EXPECT_TRUE(v[0].hash_ids.empty());
  // 2023-11-16 18:15:50.9951690 - 18:15:46.6805900
  EXPECT_NEAR(v[1].timestamp_s, 4.314579, 1e-9);
  for (size_t i = 1; i < v.size(); ++i) ASSERT_LE(v[i - 1].timestamp_s, v[i].timestamp_s);
  // Last row 19:14:08.4025270: 58 min 21.721937 s after the first.
  EXPECT_NEAR(v.back().timestamp_s, 58 * 60 + 21.721937, 1e-6);
}

TEST(BenchTrace, DatetimeAndErrors) {
  int64_t s = 0;
  double f = 0;
  ASSERT_TRUE(parse_datetime("1970-01-02 00:00:01.25", &s, &f));
  EXPECT_EQ(s, 86401);
  EXPECT_DOUBLE_EQ(f, 0.25);
  ASSERT_TRUE(parse_datetime("2000-03-01 00:00:00", &s, &f));
  EXPECT_EQ(s, 951868800);
  EXPECT_FALSE(parse_datetime("2000-03-01", &s, &f));
  EXPECT_FALSE(parse_datetime("2000-13-01 00:00:00", &s, &f));

  EXPECT_FALSE(parse_trace_format("sharegpt").ok());
  EXPECT_EQ(parse_trace_format("Mooncake").value(), TraceFormat::Mooncake);
  EXPECT_FALSE(read_mooncake_trace("/nonexistent").ok());
  const std::string bad = temp_file("{\"timestamp\": 1}\n");
  EXPECT_FALSE(read_mooncake_trace(bad).ok());
  std::remove(bad.c_str());
  const std::string bad_csv = temp_file("a,b\n");
  EXPECT_FALSE(read_azure_trace(bad_csv).ok());
  std::remove(bad_csv.c_str());
  // Unsorted input comes back sorted and relative to the earliest request.
  const std::string unsorted = temp_file(
      "{\"timestamp\": 5000, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [1]}\n"
      "{\"timestamp\": 2000, \"input_length\": 20, \"output_length\": 2, \"hash_ids\": [2]}\n");
  auto u = read_mooncake_trace(unsorted);
  std::remove(unsorted.c_str());
  ASSERT_TRUE(u.ok()) << u.error();
  EXPECT_EQ(u.value()[0].input_len, 20);
  EXPECT_DOUBLE_EQ(u.value()[1].timestamp_s, 3.0);
}

TEST(BenchWorkload, ScalesLengthsTimesAndHashBlocks) {
  std::vector<TraceEntry> t = {
      {0.0, 6758, 500, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}},
      {3.0, 1000, 3, {0, 14}},
      {6.0, 40000, 5000, std::vector<int64_t>(79, 7)},
      {9.0, 10, 10, {15}},
  };
  EXPECT_EQ(scaled_block_tokens(1.0 / 64), 8);
  EXPECT_EQ(scaled_block_tokens(0.3), 154);  // round(153.6)
  EXPECT_EQ(scaled_block_tokens(1e-6), 1);
  TraceScaling s;
  s.time_scale = 0.1;
  s.length_scale = 1.0 / 64;
  s.max_input = 300;
  s.max_output = 64;
  Workload w = scale_trace(t, TraceFormat::Mooncake, s, 2);
  ASSERT_EQ(w.items.size(), 4u);
  EXPECT_EQ(w.block_tokens, 8);
  EXPECT_DOUBLE_EQ(w.items[1].arrival_s, 0.3);
  EXPECT_EQ(w.items[0].input_len, 106);  // round(6758 / 64)
  EXPECT_EQ(w.items[0].output_len, 8);   // round(500 / 64)
  EXPECT_EQ(w.items[0].hash_ids.size(), 14u);
  EXPECT_EQ(w.items[1].output_len, 1);   // round(3 / 64) = 0 -> at least 1
  EXPECT_EQ(w.items[2].input_len, 300);  // capped
  EXPECT_EQ(w.items[2].output_len, 64);  // capped
  EXPECT_EQ(w.items[2].hash_ids.size(), 38u);  // ceil(300 / 8): blocks past the cap dropped
  EXPECT_EQ(w.items[3].input_len, 2);    // round(10 / 64) = 0 -> the minimum
  EXPECT_NE(w.description.find("512 -> 8 tokens"), std::string::npos) << w.description;

  s.max_requests = 2;
  EXPECT_EQ(scale_trace(t, TraceFormat::Mooncake, s, 2).items.size(), 2u);
  s.max_requests = 0;
  s.duration_s = 0.6;  // arrivals 0, 0.3 (0.6 and 0.9 are not before 0.6)
  EXPECT_EQ(scale_trace(t, TraceFormat::Mooncake, s, 2).items.size(), 2u);
  // Azure: no hash blocks.
  Workload a = scale_trace(t, TraceFormat::Azure, TraceScaling{}, 2);
  EXPECT_EQ(a.block_tokens, 0);
  EXPECT_TRUE(a.items[0].hash_ids.empty());
}

TEST(BenchWorkload, IdealPrefixHitsOnHandMadeRequests) {
  Workload w;
  w.block_tokens = 4;
  // r0: blocks A B (8 tokens)            -> no hits
  // r1: blocks A B C (11 tokens, C has 3) -> A B hit: 8
  // r2: blocks A C' (7 tokens)           -> A hits (4); C' under A is new
  // r3: blocks A B C (12 tokens)          -> A B hit 8, C seen with 3 tokens -> 3 more: 11
  // r4: blocks X A (8 tokens)            -> different first block: 0 (a prefix, not a set)
  w.items = {{0, 8, 1, {1, 2}}, {0, 11, 1, {1, 2, 3}}, {0, 7, 1, {1, 4}}, {0, 12, 1, {1, 2, 3}}, {0, 8, 1, {9, 1}}};
  PrefixStats p = ideal_prefix_hits(w);
  EXPECT_EQ(p.prompt_tokens, 8 + 11 + 7 + 12 + 8);
  EXPECT_EQ(p.hit_tokens, 0 + 8 + 4 + 11 + 0);
  EXPECT_DOUBLE_EQ(p.ratio(), 23.0 / 46.0);
  Workload none;
  none.items = {{0, 5, 1, {}}};
  EXPECT_EQ(ideal_prefix_hits(none).hit_tokens, 0);
}

TEST(BenchWorkload, MooncakeFirstRequestsShareTheSystemBlock) {
  auto t = read_mooncake_trace(kMooncake);
  ASSERT_TRUE(t.ok());
  TraceScaling s;
  s.length_scale = 1.0 / 64;
  s.max_requests = 20;
  Workload w = scale_trace(t.value(), TraceFormat::Mooncake, s, 2);
  PrefixStats p = ideal_prefix_hits(w);
  // Every one of the first 20 requests starts with hash id 0: at least 19 blocks of 8 hit.
  EXPECT_GE(p.hit_tokens, 19 * 8);
  EXPECT_LT(p.ratio(), 1.0);
}

TEST(BenchWorkload, LengthDistributions) {
  EXPECT_FALSE(LengthDist::parse("abc").ok());
  EXPECT_FALSE(LengthDist::parse("0").ok());
  EXPECT_FALSE(LengthDist::parse("uniform:10").ok());
  EXPECT_FALSE(LengthDist::parse("uniform:10:5").ok());
  std::mt19937_64 rng(1);
  auto fixed = LengthDist::parse("128");
  ASSERT_TRUE(fixed.ok());
  EXPECT_EQ(fixed.value().sample(rng), 128);
  auto uni = LengthDist::parse("uniform:10:20");
  ASSERT_TRUE(uni.ok());
  int64_t lo = 1000, hi = 0;
  for (int i = 0; i < 2000; ++i) {
    const int64_t v = uni.value().sample(rng);
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  EXPECT_EQ(lo, 10);
  EXPECT_EQ(hi, 20);
  auto norm = LengthDist::parse("normal:5:100");
  ASSERT_TRUE(norm.ok());
  for (int i = 0; i < 200; ++i) EXPECT_GE(norm.value().sample(rng), 1);
  auto ex = LengthDist::parse("exp:50");
  ASSERT_TRUE(ex.ok());
  double sum = 0;
  for (int i = 0; i < 20000; ++i) sum += static_cast<double>(ex.value().sample(rng));
  EXPECT_NEAR(sum / 20000, 50, 2.5);
}

TEST(BenchWorkload, SyntheticArrivals) {
  SyntheticOptions o;
  o.input = LengthDist::parse("64").value();
  o.output = LengthDist::parse("uniform:1:8").value();
  o.num_requests = 5000;
  o.rate = 50;
  o.seed = 3;
  Workload w = make_synthetic(o, 2);
  ASSERT_EQ(w.items.size(), 5000u);
  for (size_t i = 1; i < w.items.size(); ++i) ASSERT_LE(w.items[i - 1].arrival_s, w.items[i].arrival_s);
  EXPECT_NEAR(w.items.back().arrival_s / 5000, 1.0 / 50, 0.002);  // mean gap 1/rate
  o.duration_s = 10;
  w = make_synthetic(o, 2);
  EXPECT_NEAR(static_cast<double>(w.items.size()), 500, 80);
  EXPECT_LT(w.items.back().arrival_s, 10);
  // Closed loop: everything at t = 0; caps apply.
  o.rate = 0;
  o.num_requests = 10;
  o.max_input = 32;
  w = make_synthetic(o, 2);
  ASSERT_EQ(w.items.size(), 10u);
  for (const auto& it : w.items) {
    EXPECT_EQ(it.arrival_s, 0.0);
    EXPECT_EQ(it.input_len, 32);
  }
  // Deterministic for a seed.
  EXPECT_EQ(make_synthetic(o, 2).items[3].output_len, w.items[3].output_len);
}

}  // namespace
}  // namespace pdserve::loadgen
