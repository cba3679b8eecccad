// RouterEngine against in-process decode workers (DecodeServiceImpl on loopback gRPC)
// whose engines continue any token sequence deterministically, so an interrupted and
// resumed stream must equal an uninterrupted one: routing, n > 1 seeds, max_tokens,
// refusals, retry before the first token, resume mid-stream (worker killed or aborting
// on its own), client aborts reaching the worker, health and aggregated stats.
#include <gtest/gtest.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <functional>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "disagg/decode_service.h"
#include "disagg/router_engine.h"
#include "engine/output_processor.h"
#include "support/fake_engine.h"
#include "support/wait.h"
#include "support/server_process.h"

namespace pdserve::disagg {
namespace {

using namespace std::chrono_literals;
using testing::FakeEngine;
using testing::FakeTokenizer;

/// Continues any sequence: the next token is a function of the last two tokens, the
/// length and the seed (letters, spaces and the two bytes of "é", so UTF-8 is held back
/// at times). Text and stop strings are handled as the real engine does.
class ContinuationEngine : public engine::Engine {
 public:
  struct Submission {
    std::vector<int32_t> prompt;
    engine::SamplingParams params;
    engine::RequestOptions opts;
  };

  ContinuationEngine() = default;
  ~ContinuationEngine() override { shutdown(); }

  static int32_t next_token(const std::vector<int32_t>& seq, uint64_t seed) {
    const int32_t last = seq.back();
    if (last == FakeTokenizer::kByteBase + 0xC3) return FakeTokenizer::kByteBase + 0xA9;
    uint64_t h = seed * 0x9E3779B97F4A7C15ull + seq.size() * 1000003ull + static_cast<uint64_t>(last) * 7919ull +
                 (seq.size() > 1 ? static_cast<uint64_t>(seq[seq.size() - 2]) * 104729ull : 0);
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    const int r = static_cast<int>(h % 30);
    if (r < 26) return FakeTokenizer::kByteBase + 'a' + r;
    if (r < 29) return FakeTokenizer::kByteBase + ' ';
    return FakeTokenizer::kByteBase + 0xC3;
  }

  Result<std::shared_ptr<engine::RequestStream>> submit(std::vector<int32_t> prompt,
                                                        const engine::SamplingParams& params) override {
    auto r = submit_group(std::move(prompt), params, engine::RequestOptions{});
    if (!r.ok()) return r.status();
    return r.value()[0];
  }

  Result<std::vector<std::shared_ptr<engine::RequestStream>>> submit_group(std::vector<int32_t> prompt,
                                                                           const engine::SamplingParams& params,
                                                                           const engine::RequestOptions& opts) override {
    std::lock_guard<std::mutex> lk(mu_);
    submissions_.push_back({prompt, params, opts});
    if (submit_error_) return Status(submit_error_code_, *submit_error_);
    if (stopped_) return Status::Unavailable("the engine is shutting down");
    if (prompt.empty() || static_cast<int>(prompt.size()) >= kContext) return Status::InvalidArgument("bad prompt");
    std::vector<std::shared_ptr<engine::RequestStream>> out;
    for (int k = 0; k < opts.n; ++k) {
      auto s = std::make_shared<engine::RequestStream>("c" + std::to_string(++ids_));
      const engine::SamplingParams p = params.for_choice(k);
      ++active_;
      threads_.emplace_back([this, s, prompt, p] {
        run(*s, prompt, p);
        --active_;
      });
      out.push_back(s);
    }
    return out;
  }

  const tokenizer::Tokenizer& tokenizer() const override { return tok_; }
  const std::string& model_name() const override { return name_; }
  int context_length() const override { return kContext; }
  engine::EngineStats stats() const override {
    engine::EngineStats s;
    s.kv_blocks_total = 100;
    s.requests_running = active_.load();
    s.kv_blocks_used = s.requests_running;
    s.kv_blocks_free = 100 - s.kv_blocks_used;
    return s;
  }
  void shutdown() override {
    std::vector<std::thread> threads;
    {
      std::lock_guard<std::mutex> lk(mu_);
      stopped_ = true;
      threads.swap(threads_);
    }
    for (auto& t : threads) t.join();
  }

  void set_token_delay(std::chrono::milliseconds d) { delay_ms_ = static_cast<int>(d.count()); }
  /// One request stops (hangs, as a stuck worker would) after pushing its k-th generated token (-1: off).
  void pause_after(int k) { pause_after_ = k; }
  bool paused() const { return paused_.load(); }
  void set_first_token_delay(std::chrono::milliseconds d) { first_delay_ms_ = static_cast<int>(d.count()); }
  /// submit_group() fails with this message and code from now on (nullopt: accept again).
  void set_submit_error(std::optional<std::string> e, StatusCode code = StatusCode::InvalidArgument) {
    std::lock_guard<std::mutex> lk(mu_);
    submit_error_ = std::move(e);
    submit_error_code_ = code;
  }
  std::vector<Submission> submissions() const {
    std::lock_guard<std::mutex> lk(mu_);
    return submissions_;
  }
  int active() const { return active_.load(); }
  int aborts() const { return aborts_.load(); }
  int tokens_generated() const { return generated_.load(); }

  static constexpr int kContext = 256;

 private:
  void run(engine::RequestStream& out, std::vector<int32_t> seq, const engine::SamplingParams& p) {
    const int n = static_cast<int>(seq.size());
    const int max_len = p.max_tokens > 0 ? std::min(kContext, n + p.max_tokens) : kContext;
    engine::OutputProcessor output(tok_, p, max_len - n);
    auto sleep_ms = [&](int ms) {
      for (int i = 0; i < ms && !out.aborted() && !stopped(); i += 1) std::this_thread::sleep_for(1ms);
    };
    sleep_ms(first_delay_ms_.load());
    while (true) {
      sleep_ms(delay_ms_.load());
      if (out.aborted() || stopped()) {
        if (out.aborted()) ++aborts_;
        engine::StreamDelta d;
        d.finish = engine::FinishReason::Abort;
        d.prompt_tokens = n;
        d.completion_tokens = static_cast<int>(seq.size()) - n;
        out.push(std::move(d));
        return;
      }
      const int32_t t = next_token(seq, p.seed.value_or(0));
      seq.push_back(t);
      ++generated_;
      engine::StreamDelta d;
      const engine::FinishReason reason = output.add_token(t, std::nullopt, d);
      d.prompt_tokens = n;
      d.completion_tokens = static_cast<int>(seq.size()) - n;
      if (reason != engine::FinishReason::None) {
        d.finish = reason;
        out.push(std::move(d));
        return;
      }
      out.push(std::move(d));
      if (static_cast<int>(seq.size()) - n == pause_after_.load()) {
        pause_after_ = -1;
        paused_ = true;
        while (!out.aborted() && !stopped()) std::this_thread::sleep_for(1ms);
      }
    }
  }
  bool stopped() {
    std::lock_guard<std::mutex> lk(mu_);
    return stopped_;
  }

  FakeTokenizer tok_;
  std::string name_ = "cont-model";
  mutable std::mutex mu_;
  std::vector<Submission> submissions_;
  std::vector<std::thread> threads_;
  std::optional<std::string> submit_error_;
  StatusCode submit_error_code_ = StatusCode::InvalidArgument;
  bool stopped_ = false;
  int ids_ = 0;
  std::atomic<int> active_{0}, aborts_{0}, generated_{0};
  std::atomic<int> delay_ms_{0}, first_delay_ms_{0}, pause_after_{-1};
  std::atomic<bool> paused_{false};
};

/// A decode worker in this process: a ContinuationEngine behind DecodeServiceImpl.
struct InProcessWorker {
  explicit InProcessWorker(int port = 0) { start(port); }
  ~InProcessWorker() { kill(); }

  void start(int want_port) {
    engine = std::make_unique<ContinuationEngine>();
    service = std::make_unique<DecodeServiceImpl>(*engine);
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:" + std::to_string(want_port), grpc::InsecureServerCredentials(), &port);
    b.RegisterService(service.get());
    server = b.BuildAndStart();
  }
  /// Stops serving at once: calls in flight are cut, the port is closed.
  void kill() {
    if (server) {
      server->Shutdown(std::chrono::system_clock::now());
      server->Wait();
      server.reset();
    }
    if (engine) engine->shutdown();
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port); }

  std::unique_ptr<ContinuationEngine> engine;
  std::unique_ptr<DecodeServiceImpl> service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

struct Collected {
  std::vector<int32_t> tokens;
  std::string text;
  engine::FinishReason finish = engine::FinishReason::None;
  std::string error;
  int prompt_tokens = 0, completion_tokens = 0, deltas = 0;
  bool counts_consistent = true;  // completion_tokens == tokens so far, in every delta
};

/// Reads `s` to its final delta (or `timeout`); `on_delta` sees each delta first.
Collected collect(engine::RequestStream& s, std::function<void(const Collected&)> on_delta = {},
                  std::chrono::milliseconds timeout = 20s) {
  Collected c;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    engine::StreamDelta d;
    if (!s.next(d, 50ms)) continue;
    ++c.deltas;
    c.tokens.insert(c.tokens.end(), d.tokens.begin(), d.tokens.end());
    c.text += d.text;
    c.prompt_tokens = d.prompt_tokens;
    c.completion_tokens = d.completion_tokens;
    if (d.completion_tokens != static_cast<int>(c.tokens.size())) c.counts_consistent = false;
    if (on_delta) on_delta(c);
    if (d.finish != engine::FinishReason::None) {
      c.finish = d.finish;
      c.error = d.error;
      return c;
    }
  }
  return c;
}

/// What an uninterrupted run on a fresh engine gives.
Collected reference(const std::vector<int32_t>& prompt, const engine::SamplingParams& p) {
  ContinuationEngine e;
  auto s = e.submit(prompt, p);
  EXPECT_TRUE(s.ok());
  return collect(*s.value());
}

class RouterEngineTest : public ::testing::Test {
 public:
  void start_router(std::vector<std::string> addrs, RoutingPolicyKind policy = RoutingPolicyKind::kRoundRobin,
                    int max_attempts = 0) {
    RouterConfig cfg;
    cfg.model_name = "cont-model";
    cfg.decode = std::move(addrs);
    cfg.policy.kind = policy;
    cfg.health_interval = 100ms;
    cfg.health_timeout = 3000ms;  // a loaded machine (TSan, ctest -j2) can be slow to answer; a killed worker fails at once
    cfg.limits.max_attempts = max_attempts;
    auto pol = make_routing_policy(cfg.policy);
    ASSERT_TRUE(pol.ok());
    router = std::make_unique<RouterEngine>(cfg, std::make_unique<FakeTokenizer>(), std::move(pol.value()));
  }
  void SetUp() override {
    a = std::make_unique<InProcessWorker>();
    b = std::make_unique<InProcessWorker>();
    start_router({a->address(), b->address()});
    ASSERT_TRUE(testing::wait_until([&] { return router->workers()[0]->healthy() && router->workers()[1]->healthy(); }));
  }
  void TearDown() override {
    if (router) router->shutdown();
  }
  std::vector<int32_t> prompt(const std::string& text) { return tok.ids(text); }
  static engine::SamplingParams greedy(int max_tokens) {
    engine::SamplingParams p;
    p.temperature = 0;
    p.max_tokens = max_tokens;
    return p;
  }
  /// The worker whose engine is running something (nullptr if none).
  InProcessWorker* busy_worker() {
    for (auto* w : {a.get(), b.get()})
      if (w->engine && w->engine->active() > 0) return w;
    return nullptr;
  }

  FakeTokenizer tok;
  std::unique_ptr<InProcessWorker> a, b;
  std::unique_ptr<RouterEngine> router;
};

TEST_F(RouterEngineTest, StreamsWhatTheWorkerGenerates) {
  const auto p = prompt("Once upon a time");
  for (int max_tokens : {1, 2, 3, 40}) {
    auto s = router->submit(p, greedy(max_tokens));
    ASSERT_TRUE(s.ok()) << s.error();
    const Collected got = collect(*s.value());
    const Collected want = reference(p, greedy(max_tokens));
    EXPECT_EQ(got.tokens.size(), static_cast<size_t>(max_tokens));
    EXPECT_EQ(got.tokens, want.tokens);
    EXPECT_EQ(got.text, want.text);
    EXPECT_EQ(got.finish, engine::FinishReason::Length);
    EXPECT_EQ(got.prompt_tokens, static_cast<int>(p.size()));
    EXPECT_EQ(got.completion_tokens, max_tokens);
    EXPECT_TRUE(got.counts_consistent);
  }
  // Round robin: the two workers took turns.
  EXPECT_EQ(a->engine->submissions().size(), 2u);
  EXPECT_EQ(b->engine->submissions().size(), 2u);
}

// A worker older than the router (a lower Health sampling_level) would drop the sampling
// fields it does not know: a request that uses them goes only to a worker that applies them,
// and is refused with the reason when every healthy worker is older (helper-71).
TEST_F(RouterEngineTest, ARequestNeedingNewerSamplingFieldsSkipsOlderWorkers) {
  // Both report no level: with their vocabulary fingerprint they count as stop 58's builds
  // (penalties and logit_bias, not min_p / min_tokens / ...).
  a->service->report_sampling_level(0);
  b->service->report_sampling_level(0);
  ASSERT_TRUE(testing::wait_until([&] { return router->workers()[0]->sampling_level() == 1 && router->workers()[1]->sampling_level() == 1; }));
  const auto p = prompt("abc");
  engine::SamplingParams pen = greedy(3);
  pen.frequency_penalty = 0.5f;
  for (int i = 0; i < 4; ++i) collect(*router->submit(p, pen).value());
  EXPECT_EQ(a->engine->submissions().size() + b->engine->submissions().size(), 4u);
  engine::SamplingParams min_p = greedy(3);
  min_p.min_p = 0.1f;
  auto refused = router->submit(p, min_p);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::Unavailable);
  EXPECT_NE(refused.status().message().find("older pdserve"), std::string::npos) << refused.status().message();
  // One worker upgraded: such requests go to it only.
  b->service->report_sampling_level(kSamplingLevel);
  ASSERT_TRUE(testing::wait_until([&] { return router->workers()[1]->sampling_level() == kSamplingLevel; }));
  const size_t a_before = a->engine->submissions().size(), b_before = b->engine->submissions().size();
  for (int i = 0; i < 4; ++i) {
    auto s = router->submit(p, min_p);
    ASSERT_TRUE(s.ok()) << s.error();
    collect(*s.value());
  }
  EXPECT_EQ(a->engine->submissions().size(), a_before);
  EXPECT_EQ(b->engine->submissions().size(), b_before + 4);
  EXPECT_EQ(b->engine->submissions().back().params.min_p, 0.1f);
}

// A worker's level from its Health: stop 58's builds report none but apply fields 11–13, and
// are told apart from older ones by their vocabulary fingerprint (helper-72: the router
// refused their penalties).
TEST(SamplingLevel, FromHealthAndFromParams) {
  HealthResponse h;
  EXPECT_EQ(sampling_level(h), 0);
  h.set_vocab_fingerprint("0123456789abcdef");
  EXPECT_EQ(sampling_level(h), 1);
  h.set_sampling_level(kSamplingLevel);
  EXPECT_EQ(sampling_level(h), kSamplingLevel);
  engine::SamplingParams p;
  EXPECT_EQ(sampling_level(p), 0);
  p.logit_bias = {{1, 2.f}};
  EXPECT_EQ(sampling_level(p), 1);
  p.min_tokens = 1;
  EXPECT_EQ(sampling_level(p), 2);
}

TEST_F(RouterEngineTest, StopStringsAndRequestFieldsReachTheWorker) {
  const auto p = prompt("abc");
  engine::SamplingParams params = greedy(200);
  params.seed = 3;
  const Collected full = reference(p, params);
  ASSERT_GT(full.text.size(), 30u);
  params.stop = {full.text.substr(20, 3)};
  engine::RequestOptions opts;
  opts.priority = 7;
  opts.cache_salt = "tenant-a";
  auto s = router->submit_group(p, params, opts);
  ASSERT_TRUE(s.ok()) << s.error();
  const Collected got = collect(*s.value()[0]);
  const Collected want = reference(p, params);
  EXPECT_EQ(got.finish, engine::FinishReason::Stop);
  EXPECT_EQ(got.text, want.text);
  EXPECT_EQ(got.tokens, want.tokens);
  auto subs = a->engine->submissions();
  subs.insert(subs.end(), b->engine->submissions().begin(), b->engine->submissions().end());
  ASSERT_EQ(subs.size(), 1u);
  EXPECT_EQ(subs[0].opts.priority, 7);
  EXPECT_EQ(subs[0].opts.cache_salt, "tenant-a");
  EXPECT_EQ(subs[0].opts.original_prompt_len, 0);
  EXPECT_EQ(subs[0].params.stop, params.stop);
  EXPECT_EQ(subs[0].params.seed, params.seed);
}

TEST_F(RouterEngineTest, ChoiceKUsesSeedPlusK) {
  const auto p = prompt("seeds");
  engine::SamplingParams params = greedy(30);
  params.seed = 100;
  engine::RequestOptions opts;
  opts.n = 3;
  auto r = router->submit_group(p, params, opts);
  ASSERT_TRUE(r.ok()) << r.error();
  ASSERT_EQ(r.value().size(), 3u);
  for (int k = 0; k < 3; ++k) {
    engine::SamplingParams pk = params;
    pk.seed = 100 + k;
    EXPECT_EQ(collect(*r.value()[k]).tokens, reference(p, pk).tokens) << "choice " << k;
  }
}

TEST_F(RouterEngineTest, RefusalComesBackFromSubmit) {
  a->engine->set_submit_error("the request needs more KV blocks than the pool has");
  b->engine->set_submit_error("the request needs more KV blocks than the pool has");
  auto r = router->submit(prompt("hi"), greedy(5));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), "the request needs more KV blocks than the pool has");
  // The router's own checks.
  EXPECT_FALSE(router->submit({}, greedy(5)).ok());
  EXPECT_FALSE(router->submit({99999}, greedy(5)).ok());
  EXPECT_FALSE(router->submit(std::vector<int32_t>(256, 70), greedy(5)).ok());
}

TEST_F(RouterEngineTest, RefusalsKeepTheWorkersCode) {
  // A verdict on the request is not retried elsewhere: one submission, its code.
  for (StatusCode code : {StatusCode::InvalidArgument, StatusCode::ResourceExhausted, StatusCode::NotFound}) {
    a->engine->set_submit_error("refused", code);
    b->engine->set_submit_error("refused", code);
    const size_t before = a->engine->submissions().size() + b->engine->submissions().size();
    auto r = router->submit(prompt("hi"), greedy(5));
    ASSERT_FALSE(r.ok()) << name(code);
    EXPECT_EQ(r.code(), code);
    EXPECT_EQ(r.error(), "refused");
    EXPECT_EQ(a->engine->submissions().size() + b->engine->submissions().size(), before + 1) << name(code);
  }
}

TEST_F(RouterEngineTest, ARateLimitedWorkerPassesTheRequestOnAndAllRateLimitedIsRateLimited) {
  // Worker a is at its --max-cache-salts: the request goes to b (whatever the policy picked).
  a->engine->set_submit_error("Too many cache_salt namespaces in use", StatusCode::RateLimited);
  const auto p = prompt("Once upon a time");
  engine::RequestOptions opts;
  opts.cache_salt = "tenant-b";
  for (int i = 0; i < 2; ++i) {
    auto s = router->submit_group(p, greedy(8), opts);
    ASSERT_TRUE(s.ok()) << s.error();
    EXPECT_EQ(collect(*s.value()[0]).tokens, reference(p, greedy(8)).tokens);
  }
  EXPECT_EQ(b->engine->submissions().size(), 2u);
  EXPECT_TRUE(router->workers()[0]->healthy()) << "a refusal is not a failure";
  // Both at their cap: the worker's RateLimited, with its message (the HTTP layer's 429).
  b->engine->set_submit_error("Too many cache_salt namespaces in use", StatusCode::RateLimited);
  auto r = router->submit_group(p, greedy(8), opts);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.code(), StatusCode::RateLimited);
  EXPECT_EQ(r.error(), "Too many cache_salt namespaces in use");
  // An engine shutting down is also that worker's own state; the other one serves.
  b->engine->set_submit_error(std::nullopt);
  a->engine->set_submit_error("the engine is shutting down", StatusCode::Unavailable);
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(router->submit_group(p, greedy(8), opts).ok());
}

TEST_F(RouterEngineTest, ResumesOnAnotherWorkerWhenOneDiesMidStream) {
  a->engine->set_token_delay(5ms);
  b->engine->set_token_delay(5ms);
  // The serving worker hangs after its 60th token, so it is still busy when the collector
  // (which kills at 20 or more) looks, however late that thread runs.
  a->engine->pause_after(60);
  b->engine->pause_after(60);
  const auto p = prompt("The quick brown fox");
  engine::SamplingParams params = greedy(150);
  auto s = router->submit(p, params);
  ASSERT_TRUE(s.ok()) << s.error();
  InProcessWorker* victim = nullptr;
  int delivered_at_kill = 0;
  const Collected got = collect(*s.value(), [&](const Collected& c) {
    if (!victim && c.tokens.size() >= 20) {
      victim = busy_worker();
      ASSERT_NE(victim, nullptr);
      (victim == a.get() ? b : a)->engine->pause_after(-1);
      delivered_at_kill = static_cast<int>(c.tokens.size());
      victim->kill();
    }
  });
  ASSERT_NE(victim, nullptr);
  InProcessWorker* survivor = victim == a.get() ? b.get() : a.get();
  const Collected want = reference(p, params);
  EXPECT_EQ(got.finish, engine::FinishReason::Length);
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(got.text, want.text);
  EXPECT_EQ(got.prompt_tokens, static_cast<int>(p.size()));
  EXPECT_EQ(got.completion_tokens, 150);
  EXPECT_TRUE(got.counts_consistent);
  // The survivor got prompt + what was delivered, marked as a resume, with fewer tokens to go.
  const auto subs = survivor->engine->submissions();
  ASSERT_EQ(subs.size(), 1u);
  const int resumed_from = static_cast<int>(subs[0].prompt.size()) - static_cast<int>(p.size());
  EXPECT_GE(resumed_from, delivered_at_kill);
  EXPECT_EQ(subs[0].opts.original_prompt_len, static_cast<int>(p.size()));
  EXPECT_EQ(subs[0].params.max_tokens, 150 - resumed_from);
  EXPECT_TRUE(std::equal(p.begin(), p.end(), subs[0].prompt.begin()));
  EXPECT_TRUE(std::equal(want.tokens.begin(), want.tokens.begin() + resumed_from, subs[0].prompt.begin() + p.size()));
  // The router stops routing to the dead worker.
  EXPECT_TRUE(testing::wait_until([&] {
    for (const auto& w : router->workers())
      if (w->address() == victim->address()) return !w->healthy();
    return false;
  }));
}

/// Starts `params` on the router, lets the serving worker stop after its k-th token, kills
/// it there and returns what the client saw.
Collected run_with_kill_after(RouterEngineTest& t, const std::vector<int32_t>& p, const engine::SamplingParams& params,
                              int k);

TEST_F(RouterEngineTest, ResumeKeepsTextTheFailedWorkerHeldBack) {
  // Kill the worker right after it sent the first byte of a two-byte character: that
  // byte is held back (incomplete UTF-8) and must come out with the resumed second byte.
  const auto p = prompt("utf8");
  engine::SamplingParams params = greedy(200);
  params.seed = 0;
  const Collected want = reference(p, params);
  int k = -1;
  for (size_t i = 5; i < want.tokens.size() && k < 0; ++i)
    if (want.tokens[i - 1] == FakeTokenizer::kByteBase + 0xC3) k = static_cast<int>(i);
  ASSERT_GT(k, 0) << "no two-byte character in the reference";
  const Collected got = run_with_kill_after(*this, p, params, k);
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(got.text, want.text);
  EXPECT_NE(got.text.find("\xc3\xa9"), std::string::npos);
}

TEST_F(RouterEngineTest, StopStringAcrossAResumeIsFound) {
  const auto p = prompt("stop across");
  engine::SamplingParams params = greedy(200);
  const Collected full = reference(p, params);
  // A two-letter stop string whose first letter is the last token before the kill and
  // whose second letter comes from the resumed worker, not occurring earlier.
  int k = -1;
  std::string stop;
  for (size_t i = 10; i + 1 < full.tokens.size() && k < 0; ++i) {
    const std::string s = tok.token_to_piece(full.tokens[i - 1]) + tok.token_to_piece(full.tokens[i]);
    if (s.size() == 2 && std::isalpha(static_cast<unsigned char>(s[0])) && std::isalpha(static_cast<unsigned char>(s[1])) &&
        full.text.find(s) == full.text.rfind(s, full.text.size()) && full.text.find(s) != std::string::npos &&
        tok.decode(std::vector<int32_t>(full.tokens.begin(), full.tokens.begin() + static_cast<long>(i) - 1)).find(s) == std::string::npos) {
      k = static_cast<int>(i);
      stop = s;
    }
  }
  ASSERT_GT(k, 0);
  params.stop = {stop};
  const Collected want = reference(p, params);
  ASSERT_EQ(want.finish, engine::FinishReason::Stop);
  ASSERT_EQ(want.tokens.size(), static_cast<size_t>(k + 1));
  const Collected got = run_with_kill_after(*this, p, params, k);
  EXPECT_EQ(got.finish, engine::FinishReason::Stop);
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(got.text, want.text);
  EXPECT_EQ(got.completion_tokens, k + 1);
}

TEST_F(RouterEngineTest, ResumesWhenAWorkerAbortsOnItsOwn) {
  a->engine->set_token_delay(5ms);
  b->engine->set_token_delay(5ms);
  a->engine->pause_after(40);  // still busy when the collector looks (at 10 tokens or more)
  b->engine->pause_after(40);
  const auto p = prompt("shutdown");
  auto s = router->submit(p, greedy(100));
  ASSERT_TRUE(s.ok());
  InProcessWorker* victim = nullptr;
  const Collected got = collect(*s.value(), [&](const Collected& c) {
    if (!victim && c.tokens.size() >= 10) {
      victim = busy_worker();
      ASSERT_NE(victim, nullptr);
      (victim == a.get() ? b : a)->engine->pause_after(-1);
      victim->engine->shutdown();  // pushes Abort on its streams; the gRPC server stays up
    }
  });
  ASSERT_NE(victim, nullptr);
  EXPECT_EQ(got.finish, engine::FinishReason::Length);
  EXPECT_EQ(got.tokens, reference(p, greedy(100)).tokens);
}

Collected run_with_kill_after(RouterEngineTest& t, const std::vector<int32_t>& p, const engine::SamplingParams& params,
                              int k) {
  t.a->engine->pause_after(k);
  t.b->engine->pause_after(k);
  auto s = t.router->submit(p, params);
  EXPECT_TRUE(s.ok()) << s.error();
  if (!s.ok()) return {};
  InProcessWorker* victim = nullptr;
  EXPECT_TRUE(testing::wait_until([&] {
    for (auto* w : {t.a.get(), t.b.get()})
      if (w->engine->paused()) victim = w;
    return victim != nullptr;
  }));
  if (!victim) return {};
  (victim == t.a.get() ? t.b : t.a)->engine->pause_after(-1);
  std::this_thread::sleep_for(50ms);  // the router has the k tokens
  victim->kill();
  return collect(*s.value());
}

TEST_F(RouterEngineTest, RetriesElsewhereWhenAWorkerFailsBeforeTheFirstToken) {
  a->engine->set_first_token_delay(3000ms);
  b->engine->set_first_token_delay(3000ms);
  const auto p = prompt("retry me");
  auto s = router->submit(p, greedy(20));
  ASSERT_TRUE(s.ok()) << s.error();
  InProcessWorker* victim = nullptr;
  ASSERT_TRUE(testing::wait_until([&] { return (victim = busy_worker()) != nullptr; }));
  InProcessWorker* survivor = victim == a.get() ? b.get() : a.get();
  survivor->engine->set_first_token_delay(0ms);
  victim->kill();
  const Collected got = collect(*s.value());
  EXPECT_EQ(got.finish, engine::FinishReason::Length);
  EXPECT_EQ(got.tokens, reference(p, greedy(20)).tokens);
  const auto subs = survivor->engine->submissions();
  ASSERT_EQ(subs.size(), 1u);
  EXPECT_EQ(subs[0].prompt, p);  // a plain retry, not a resume
  EXPECT_EQ(subs[0].opts.original_prompt_len, 0);
  EXPECT_EQ(subs[0].params.max_tokens, 20);
}

TEST_F(RouterEngineTest, SkipsAnUnreachableWorker) {
  router->shutdown();
  const int closed = testing::free_port();
  start_router({"127.0.0.1:" + std::to_string(closed), a->address()});
  for (int i = 0; i < 4; ++i) {  // round robin would pick the dead one every other time
    auto s = router->submit(prompt("x"), greedy(3));
    ASSERT_TRUE(s.ok()) << s.error();
    EXPECT_EQ(collect(*s.value()).tokens.size(), 3u);
  }
  EXPECT_EQ(a->engine->submissions().size(), 4u);
}

TEST_F(RouterEngineTest, NoReachableWorkerIsAnError) {
  router->shutdown();
  start_router({"127.0.0.1:" + std::to_string(testing::free_port())}, RoutingPolicyKind::kLeastLoad, /*max_attempts=*/2);
  auto s = router->submit(prompt("x"), greedy(3));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().find("no decode worker"), std::string::npos) << s.error();
  // /health answers 503 with the reason, and names the worker and its last error.
  const std::string why = router->not_ready_reason();
  const std::string addr = router->workers()[0]->address();
  EXPECT_EQ(why.rfind("no healthy decode worker (" + addr + ": ", 0), 0u) << why;
  EXPECT_EQ(why.find(addr + ": " + addr), std::string::npos) << why;
}

TEST_F(RouterEngineTest, ClientAbortCancelsTheWorkersRequest) {
  a->engine->set_token_delay(10ms);
  b->engine->set_token_delay(10ms);
  auto s = router->submit(prompt("long"), greedy(-1));
  ASSERT_TRUE(s.ok());
  bool aborted = false;
  const Collected got = collect(*s.value(), [&](const Collected& c) {
    if (!aborted && c.tokens.size() >= 5) {
      s.value()->abort();
      aborted = true;
    }
  });
  EXPECT_EQ(got.finish, engine::FinishReason::Abort);
  EXPECT_TRUE(testing::wait_until([&] {
    return a->engine->aborts() + b->engine->aborts() == 1 && a->engine->active() + b->engine->active() == 0;
  }));
  EXPECT_LT(a->engine->tokens_generated() + b->engine->tokens_generated(), 200);
}

TEST_F(RouterEngineTest, HealthStatsAndRecovery) {
  EXPECT_EQ(router->model_name(), "cont-model");
  EXPECT_EQ(router->context_length(), ContinuationEngine::kContext);
  ASSERT_TRUE(testing::wait_until([&] { return router->stats().kv_blocks_total == 200; }));
  EXPECT_EQ(router->not_ready_reason(), "");
  const int port = a->port;
  a->kill();
  ASSERT_TRUE(testing::wait_until([&] { return !router->workers()[0]->healthy(); }));
  EXPECT_TRUE(router->workers()[1]->healthy());
  EXPECT_EQ(router->stats().kv_blocks_total, 100);
  EXPECT_EQ(router->not_ready_reason(), "") << "one healthy worker is enough";
  a = std::make_unique<InProcessWorker>(port);  // back on the same port
  ASSERT_EQ(a->port, port);
  ASSERT_TRUE(testing::wait_until([&] { return router->workers()[0]->healthy(); }, 10s));
  auto m = router->metrics();
  EXPECT_EQ(m.kv_blocks_total, 200);
}

TEST_F(RouterEngineTest, MetricsCountFinishedRequests) {
  for (int i = 0; i < 3; ++i) {
    auto s = router->submit(prompt("m"), greedy(4));
    ASSERT_TRUE(s.ok());
    collect(*s.value());
  }
  ASSERT_TRUE(testing::wait_until([&] { return router->metrics().request_success["length"] == 3; }));
  const auto m = router->metrics();
  EXPECT_EQ(m.generation_tokens, 12);
  EXPECT_EQ(m.prompt_tokens, 3);
  EXPECT_EQ(router->stats().generation_tokens_total, 12);
}

}  // namespace
}  // namespace pdserve::disagg
