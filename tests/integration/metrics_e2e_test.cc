// /metrics of `pdserve serve` (Prometheus text) against what the API returned: prefix
// cache hits on a warm pass, token counters equal to the summed usage, one success count
// per HTTP request, preemptions under a tiny pool, KV blocks back after a disconnect, and
// the process heap gauge at least the KV pool.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <future>
#include <thread>
#include <map>

#include <nlohmann/json.hpp>

#include "support/pool_free.h"
#include "support/prometheus.h"
#include "support/server_process.h"

namespace pdserve {
namespace {

using json = nlohmann::json;
using testing::ServerProcess;

/// Samples of a Prometheus text page: "name{labels}" (labels as written) → value.
std::map<std::string, double> scrape(ServerProcess& srv) {
  auto c = srv.client();
  auto res = c.Get("/metrics");
  EXPECT_TRUE(res && res->status == 200);
  if (!res) return {};
  EXPECT_NE(res->get_header_value("Content-Type").find("text/plain"), std::string::npos);
  // Drop the model_name label so tests can name samples simply.
  return testing::samples_by_key(testing::parse_prometheus_text(res->body), "model_name");
}

json post(ServerProcess& srv, const json& body, int expect = 200) {
  auto c = srv.client();
  auto res = c.Post("/v1/completions", body.dump(), "application/json");
  EXPECT_TRUE(res);
  if (!res) return json();
  EXPECT_EQ(res->status, expect) << res->body;
  return json::parse(res->body);
}

const char* kStory =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends.";

TEST(Metrics, CountersMatchUsageAndWarmPassHitsTheCache) {
  ServerProcess srv;
  ASSERT_TRUE(srv.ready()) << srv.error();
  auto m0 = scrape(srv);
  EXPECT_EQ(m0["pdserve_kv_blocks_used"], 0);
  EXPECT_GT(m0["pdserve_kv_blocks_total"], 0);
  // The C heap is reported; the KV pool is not in it (one huge-page mapping of its own,
  // base/huge_pages.h), so the heap of this small model's server is below the pool's size.
  EXPECT_GT(m0["process_heap_bytes"], 0);
  EXPECT_LT(m0["process_heap_bytes"], m0["pdserve_kv_bytes_total"]);
  EXPECT_GT(m0["pdserve_kv_bytes_total"], 0);

  int64_t prompt = 0, completion = 0, cached = 0;
  int http_requests = 0;
  for (int pass = 0; pass < 2; ++pass) {
    for (int n : {1, 3}) {
      json r = post(srv, {{"prompt", std::string(kStory) + " Tom"}, {"max_tokens", 7}, {"n", n}, {"temperature", 0.7}, {"seed", 1}});
      prompt += r["usage"]["prompt_tokens"].get<int64_t>();
      completion += r["usage"]["completion_tokens"].get<int64_t>();
      cached += r["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
      ++http_requests;
    }
  }
  EXPECT_GT(cached, 0);  // the second and later requests reuse the prompt's blocks
  // Gauges are published after each engine step: wait until the last step has been seen.
  EXPECT_TRUE(testing::wait_pool_free(srv.port()));
  auto m = scrape(srv);
  EXPECT_EQ(m["pdserve_prompt_tokens_total"], prompt);
  EXPECT_EQ(m["pdserve_generation_tokens_total"], completion);
  EXPECT_EQ(m["pdserve_request_success_total{finished_reason=\"length\"}"], http_requests);
  EXPECT_EQ(m["pdserve_e2e_request_latency_seconds_count"], http_requests);
  EXPECT_EQ(m["pdserve_time_to_first_token_seconds_count"], http_requests);
  EXPECT_EQ(m["pdserve_e2e_request_latency_seconds_bucket{le=\"+Inf\"}"], http_requests);
  EXPECT_GT(m["pdserve_prefix_cache_hits_total"], 0);
  EXPECT_EQ(m["pdserve_prefix_cache_hits_total"], cached);
  EXPECT_EQ(m["pdserve_prefix_cache_queries_total"], prompt);
  EXPECT_EQ(m["pdserve_kv_blocks_used"], 0);
  EXPECT_EQ(m["pdserve_kv_blocks_free"] + m["pdserve_kv_blocks_cached"], m["pdserve_kv_blocks_total"]);
  EXPECT_GT(m["pdserve_kv_blocks_cached"], 0);

  // With --no-prefix-cache nothing is cached and outputs are the same.
  ServerProcess off(std::vector<std::string>{"--no-prefix-cache"});
  ASSERT_TRUE(off.ready()) << off.error();
  json a = post(off, {{"prompt", kStory}, {"max_tokens", 12}, {"temperature", 0}});
  json b = post(srv, {{"prompt", kStory}, {"max_tokens", 12}, {"temperature", 0}});
  EXPECT_EQ(a["choices"][0]["text"], b["choices"][0]["text"]);
  EXPECT_EQ(a["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(scrape(off)["pdserve_kv_blocks_cached"], 0);
}

TEST(Metrics, TinyPoolPreemptsYetEveryRequestGetsItsStandaloneOutput) {
  ServerProcess srv(std::vector<std::string>{"--num-kv-blocks", "12", "--block-size", "8"});  // 96 tokens
  ASSERT_TRUE(srv.ready()) << srv.error();
  std::vector<json> bodies;
  for (int i = 0; i < 20; ++i)
    bodies.push_back({{"prompt", std::string(kStory).substr(0, 30 + i)}, {"max_tokens", 40}, {"temperature", 0},
                      {"ignore_eos", true}});
  std::vector<std::string> alone;
  for (auto& b : bodies) alone.push_back(post(srv, b)["choices"][0]["text"]);
  std::vector<std::future<std::string>> futs;
  for (auto& b : bodies)
    futs.push_back(std::async(std::launch::async, [&srv, b] { return post(srv, b)["choices"][0]["text"].get<std::string>(); }));
  // A request that can never fit is refused at once while the others run.
  json too_big = post(srv, {{"prompt", kStory}, {"max_tokens", 200}}, 400);
  EXPECT_NE(too_big["error"]["message"].get<std::string>().find("blocks"), std::string::npos);
  for (size_t i = 0; i < futs.size(); ++i) EXPECT_EQ(futs[i].get(), alone[i]) << i;
  auto m = scrape(srv);
  EXPECT_GT(m["pdserve_preemptions_total"], 0);
  // Gauges are published after each engine step: poll until the last step has been seen.
  EXPECT_TRUE(testing::wait_pool_free(srv.port()));
}

// A streaming client that hangs up: the request is aborted and its KV blocks freed long
// before its 3,000 tokens would have been generated (~20 s here).
TEST(Metrics, DisconnectFreesBlocksPromptly) {
  ServerProcess::Options o;
  o.model = "../shared/models/synth-llama-small-f16.gguf";
  o.extra_args = {"--max-seqs", "4"};
  ServerProcess srv(o);
  ASSERT_TRUE(srv.ready()) << srv.error();
  httplib::Client c("127.0.0.1", srv.port());
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/chat/completions";
  req.body = json{{"messages", json::array({{{"role", "user"}, {"content", "Tell me a long story"}}})},
                  {"max_tokens", 3000}, {"ignore_eos", true}, {"stream", true}}
                 .dump();
  req.set_header("Content-Type", "application/json");
  int chunks = 0;
  double used_during = -1;
  req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
    if (++chunks == 4) used_during = scrape(srv)["pdserve_kv_blocks_used"];
    return chunks < 4;
  };
  httplib::Response res;
  httplib::Error err;
  c.send(req, res, err);
  EXPECT_GT(used_during, 0);
  EXPECT_TRUE(testing::wait_pool_free(srv.port(), std::chrono::seconds(30)));
  auto m = scrape(srv);
  // "Promptly" in tokens, not seconds, so that a loaded machine cannot fail it: the
  // request ended long before its 3,000 tokens.
  EXPECT_LT(m["pdserve_generation_tokens_total"], 3000);
  EXPECT_EQ(m["pdserve_request_success_total{finished_reason=\"abort\"}"], 1);
}

}  // namespace
}  // namespace pdserve

namespace pdserve {
namespace {

// Live step timings (engine/step_timings.h): GET /engine/steps lists what each step ran —
// one request of P prompt tokens and M generated ones is one prefill step of chunk (P, 0)
// and M - 1 decode steps of one sequence at contexts P+1 .. P+M-1 — and /metrics counts
// the same steps in pdserve_engine_step_seconds{kind}.
TEST(Metrics, EngineStepsDescribeWhatEachStepRan) {
  ServerProcess srv;
  ASSERT_TRUE(srv.ready()) << srv.error();
  json r = post(srv, {{"prompt", kStory}, {"max_tokens", 6}, {"temperature", 0}, {"ignore_eos", true}});
  const int prompt = r["usage"]["prompt_tokens"].get<int>();
  ASSERT_EQ(r["usage"]["completion_tokens"], 6);
  auto c = srv.client();
  // A step is recorded at its end, after its token went out: the response can come first.
  json body;
  for (int i = 0; i < 500; ++i) {
    auto res = c.Get("/engine/steps");
    ASSERT_TRUE(res && res->status == 200);
    body = json::parse(res->body);
    if (body["steps"].size() >= 6) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(body["object"], "engine.steps");
  EXPECT_EQ(body["kv_layout"]["n_layer"], 5);  // stories260K
  EXPECT_EQ(body["kv_layout"]["block_size"], 16);
  const json& steps = body["steps"];
  ASSERT_EQ(steps.size(), 6u) << steps.dump();
  EXPECT_EQ(steps[0]["kind"], "prefill");
  EXPECT_EQ(steps[0]["chunks"], json::array({json::array({prompt, 0})}));
  double total = 0;
  for (size_t i = 1; i < steps.size(); ++i) {
    EXPECT_EQ(steps[i]["kind"], "decode");
    EXPECT_EQ(steps[i]["decodes"], 1);
    EXPECT_DOUBLE_EQ(steps[i]["mean_context"].get<double>(), prompt + static_cast<double>(i));
    EXPECT_EQ(steps[i]["seq"].get<int>(), steps[i - 1]["seq"].get<int>() + 1);
    EXPECT_GT(steps[i]["seconds"].get<double>(), 0);
    total += steps[i]["seconds"].get<double>();
  }
  // ?since=SEQ: only later steps.
  auto later = c.Get("/engine/steps?since=" + std::to_string(steps[3]["seq"].get<int>()));
  ASSERT_TRUE(later && later->status == 200);
  EXPECT_EQ(json::parse(later->body)["steps"].size(), 2u);
  auto bad = c.Get("/engine/steps?since=-1");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_EQ(json::parse(bad->body)["error"]["param"], "since");
  auto past = c.Get("/engine/steps?since=18446744073709551616");  // 2^64: not a step number
  ASSERT_TRUE(past);
  EXPECT_EQ(past->status, 400);

  auto m = scrape(srv);
  EXPECT_EQ(m["pdserve_engine_step_seconds_count{kind=\"prefill\"}"], 1);
  EXPECT_EQ(m["pdserve_engine_step_seconds_count{kind=\"decode\"}"], 5);
  EXPECT_NEAR(m["pdserve_engine_step_seconds_sum{kind=\"decode\"}"], total, 1e-6 + total * 1e-6);
  EXPECT_EQ(m.count("pdserve_engine_step_seconds_count{kind=\"mixed\"}"), 0u);
}

}  // namespace
}  // namespace pdserve
