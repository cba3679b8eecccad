// The disaggregated cluster end to end on stories260K: prefill worker(s), decode
// worker(s) and the router as real processes (tests/support/cluster.h), checked against
// `pdserve serve` on the same model: greedy output token for token (JSON and SSE, 32
// requests at once), exact max_tokens, usage, seeded choices, errors, and a decode worker
// SIGKILLed mid-stream while the client's stream goes on unbroken.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/cluster.h"
#include "support/pd_node.h"
#include "support/ports.h"
#include "support/prometheus.h"
#include "support/server_process.h"
#include "support/wait.h"

namespace pdserve {
namespace {

using json = nlohmann::json;
using testing::Cluster;
using testing::ClusterOptions;
using testing::Role;

httplib::Client client_for(int port) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(5, 0);
  c.set_read_timeout(120, 0);
  c.set_write_timeout(30, 0);
  return c;
}

/// A keep-alive client already connected (by a GET /health, retried): the HTTP server's
/// listen backlog is small (cpp-httplib: 5), and a burst of simultaneous connects can
/// have some dropped; an idempotent GET is safe to retry, a generation POST is not.
std::unique_ptr<httplib::Client> connected_client(int port) {
  auto c = std::make_unique<httplib::Client>("127.0.0.1", port);
  c->set_connection_timeout(5, 0);
  c->set_read_timeout(120, 0);
  c->set_write_timeout(30, 0);
  c->set_keep_alive(true);
  testing::wait_until([&] {
    auto res = c->Get("/health");
    return res && res->status == 200;
  }, std::chrono::seconds(1), std::chrono::milliseconds(50));
  return c;
}

/// POSTs `body` on `c`; expects `expect_status`; returns the parsed body.
json post(httplib::Client& c, const std::string& path, const json& body, int expect_status = 200) {
  auto res = c.Post(path, body.dump(), "application/json");
  EXPECT_TRUE(res) << "no response: " << httplib::to_string(res.error());
  if (!res) return json();
  EXPECT_EQ(res->status, expect_status) << res->body;
  return json::parse(res->body, nullptr, false);
}

/// POSTs `body`; expects `expect_status`; returns the parsed body.
json post(int port, const std::string& path, const json& body, int expect_status = 200) {
  auto c = client_for(port);
  auto res = c.Post(path, body.dump(), "application/json");
  EXPECT_TRUE(res) << "no response from port " << port;
  if (!res) return json();
  EXPECT_EQ(res->status, expect_status) << res->body;
  return json::parse(res->body, nullptr, false);
}

struct Streamed {
  std::vector<std::string> texts;  // per choice
  std::vector<std::string> finish;
  json usage;
  int events = 0;
  bool done = false;
};

/// Streams `body` (SSE, with usage) and joins each choice's text. `on_event` sees every
/// event with a choice delta as it arrives.
Streamed stream(httplib::Client& c, const std::string& path, json body, std::function<void(const json&)> on_event = {}) {
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  Streamed out;
  std::string buf;
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    buf.append(data, n);
    size_t pos;
    while ((pos = buf.find("\n\n")) != std::string::npos) {
      const std::string ev = buf.substr(0, pos);
      buf.erase(0, pos + 2);
      if (ev.rfind("data: ", 0) != 0) continue;
      const std::string payload = ev.substr(6);
      if (payload == "[DONE]") {
        out.done = true;
        continue;
      }
      const json j = json::parse(payload, nullptr, false);
      if (j.is_discarded()) continue;
      if (j.contains("usage") && !j["usage"].is_null()) out.usage = j["usage"];
      for (const auto& ch : j["choices"]) {
        const size_t idx = ch["index"].get<size_t>();
        if (out.texts.size() <= idx) {
          out.texts.resize(idx + 1);
          out.finish.resize(idx + 1);
        }
        if (ch.contains("text")) out.texts[idx] += ch["text"].get<std::string>();
        if (ch.contains("delta") && ch["delta"].contains("content") && ch["delta"]["content"].is_string())
          out.texts[idx] += ch["delta"]["content"].get<std::string>();
        if (!ch["finish_reason"].is_null()) out.finish[idx] = ch["finish_reason"];
        ++out.events;
        if (on_event) on_event(ch);
      }
    }
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;  // send() sets it only on failure
  c.send(req, res, err);
  EXPECT_EQ(err, httplib::Error::Success) << httplib::to_string(err);
  return out;
}

Streamed stream(int port, const std::string& path, json body, std::function<void(const json&)> on_event = {}) {
  auto c = client_for(port);
  return stream(c, path, std::move(body), std::move(on_event));
}

class DisaggRouter : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ClusterOptions o;
    o.prefill_workers = 1;
    o.decode_workers = 1;
    // Every prompt is prefilled by the prefill worker (none is too short to send).
    o.decode_args = {"--remote-prefill-threshold", "0"};
    cluster_ = new Cluster(o);
    serve_ = new testing::ServerProcess(std::vector<std::string>{});
  }
  static void TearDownTestSuite() {
    delete cluster_;
    delete serve_;
    cluster_ = nullptr;
    serve_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(cluster_->ready()) << cluster_->error();
    ASSERT_TRUE(serve_->ready()) << serve_->error();
  }
  void TearDown() override {
    if (HasFailure() && cluster_) std::fprintf(stderr, "cluster output:\n%s\n", cluster_->logs().c_str());
  }
  int router() { return cluster_->router_port(); }
  int serve() { return serve_->port(); }

  static Cluster* cluster_;
  static testing::ServerProcess* serve_;
};

Cluster* DisaggRouter::cluster_ = nullptr;
testing::ServerProcess* DisaggRouter::serve_ = nullptr;

const std::vector<std::string> kPrompts = {
    "Once upon a time", "The little dog", "Lily and Ben went to the park.", "One day, a bird",
    "Tom had a big red ball. He", "The sun was hot and the cat", "Sara liked to draw", "A fish in the pond"};

TEST_F(DisaggRouter, HealthAndModels) {
  auto c = cluster_->router_client();
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  const json hj = json::parse(h->body);
  EXPECT_EQ(hj["status"], "ok");
  EXPECT_GT(hj["kv_blocks_total"].get<int64_t>(), 0) << "the decode worker's KV pool, via Load";
  auto m = c.Get("/v1/models");
  ASSERT_TRUE(m && m->status == 200);
  const json mj = json::parse(m->body);
  EXPECT_EQ(mj["data"][0]["id"], "stories260K");
  EXPECT_EQ(mj["data"][0]["max_model_len"], 512);
  auto metrics = c.Get("/metrics");
  ASSERT_TRUE(metrics && metrics->status == 200);
  EXPECT_NE(metrics->body.find("pdserve_requests_running"), std::string::npos);
}

// The router's /metrics carries its decode workers' prefix-cache counters (via Load): a
// repeated long prompt is a hit on the worker, and the router reports the worker's count.
TEST_F(DisaggRouter, RouterMetricsIncludeWorkerPrefixCacheCounters) {
  std::string prompt = "Lily and Ben went to the park with their dog. ";
  for (int i = 0; i < 4; ++i) prompt += prompt.substr(0, 46);
  for (int i = 0; i < 2; ++i) post(router(), "/v1/completions", {{"prompt", prompt}, {"max_tokens", 2}, {"temperature", 0}});
  const double worker_hits = cluster_->metric(Role::Decode, 0, "pdserve_prefix_cache_hits_total");
  ASSERT_GT(worker_hits, 0) << "the second request should reuse the first one's blocks";
  // The router's copy is refreshed by its health checker (every 500 ms).
  double router_hits = -1;
  testing::wait_until([&] {
    router_hits = cluster_->metric(Role::Router, 0, "pdserve_prefix_cache_hits_total");
    return router_hits >= worker_hits;
  }, std::chrono::seconds(10), std::chrono::milliseconds(100));
  EXPECT_EQ(router_hits, worker_hits);
  EXPECT_EQ(cluster_->metric(Role::Router, 0, "pdserve_prefix_cache_queries_total"),
            cluster_->metric(Role::Decode, 0, "pdserve_prefix_cache_queries_total"));
}

TEST_F(DisaggRouter, ThirtyTwoConcurrentGreedyRequestsMatchServe) {
  std::vector<json> bodies;
  for (int i = 0; i < 32; ++i)
    bodies.push_back({{"prompt", kPrompts[i % kPrompts.size()]}, {"max_tokens", 8 + 3 * i}, {"temperature", 0}});
  std::vector<json> want;
  for (const auto& b : bodies) want.push_back(post(serve(), "/v1/completions", b));
  // 32 connected clients first, then 32 requests at once.
  std::vector<std::unique_ptr<httplib::Client>> clients;
  for (int i = 0; i < 32; ++i) clients.push_back(connected_client(router()));
  std::vector<std::future<void>> futs;
  for (int i = 0; i < 32; ++i) {
    futs.push_back(std::async(std::launch::async, [&, i] {
      const json& w = want[i];
      if (i % 2 == 0) {
        const json got = post(*clients[i], "/v1/completions", bodies[i]);
        EXPECT_EQ(got["choices"][0]["text"], w["choices"][0]["text"]) << "request " << i;
        EXPECT_EQ(got["choices"][0]["finish_reason"], w["choices"][0]["finish_reason"]) << "request " << i;
        EXPECT_EQ(got["usage"]["prompt_tokens"], w["usage"]["prompt_tokens"]) << "request " << i;
        EXPECT_EQ(got["usage"]["completion_tokens"], w["usage"]["completion_tokens"]) << "request " << i;
        EXPECT_EQ(got["model"], "stories260K");
      } else {
        const Streamed got = stream(*clients[i], "/v1/completions", bodies[i]);
        EXPECT_TRUE(got.done) << "request " << i;
        ASSERT_EQ(got.texts.size(), 1u) << "request " << i;
        EXPECT_EQ(got.texts[0], w["choices"][0]["text"].get<std::string>()) << "request " << i;
        EXPECT_EQ(got.finish[0], w["choices"][0]["finish_reason"].get<std::string>()) << "request " << i;
        EXPECT_EQ(got.usage["prompt_tokens"], w["usage"]["prompt_tokens"]) << "request " << i;
        EXPECT_EQ(got.usage["completion_tokens"], w["usage"]["completion_tokens"]) << "request " << i;
      }
    }));
  }
  for (auto& f : futs) f.get();
}

// The router tokenizes as serve does (its own tokenizer and chat template).
TEST_F(DisaggRouter, TokenizeAndDetokenizeMatchServe) {
  const json msgs = json::array({{{"role", "user"}, {"content", kPrompts[1]}}});
  for (const json& body : {json{{"prompt", kPrompts[0]}}, json{{"content", kPrompts[2]}, {"with_pieces", true}},
                           json{{"messages", msgs}}}) {
    const json want = post(serve(), "/tokenize", body);
    EXPECT_EQ(post(router(), "/tokenize", body), want) << body.dump();
  }
  const json ids = post(serve(), "/tokenize", {{"prompt", kPrompts[3]}})["tokens"];
  EXPECT_EQ(post(router(), "/detokenize", {{"tokens", ids}}), post(serve(), "/detokenize", {{"tokens", ids}}));
}

TEST_F(DisaggRouter, TokensAndLogprobsMatchServe) {
  for (size_t i = 0; i < 6; ++i) {
    json body = {{"prompt", kPrompts[i]}, {"max_tokens", 24}, {"temperature", 0}, {"logprobs", 3}};
    // Penalties and a logit_bias travel to the decode and prefill workers (the first token
    // is sampled on the prefill worker).
    if (i == 4) body.update({{"frequency_penalty", 1.5}, {"presence_penalty", 0.5}});
    if (i == 5) body.update({{"logit_bias", {{"400", 6}, {"13", -100}}}, {"temperature", 0.7}, {"seed", 3}});
    // The repetition penalty (over the prompt too, so the prefill worker's first token
    // feels it) and min_p; each changes serve's answer, so the workers must apply them.
    if (i == 3) body.update({{"temperature", 1.2}, {"seed", 5}});
    // min_tokens against a bias toward EOS: the prefill worker's first token must not be EOS
    // either; then stop ids and a stop string returned with the text.
    if (i == 0) body.update({{"logit_bias", {{"2", 30}}}, {"min_tokens", 5}});
    if (i == 1) body.update({{"stop_token_ids", {400, 13}}, {"stop", {"the"}}, {"include_stop_str_in_output", true}});
    json plain = body;
    if (i == 2) body.update({{"repetition_penalty", 3.0}});
    if (i == 3) body.update({{"repeat_penalty", 2.0}, {"repeat_last_n", 6}, {"min_p", 0.2}});
    const json want = post(serve(), "/v1/completions", body);
    if (i == 2 || i == 3) {
      EXPECT_NE(post(serve(), "/v1/completions", plain)["choices"][0]["text"], want["choices"][0]["text"]) << body.dump();
    }
    const json got = post(router(), "/v1/completions", body);
    const json& wl = want["choices"][0]["logprobs"];
    const json& gl = got["choices"][0]["logprobs"];
    ASSERT_EQ(gl["tokens"], wl["tokens"]) << kPrompts[i];
    ASSERT_EQ(gl["token_logprobs"].size(), wl["token_logprobs"].size());
    for (size_t k = 0; k < wl["token_logprobs"].size(); ++k)
      EXPECT_NEAR(gl["token_logprobs"][k].get<double>(), wl["token_logprobs"][k].get<double>(), 1e-4)
          << kPrompts[i] << " step " << k;
    EXPECT_EQ(gl["text_offset"], wl["text_offset"]);
  }
}

TEST_F(DisaggRouter, MaxTokensGivesExactlyThatMany) {
  for (int n : {1, 2, 3}) {
    const json body = {{"prompt", "Once upon a time"}, {"max_tokens", n}, {"temperature", 0}};
    const json want = post(serve(), "/v1/completions", body);
    const json got = post(router(), "/v1/completions", body);
    EXPECT_EQ(got["usage"]["completion_tokens"], n);
    EXPECT_EQ(got["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(got["choices"][0]["text"], want["choices"][0]["text"]);
    const Streamed s = stream(router(), "/v1/completions", body);
    EXPECT_EQ(s.usage["completion_tokens"], n);
    ASSERT_EQ(s.texts.size(), 1u);
    EXPECT_EQ(s.texts[0], want["choices"][0]["text"].get<std::string>());
    EXPECT_EQ(s.finish[0], "length");
  }
}

TEST_F(DisaggRouter, SeededChoicesMatchServe) {
  const json body = {{"prompt", "The little dog"}, {"max_tokens", 20}, {"temperature", 0.8},
                     {"seed", 42}, {"n", 3}};
  const json want = post(serve(), "/v1/completions", body);
  const json got = post(router(), "/v1/completions", body);
  ASSERT_EQ(got["choices"].size(), 3u);
  for (size_t k = 0; k < 3; ++k) EXPECT_EQ(got["choices"][k]["text"], want["choices"][k]["text"]) << "choice " << k;
  EXPECT_EQ(got["usage"], want["usage"]);
}

TEST_F(DisaggRouter, StopStringsAndChatMatchServe) {
  const json body = {{"prompt", "Once upon a time"}, {"max_tokens", 60}, {"temperature", 0}, {"stop", {"."}}};
  const json want = post(serve(), "/v1/completions", body);
  const json got = post(router(), "/v1/completions", body);
  EXPECT_EQ(got["choices"][0]["text"], want["choices"][0]["text"]);
  EXPECT_EQ(got["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(got["usage"], want["usage"]);
  const json chat = {{"messages", {{{"role", "user"}, {"content", "Tell me a story"}}}},
                     {"max_tokens", 20}, {"temperature", 0}};
  const json cw = post(serve(), "/v1/chat/completions", chat);
  const json cg = post(router(), "/v1/chat/completions", chat);
  EXPECT_EQ(cg["choices"][0]["message"]["content"], cw["choices"][0]["message"]["content"]);
}

TEST_F(DisaggRouter, BadRequestsAreRefused) {
  json r = post(router(), "/v1/completions", {{"prompt", std::string(3000, 'a')}, {"max_tokens", 4}}, 400);
  EXPECT_EQ(r["error"]["code"], "context_length_exceeded");
  r = post(router(), "/v1/completions", {{"prompt", "hi"}, {"model", "nope"}}, 404);
  EXPECT_EQ(r["error"]["code"], "model_not_found");
  // The router still serves afterwards.
  EXPECT_EQ(post(router(), "/v1/completions", {{"prompt", "hi"}, {"max_tokens", 2}})["usage"]["completion_tokens"], 2);
}

// Two decode workers; the one serving a long stream is SIGKILLed after the client has
// seen its first tokens. The router resumes on the other worker from prompt + tokens
// already sent; the client sees one stream, equal to what `serve` gives. The decode workers'
// steps are paced (5 ms: 480 tokens take 2.4 s) so that the stream is still running at the
// kill, however late the client's thread is (unpaced, stories260K makes them in ~0.1 s).
TEST(DisaggRouterFailover, DecodeWorkerKilledMidStream) {
  testing::ServerProcess serve(std::vector<std::string>{});
  ASSERT_TRUE(serve.ready()) << serve.error();
  ClusterOptions o;
  o.prefill_workers = 1;
  o.decode_workers = 2;
  o.decode_args = {"--fault-step-delay-ms", "5"};
  o.router_args = {"--policy", "round_robin"};
  Cluster cluster(o);
  ASSERT_TRUE(cluster.ready()) << cluster.error();

  const json body = {{"prompt", "Once upon a time"}, {"max_tokens", 480}, {"temperature", 0}, {"ignore_eos", true}};
  const json want = post(serve.port(), "/v1/completions", body);
  const std::string want_text = want["choices"][0]["text"];
  ASSERT_GT(want["usage"]["completion_tokens"].get<int>(), 400);

  int victim = -1;
  const Streamed got = stream(cluster.router_port(), "/v1/completions", body, [&](const json&) {
    if (victim >= 0) return;
    // The first request on a fresh round-robin router goes to decode 0; confirm with the
    // workers' running-request gauges when they still show it.
    victim = 0;
    for (int d = 0; d < 2; ++d)
      if (cluster.metric(Role::Decode, d, "pdserve_requests_running") > 0) victim = d;
    cluster.kill(Role::Decode, victim);
  });
  ASSERT_GE(victim, 0);
  EXPECT_FALSE(cluster.running(Role::Decode, victim));
  EXPECT_TRUE(got.done);
  ASSERT_EQ(got.texts.size(), 1u);
  EXPECT_EQ(got.texts[0], want_text) << cluster.logs();
  EXPECT_EQ(got.finish[0], want["choices"][0]["finish_reason"].get<std::string>());
  EXPECT_EQ(got.usage["completion_tokens"], want["usage"]["completion_tokens"]);
  EXPECT_EQ(got.usage["prompt_tokens"], want["usage"]["prompt_tokens"]);
  const std::string router_log = cluster.router().log();
  EXPECT_NE(router_log.find("resuming on another worker"), std::string::npos)
      << "the worker was not killed mid-stream:\n" << router_log;

  // The router keeps serving on the surviving worker.
  auto c = cluster.router_client();
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  const json again = post(cluster.router_port(), "/v1/completions", {{"prompt", "The little dog"}, {"max_tokens", 16}, {"temperature", 0}});
  const json again_want = post(serve.port(), "/v1/completions", {{"prompt", "The little dog"}, {"max_tokens", 16}, {"temperature", 0}});
  EXPECT_EQ(again["choices"][0]["text"], again_want["choices"][0]["text"]);
  EXPECT_GE(cluster.metric(Role::Decode, 1 - victim, "pdserve_requests_running"), 0) << "the survivor still answers";
}

// A decode worker that comes up after the router is served through within about a second:
// the router's health checker drives the gRPC connection itself. (Before, gRPC's
// synchronous channel only advanced a failed connection on its 5 s backup poller, so a
// worker started 5.5 s after the router was not used until ~10 s.)
TEST(DisaggRouterReconnect, DecodeWorkerStartedAfterTheRouterIsUsedWithinSeconds) {
  ClusterOptions o;
  o.prefill_workers = 0;
  Cluster cluster(o);
  ASSERT_TRUE(cluster.ready()) << cluster.error();
  cluster.kill(Role::Router);
  cluster.kill(Role::Decode);
  // A router whose decode worker is not there yet.
  const int port = testing::free_port();
  testing::ChildProcess router;
  ASSERT_TRUE(router.spawn({o.binary, "router", "--model", o.model, "--port", std::to_string(port), "--decode",
                            cluster.node(Role::Decode).address()},
                           "/tmp/pdserve-test-router-late-worker.log"));
  // The scenario, not a wait for an event: the router runs past gRPC's 5 s backup poll
  // without its worker.
  std::this_thread::sleep_for(std::chrono::milliseconds(5500));
  ASSERT_TRUE(cluster.restart(Role::Decode)) << cluster.error();  // healthy on its old ports
  const auto t0 = std::chrono::steady_clock::now();
  const auto health = [&] {
    httplib::Client c("127.0.0.1", port);
    c.set_connection_timeout(1, 0);
    c.set_read_timeout(2, 0);
    auto r = c.Get("/health");
    return r ? r->status : -1;
  };
  testing::wait_until([&] { return health() == 200; }, std::chrono::seconds(20), std::chrono::milliseconds(20));
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(health(), 200);
  EXPECT_LT(waited, 3.0) << "the router took " << waited << " s to use the worker";
  const json r = post(port, "/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 8}});
  EXPECT_EQ(r["usage"]["completion_tokens"].get<int>(), 8);
  router.stop(std::chrono::milliseconds(5000));
  std::remove("/tmp/pdserve-test-router-late-worker.log");
}

/// A decode worker (no prefill worker) on `model`, started without waiting.
std::unique_ptr<testing::PdNode> decode_on(const std::string& model) {
  testing::PdNode::Options o;
  o.role = "decode";
  o.model = model;
  return std::make_unique<testing::PdNode>(o);
}

/// A router on `model` in front of `workers` (round robin), started without waiting.
std::unique_ptr<testing::PdNode> router_on(const std::string& model, const std::vector<testing::PdNode*>& workers) {
  std::string list;
  for (auto* w : workers) list += (list.empty() ? "" : ",") + w->address();
  testing::PdNode::Options o;
  o.role = "router";
  o.model = model;
  o.args = {"--decode", list, "--policy", "round_robin", "--health-interval-ms", "100"};
  return std::make_unique<testing::PdNode>(o);
}

double prompt_tokens(testing::PdNode& worker) {
  return testing::sum_samples(testing::parse_prometheus_text(worker.metrics_text()), "pdserve_prompt_tokens_total");
}

// The router tokenizes and detokenizes with its own model file, so a decode worker whose
// vocabulary differs answers with ids that read as other text, and one with other weights
// (another quant of the model) continues a resumed stream with another model. Such a
// worker is never used: every request goes to the workers of the router's model, and a
// router with no other worker is not ready and says why.
TEST(DisaggRouterModel, DecodeWorkersOfAnotherModelAreNotUsed) {
  const std::string q4 = "../shared/models/synth-llama-small-q4_0.gguf";
  const std::string q8 = "../shared/models/synth-llama-small-q8_0.gguf";
  auto stories = decode_on(testing::kStoriesModel), synth_q4 = decode_on(q4), synth_q8 = decode_on(q8);
  for (auto* w : {stories.get(), synth_q4.get(), synth_q8.get()}) ASSERT_TRUE(w->start(false)) << w->error();
  for (auto* w : {stories.get(), synth_q4.get(), synth_q8.get()})
    ASSERT_TRUE(w->wait_healthy(std::chrono::seconds(60))) << w->log();
  // Started first: it waits its 10 s for a worker of its model before it opens its port.
  auto lonely = router_on(q8, {synth_q4.get()});
  ASSERT_TRUE(lonely->start(false)) << lonely->error();
  auto by_vocab = router_on(testing::kStoriesModel, {stories.get(), synth_q4.get()});
  auto by_weights = router_on(q4, {synth_q4.get(), synth_q8.get()});
  for (auto* r : {by_vocab.get(), by_weights.get()}) ASSERT_TRUE(r->start()) << r->error();

  struct Case {
    testing::PdNode* router;
    testing::PdNode* used;
    testing::PdNode* unused;
    const char* why;
  };
  for (const Case& c : {Case{by_vocab.get(), stories.get(), synth_q4.get(), "another vocabulary"},
                        Case{by_weights.get(), synth_q4.get(), synth_q8.get(), "other weights"}}) {
    SCOPED_TRACE(c.why);
    const double used0 = prompt_tokens(*c.used), unused0 = prompt_tokens(*c.unused);
    for (int i = 0; i < 4; ++i) {  // round robin would send every other request to the other worker
      const json r = post(c.router->port(), "/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 4}});
      EXPECT_EQ(r["usage"]["completion_tokens"].get<int>(), 4);
    }
    EXPECT_GT(prompt_tokens(*c.used), used0);
    EXPECT_EQ(prompt_tokens(*c.unused), unused0) << "a worker of another model was used";
    std::map<std::string, double> up;
    for (const auto& smp : testing::parse_prometheus_text(c.router->metrics_text()))
      if (smp.name == "pdserve_router_decode_worker_up")
        if (auto a = smp.label("address")) up[*a] = smp.value;
    EXPECT_EQ(up[c.used->address()], 1);
    EXPECT_EQ(up[c.unused->address()], 0);
    EXPECT_NE(c.router->log().find(c.why), std::string::npos) << c.router->log();
  }

  // Its only worker of the right model gone, a router does not retry (or resume) on the
  // other: 503, and the other worker sees nothing.
  stories->kill();
  const double q4_before = prompt_tokens(*synth_q4);
  post(by_vocab->port(), "/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 4}}, 503);
  EXPECT_EQ(prompt_tokens(*synth_q4), q4_before) << "a worker of another vocabulary was used for a retry";

  std::string body;
  ASSERT_TRUE(testing::wait_until([&] { return lonely->health_status(&body) != -1; }, std::chrono::seconds(30)))
      << lonely->log();
  EXPECT_EQ(lonely->health_status(&body), 503);
  EXPECT_NE(body.find("other weights"), std::string::npos) << body;
  post(lonely->port(), "/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 4}}, 503);
}

}  // namespace
}  // namespace pdserve
