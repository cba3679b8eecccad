// The simulator (planner/simulator.h) on tiny workloads whose timings follow by hand from
// a hand-made profile: prefill 1 ms per token, decode 2 ms per step alone (3 ms for two;
// fixed cost per forward 1 ms), KV transfer 5 ms per 1000 bytes (10 bytes per token).
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>

#include "gguf/gguf.h"
#include "loadgen/stats.h"
#include "planner/simulator.h"
#include "tokenizer/tokenizer.h"

namespace pdserve::planner {
namespace {

Profile hand_profile() {
  Profile p;
  p.model.n_ctx = 512;
  p.prefill = {{10, 0, 0.010}, {100, 0, 0.100}};
  p.decode = {{1, 10, 0.002}, {2, 10, 0.003}};
  p.transfer = {{1000, 0.005}, {2000, 0.010}};
  p.kv_bytes_per_token = 10;
  return p;
}

class PlannerSimulator : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto f = gguf::GgufFile::open("../shared/models/stories260K.gguf");
    ASSERT_TRUE(f.ok()) << f.error();
    auto t = tokenizer::Tokenizer::from_gguf(*f.value());
    ASSERT_TRUE(t.ok()) << t.error();
    tok_ = std::move(t.value()).release();
  }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
  }
  SimResult run(const SimConfig& cfg, const std::vector<SimRequest>& reqs) { return simulate(prof_, cfg, reqs, *tok_); }
  static SimRequest req(double t, int64_t index, int len, int out, std::vector<int64_t> hash_ids = {}) {
    return {t, synth_prompt(index, len, hash_ids, 16, 512, 1), out};
  }
  static double ttft(const loadgen::RequestRecord& r) { return r.first_token_s - r.send_s; }
  static double e2e(const loadgen::RequestRecord& r) { return r.end_s - r.send_s; }

  Profile prof_ = hand_profile();
  static tokenizer::Tokenizer* tok_;
};
tokenizer::Tokenizer* PlannerSimulator::tok_ = nullptr;

TEST_F(PlannerSimulator, StepCost) {
  EXPECT_DOUBLE_EQ(step_seconds(prof_, 1, 20, {}), 0.002);
  EXPECT_DOUBLE_EQ(step_seconds(prof_, 0, 0, {{50, 0}}), 0.050);
  // One forward: the parts' times less the fixed 1 ms for every part after the first.
  EXPECT_NEAR(step_seconds(prof_, 1, 20, {{50, 0}}), 0.002 + 0.050 - 0.001, 1e-12);
  EXPECT_NEAR(step_seconds(prof_, 2, 20, {{50, 0}, {20, 0}}), 0.003 + 0.050 + 0.020 - 0.002, 1e-12);
}

TEST_F(PlannerSimulator, OneRequestAloneTakesThePrefillThenOneStepPerToken) {
  SimConfig cfg;
  cfg.colocated = 1;
  SimResult r = run(cfg, {req(0.5, 0, 50, 5)});
  ASSERT_EQ(r.records.size(), 1u);
  const auto& rec = r.records[0];
  ASSERT_TRUE(rec.ok);
  EXPECT_NEAR(ttft(rec), 0.050, 1e-9);
  EXPECT_NEAR(e2e(rec), 0.050 + 4 * 0.002, 1e-9);
  EXPECT_EQ(rec.chunk_s.size(), 5u);
  EXPECT_EQ(rec.usage_completion_tokens, 5);
  EXPECT_EQ(rec.usage_prompt_tokens, 50);
  // The bench's own metrics see the same.
  auto m = loadgen::request_metrics(rec, 50);
  EXPECT_NEAR(*m.tpot_s, 0.002, 1e-9);
}

// The profile's frontend time (HTTP, tokenisation, SSE) delays the request before the
// engine: TTFT and E2E grow by it, TPOT does not change.
TEST_F(PlannerSimulator, FrontendTimeIsAddedBeforeTheEngine) {
  SimConfig cfg;
  cfg.colocated = 1;
  prof_.frontend_seconds = 0.004;
  SimResult r = run(cfg, {req(0.5, 0, 50, 5)});
  const auto& rec = r.records[0];
  ASSERT_TRUE(rec.ok);
  EXPECT_NEAR(rec.send_s, 0.5, 1e-12);  // the client's send time
  EXPECT_NEAR(ttft(rec), 0.004 + 0.050, 1e-9);
  EXPECT_NEAR(e2e(rec), 0.004 + 0.050 + 4 * 0.002, 1e-9);
  EXPECT_NEAR(*loadgen::request_metrics(rec, 50).tpot_s, 0.002, 1e-9);
}

TEST_F(PlannerSimulator, TwoRequestsQueueBehindOneSeat) {
  SimConfig cfg;
  cfg.colocated = 1;
  cfg.instance.max_seqs = 1;  // the second waits until the first has finished
  SimResult r = run(cfg, {req(0, 0, 50, 5), req(0.001, 1, 50, 5)});
  EXPECT_NEAR(r.records[0].end_s, 0.058, 1e-9);
  // B's first token (BOS) is a prefix-cache hit in A's first block: it prefills 49.
  EXPECT_NEAR(r.records[1].first_token_s, 0.058 + 0.049, 1e-9);
  EXPECT_NEAR(ttft(r.records[1]), 0.106, 1e-9);
}

TEST_F(PlannerSimulator, TwoRequestsShareSteps) {
  SimConfig cfg;
  cfg.colocated = 1;
  // B arrives during A's prefill; the next step runs A's first decode with B's prompt.
  SimResult r = run(cfg, {req(0, 0, 50, 3), req(0.010, 1, 50, 3)});
  // B's first token (BOS) is a prefix-cache hit in A's first block: it prefills 49.
  const double mixed = 0.002 + 0.049 - 0.001;
  EXPECT_NEAR(r.records[0].chunk_s[1], 0.050 + mixed, 1e-9);
  EXPECT_NEAR(r.records[1].first_token_s, 0.050 + mixed, 1e-9);
  // Then both decode together: 3 ms per step.
  EXPECT_NEAR(r.records[0].end_s, 0.050 + mixed + 0.003, 1e-9);
  EXPECT_NEAR(r.records[1].chunk_s[1], 0.050 + mixed + 0.003, 1e-9);
}

TEST_F(PlannerSimulator, DisaggregationAddsTheTransfer) {
  SimConfig colo;
  colo.colocated = 1;
  SimConfig pd;
  pd.prefill = 1;
  pd.decode = 1;
  const std::vector<SimRequest> reqs = {req(0, 0, 100, 3)};
  SimResult a = run(colo, reqs), b = run(pd, reqs);
  EXPECT_NEAR(ttft(a.records[0]), 0.100, 1e-9);
  EXPECT_NEAR(ttft(b.records[0]), 0.100 + 0.005, 1e-9);  // 100 tokens x 10 bytes = 1000 bytes
  EXPECT_NEAR(e2e(b.records[0]), 0.105 + 2 * 0.002, 1e-9);
  EXPECT_EQ(b.remote_prefills, 1);
  EXPECT_DOUBLE_EQ(b.kv_bytes_transferred, 1000);
  ASSERT_EQ(b.instances.size(), 2u);
  EXPECT_EQ(b.instances[0].role, "decode");
  EXPECT_EQ(b.instances[1].role, "prefill");
  EXPECT_EQ(b.instances[1].requests, 1);

  // At or below the threshold the decode instance prefills the prompt itself.
  pd.remote_prefill_threshold = 100;
  SimResult c = run(pd, reqs);
  EXPECT_EQ(c.remote_prefills, 0);
  EXPECT_EQ(c.local_prefills, 1);
  EXPECT_NEAR(ttft(c.records[0]), 0.100, 1e-9);
}

TEST_F(PlannerSimulator, RoutingUsesTheRoutersPolicies) {
  // Eight requests sharing a 64-token prefix (4 hash blocks of 16), one after another.
  std::vector<SimRequest> reqs;
  for (int i = 0; i < 8; ++i) reqs.push_back(req(i * 1.0, i, 80, 2, {7, 8, 9, 10}));
  SimConfig cfg;
  cfg.colocated = 4;
  cfg.routing.kind = disagg::RoutingPolicyKind::kRoundRobin;
  SimResult rr = run(cfg, reqs);
  for (const auto& in : rr.instances) EXPECT_EQ(in.requests, 2);
  cfg.routing.kind = disagg::RoutingPolicyKind::kPrefixAffinity;
  SimResult pa = run(cfg, reqs);
  int64_t busiest = 0, hits = 0;
  for (const auto& in : pa.instances) {
    busiest = std::max(busiest, in.requests);
    hits += in.prefix_hits;
  }
  EXPECT_EQ(busiest, 8);
  EXPECT_EQ(hits, 7 * 64);  // every later request hits the 64 shared tokens
  // A cached prefix is not recomputed: 16 uncached tokens instead of 80.
  EXPECT_NEAR(ttft(pa.records[7]), 0.016, 1e-9);
}

TEST_F(PlannerSimulator, BadConfigurationsNameTheProblem) {
  const std::vector<SimRequest> reqs = {req(0, 0, 50, 5)};
  SimConfig none;
  try {
    run(none, reqs);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "no instances: give --colocated K or --prefill N --decode M");
  }
  SimConfig mixed;
  mixed.colocated = 1;
  mixed.prefill = 1;
  EXPECT_THROW(run(mixed, reqs), std::invalid_argument);
  SimConfig ok;
  ok.colocated = 1;
  try {
    run(ok, {req(0, 0, 600, 5)});
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "request 0 has a prompt of 600 tokens; the context length is 512 (cap it with --max-input)");
  }
}

// The elastic hook (SimConfig::replan): a fleet that does not change runs as the same
// static fleet; a scale-up adds empty instances that take new requests (and a prefill
// instance makes long prompts remote); a scale-down drains the instances not kept, and
// the hook sees which instance holds prefix cache.
TEST_F(PlannerSimulator, ElasticFleetFollowsTheHook) {
  std::vector<SimRequest> reqs;
  for (int i = 0; i < 6; ++i) reqs.push_back(req(0.1 + 0.5 * i, i, 100, 3, {5, 6}));
  SimConfig fixed;
  fixed.prefill = 1;
  fixed.decode = 2;
  SimConfig same;
  same.replan_interval_s = 0.7;
  same.replan = [](const SimInterval&) {
    SimFleet f;
    f.prefill = 1;
    f.decode = 2;
    f.keep = {"sim-decode-0", "sim-decode-1", "sim-prefill-2"};
    return f;
  };
  SimResult a = run(fixed, reqs), b = run(same, reqs);
  ASSERT_EQ(b.instances.size(), 3u);
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_DOUBLE_EQ(a.records[i].first_token_s, b.records[i].first_token_s) << i;
    EXPECT_DOUBLE_EQ(a.records[i].end_s, b.records[i].end_s) << i;
  }

  // 1D until t = 1.0, then 1P+2D (the first decode kept), then from 1.9 only the new decode.
  std::vector<SimInterval> seen;
  SimConfig el;
  el.replan_interval_s = 0.9;
  el.replan = [&seen](const SimInterval& iv) {
    seen.push_back(iv);
    SimFleet f;
    if (iv.index == 0) return f;  // one decode instance
    std::vector<std::string> ids;
    for (const auto& s : iv.active) ids.push_back(s.id);
    f.decode = iv.index == 1 ? 2 : 1;
    f.prefill = iv.index == 1 ? 1 : 0;
    f.keep = iv.index == 1 ? ids : std::vector<std::string>{"sim-decode-1"};
    return f;
  };
  SimResult c = run(el, reqs);
  ASSERT_GE(seen.size(), 3u);
  EXPECT_DOUBLE_EQ(seen[0].time_s, 0.1);
  EXPECT_TRUE(seen[0].active.empty());
  ASSERT_EQ(seen[1].active.size(), 1u);
  EXPECT_EQ(seen[1].active[0].id, "sim-decode-0");
  EXPECT_GT(seen[1].active[0].cached_blocks, 0);  // it served two requests sharing a prefix
  ASSERT_EQ(seen[2].active.size(), 3u);
  ASSERT_EQ(c.instances.size(), 3u);
  EXPECT_EQ(c.instances[1].role, "decode");
  EXPECT_EQ(c.instances[2].role, "prefill");
  // Requests 0, 1 (t 0.1, 0.6) on decode-0, prefilled locally: TTFT = 100 ms of prefill.
  EXPECT_NEAR(ttft(c.records[0]), 0.100, 1e-9);
  EXPECT_GE(c.instances[0].requests, 2);
  // From t = 1.9 only decode-1 takes requests (4 and 5, local prefill again).
  EXPECT_GE(c.instances[1].requests, 2);
  EXPECT_EQ(c.instances[0].requests + c.instances[1].requests, 6);
  EXPECT_EQ(c.remote_prefills, 2);  // requests 2 and 3 (t 1.1, 1.6), while the prefill instance ran
  EXPECT_EQ(c.instances[2].requests, 2);
  EXPECT_GT(ttft(c.records[2]), 0.06);  // remote: prefill + transfer
  for (const auto& r : c.records) EXPECT_TRUE(r.ok);
}

}  // namespace
}  // namespace pdserve::planner
