// pdserve bench class mixes (`--class`): spec parsing and its errors, the synthetic
// workload's class draws, the slo_class field, and per-class attainment / goodput on
// hand-computed records.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "loadgen/bench.h"
#include "loadgen/class_mix.h"
#include "loadgen/report.h"
#include "loadgen/workload.h"

namespace pdserve::loadgen {
namespace {

TEST(BenchClassMix, ParsesAFullSpec) {
  auto c = parse_class_spec("high:share=0.7,input=uniform:32:96,output=64,ttft_ms=250,tpot_ms=40");
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c.value().name, "high");
  EXPECT_DOUBLE_EQ(c.value().share, 0.7);
  EXPECT_EQ(c.value().input, "uniform:32:96");
  EXPECT_EQ(c.value().output, "64");
  EXPECT_DOUBLE_EQ(c.value().slo.ttft_ms, 250);
  EXPECT_DOUBLE_EQ(c.value().slo.tpot_ms, 40);
}

TEST(BenchClassMix, DefaultsArePdservesClassTargets) {
  auto h = parse_class_spec("high");
  ASSERT_TRUE(h.ok());
  EXPECT_DOUBLE_EQ(h.value().share, 1);
  EXPECT_EQ(h.value().input, "128");
  EXPECT_DOUBLE_EQ(h.value().slo.ttft_ms, 300);
  EXPECT_DOUBLE_EQ(h.value().slo.tpot_ms, 50);
  auto l = parse_class_spec("low:input=1024");
  ASSERT_TRUE(l.ok());
  EXPECT_DOUBLE_EQ(l.value().slo.ttft_ms, 10000);
  EXPECT_DOUBLE_EQ(l.value().slo.tpot_ms, 500);
  auto m = parse_class_spec("medium:tpot_ms=0");  // 0: that bound is not checked
  ASSERT_TRUE(m.ok());
  EXPECT_DOUBLE_EQ(m.value().slo.ttft_ms, 1000);
  EXPECT_DOUBLE_EQ(m.value().slo.tpot_ms, 0);
  auto x = parse_class_spec("batch");  // another name: no SLO unless given
  ASSERT_TRUE(x.ok());
  EXPECT_FALSE(x.value().slo.set());
}

TEST(BenchClassMix, BadSpecsNameTheProblem) {
  const std::pair<const char*, const char*> cases[] = {
      {":share=1", "no class name"},
      {"high:share=0", "share must be a number > 0"},
      {"high:share=abc", "share must be a number > 0"},
      {"high:input=uniform:9:3", "bad length distribution"},
      {"high:output=zipf:2", "bad length distribution"},
      {"high:ttft_ms=-1", "ttft_ms must be a number >= 0"},
      {"high:color=red", "unknown key 'color'"},
      {"high:share", "is not KEY=VALUE"},
  };
  for (const auto& [spec, why] : cases) {
    auto c = parse_class_spec(spec);
    ASSERT_FALSE(c.ok()) << spec;
    EXPECT_NE(c.error().find(why), std::string::npos) << spec << ": " << c.error();
    EXPECT_NE(c.error().find(spec), std::string::npos) << c.error();
  }
  auto dup = parse_class_mix({"high", "low", "high:share=2"});
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.error().find("'high' given twice"), std::string::npos) << dup.error();
}

TEST(BenchClassMix, SharesAreNormalised) {
  auto m = parse_class_mix({"high:share=3", "low:share=1"});
  ASSERT_TRUE(m.ok()) << m.error();
  ASSERT_EQ(m.value().size(), 2u);
  EXPECT_DOUBLE_EQ(m.value()[0].share, 0.75);
  EXPECT_DOUBLE_EQ(m.value()[1].share, 0.25);
  auto e = parse_class_mix({});
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(e.value().empty());
}

BenchConfig mix_config() {
  BenchConfig cfg;
  cfg.rate = 5;
  cfg.scaling.max_requests = 4000;
  cfg.seed = 7;
  cfg.class_mix = {"high:share=0.7,input=40,output=16", "low:share=0.3,input=uniform:900:1100,output=100"};
  return cfg;
}

TEST(BenchClassMix, SyntheticWorkloadDrawsClassesByShare) {
  auto w = build_workload(mix_config(), 2);
  ASSERT_TRUE(w.ok()) << w.error();
  ASSERT_EQ(w.value().items.size(), 4000u);
  size_t high = 0;
  double last = -1;
  for (const WorkItem& it : w.value().items) {
    ASSERT_TRUE(it.cls == 0 || it.cls == 1);
    EXPECT_GE(it.arrival_s, last);
    last = it.arrival_s;
    if (it.cls == 0) {  // each request's lengths come from its own class
      ++high;
      EXPECT_EQ(it.input_len, 40);
      EXPECT_EQ(it.output_len, 16);
    } else {
      EXPECT_GE(it.input_len, 900);
      EXPECT_LE(it.input_len, 1100);
      EXPECT_EQ(it.output_len, 100);
    }
  }
  // Binomial(4000, 0.7): sd 29; 5 sd either side.
  EXPECT_NEAR(static_cast<double>(high), 2800.0, 145.0);
  EXPECT_NE(w.value().description.find("high 70%: input 40, output 16"), std::string::npos) << w.value().description;
  // The same seed gives the same load, so classes off and on see identical requests.
  auto again = build_workload(mix_config(), 2);
  ASSERT_TRUE(again.ok());
  for (size_t i = 0; i < w.value().items.size(); ++i) {
    ASSERT_EQ(again.value().items[i].cls, w.value().items[i].cls);
    ASSERT_EQ(again.value().items[i].input_len, w.value().items[i].input_len);
    ASSERT_EQ(again.value().items[i].arrival_s, w.value().items[i].arrival_s);
  }
}

TEST(BenchClassMix, WithoutAMixTheWorkloadIsUnchanged) {
  BenchConfig cfg = mix_config();
  cfg.class_mix.clear();
  cfg.input_len = "uniform:10:20";
  auto w = build_workload(cfg, 2);
  ASSERT_TRUE(w.ok());
  // The same draws as make_synthetic without classes (no extra random numbers taken).
  SyntheticOptions o;
  o.rate = 5;
  o.num_requests = 4000;
  o.seed = 7;
  o.input = LengthDist::parse("uniform:10:20").value();
  o.output = LengthDist::parse("128").value();
  const Workload ref = make_synthetic(o, 2);
  ASSERT_EQ(w.value().items.size(), ref.items.size());
  for (size_t i = 0; i < ref.items.size(); ++i) {
    EXPECT_EQ(w.value().items[i].cls, -1);
    ASSERT_EQ(w.value().items[i].input_len, ref.items[i].input_len);
    ASSERT_EQ(w.value().items[i].arrival_s, ref.items[i].arrival_s);
  }
}

TEST(BenchClassMix, AMixExcludesATraceAndAGlobalSlo) {
  BenchConfig cfg = mix_config();
  cfg.trace_format = "mooncake";
  cfg.trace_path = "../shared/traces/mooncake_conversation_trace.jsonl";
  auto w = build_workload(cfg, 2);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.error().find("excludes --trace"), std::string::npos) << w.error();
  BenchConfig g = mix_config();
  g.slo.ttft_ms = 100;
  g.tokenizer = "../shared/models/stories260K.gguf";
  auto r = run_bench(g);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("drop --slo-ttft"), std::string::npos) << r.error();
}

TEST(BenchClassMix, RequestBodyCarriesTheClass) {
  BenchConfig cfg;
  const auto with = nlohmann::json::parse(request_body(cfg, "hi", 8, "high"));
  EXPECT_EQ(with.at("slo_class"), "high");
  EXPECT_EQ(with.at("max_tokens"), 8);
  const auto without = nlohmann::json::parse(request_body(cfg, "hi", 8));
  EXPECT_FALSE(without.contains("slo_class"));
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

TEST(BenchClassMix, AttainmentAndGoodputPerClass) {
  auto mix = parse_class_mix({"high:ttft_ms=300,tpot_ms=50", "low:ttft_ms=2000,tpot_ms=0"});
  ASSERT_TRUE(mix.ok());
  std::vector<RequestRecord> recs;
  recs.push_back(rec(0.0, {0.2, 0.24, 0.28}, 0.28, 3));  // high: TTFT 200, TPOT 40 -> attained
  recs.push_back(rec(0.0, {0.4, 0.42}, 0.42, 2));        // high: TTFT 400 -> missed
  recs.push_back(rec(1.0, {1.1, 1.2, 1.3}, 1.3, 3));     // high: TTFT 100, TPOT 100 -> missed
  RequestRecord shed;                                     // high: 503, failed -> missed
  shed.send_s = 1.5;
  shed.end_s = 1.5;
  shed.http_status = 503;
  shed.error = "HTTP 503";
  recs.push_back(shed);
  recs.push_back(rec(0.5, {2.0, 3.0, 4.0}, 4.0, 3));     // low: TTFT 1500, TPOT 1000 unchecked -> attained
  recs.push_back(rec(0.5, {3.0}, 3.0, 1));               // low: TTFT 2500 -> missed
  recs.push_back(RequestRecord{});                       // low: never sent -> not counted
  recs.push_back(rec(0.1, {0.2}, 0.2, 1));               // no class: skipped
  const std::vector<int> class_of = {0, 0, 0, 0, 1, 1, 1, -1};
  const std::vector<int64_t> in(recs.size(), 10);
  const auto s = summarize_classes(recs, in, class_of, mix.value(), 4.0);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].name, "high");
  EXPECT_EQ(s[0].requests, 4u);
  EXPECT_EQ(s[0].completed, 3u);
  EXPECT_EQ(s[0].failed, 1u);
  EXPECT_EQ(s[0].attained, 1u);
  EXPECT_DOUBLE_EQ(s[0].attainment, 0.25);
  EXPECT_DOUBLE_EQ(s[0].goodput, 0.25);
  EXPECT_EQ(s[0].ttft_ms.count, 3u);
  EXPECT_NEAR(s[0].ttft_ms.p50, 200, 1e-9);  // 100 200 400
  EXPECT_NEAR(s[0].tpot_ms.max, 100, 1e-9);
  EXPECT_EQ(s[1].requests, 2u);
  EXPECT_EQ(s[1].attained, 1u);
  EXPECT_DOUBLE_EQ(s[1].attainment, 0.5);
  EXPECT_EQ(s[1].tpot_ms.count, 1u);  // a one-token request has no TPOT

  // The report: per-class JSON and each request's own class's verdict.
  BenchReport r;
  r.classes = mix.value();
  r.class_of = class_of;
  r.records = recs;
  r.expected_input = in;
  r.class_summary = s;
  const auto j = report_json(r);
  EXPECT_EQ(j["summary"]["classes"]["high"]["attained"], 1);
  EXPECT_DOUBLE_EQ(j["summary"]["classes"]["low"]["attainment"].get<double>(), 0.5);
  EXPECT_EQ(j["requests"][0]["slo_class"], "high");
  EXPECT_EQ(j["requests"][0]["meets_slo"], true);
  EXPECT_EQ(j["requests"][2]["meets_slo"], false);
  EXPECT_EQ(j["requests"][4]["meets_slo"], true);
  EXPECT_FALSE(j["requests"][7].contains("slo_class"));
  const std::string table = format_class_table(r);
  EXPECT_NE(table.find("1 (25.0%)"), std::string::npos) << table;
  EXPECT_NE(table.find("300 / 50"), std::string::npos) << table;
  EXPECT_NE(table.find("2000 / -"), std::string::npos) << table;
}

}  // namespace
}  // namespace pdserve::loadgen
