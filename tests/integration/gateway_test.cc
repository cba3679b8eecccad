// `pdserve serve --auth-file`: API keys (401 / 404 model_not_found), rate limits (429 with
// OpenAI's error shape, Retry-After and x-ratelimit-* headers, exact under 32 concurrent
// clients), SIGHUP reload while requests stream, per-tenant prefix-cache namespaces,
// per-class queue bounds (503 server_overloaded at once) and a malformed file naming its line.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "gateway/auth_config.h"
#include "support/cluster.h"
#include "support/prometheus.h"
#include "support/server_process.h"
#include "support/wait.h"
#include "support/pdserve_bin.h"

namespace pdserve {
namespace {

using json = nlohmann::json;
using Ms = std::chrono::milliseconds;

/// A temp dir holding auth.json, removed at the end.
struct AuthDir {
  std::filesystem::path dir;
  AuthDir() {
    char tmpl[] = "/tmp/pdserve-gateway-XXXXXX";
    dir = ::mkdtemp(tmpl);
  }
  ~AuthDir() { std::filesystem::remove_all(dir); }
  std::string path() const { return (dir / "auth.json").string(); }
  void write(const std::string& text) const {
    const std::string tmp = path() + ".tmp";
    std::ofstream(tmp) << text;
    std::filesystem::rename(tmp, path());  // a reader never sees half a file
  }
};

json key(const std::string& k, const std::string& tenant, json extra = json::object()) {
  json j = {{"key_sha256", gateway::hash_api_key(k)}, {"tenant", tenant}};
  j.update(extra);
  return j;
}

httplib::Client client(int port) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(5, 0);
  c.set_read_timeout(60, 0);
  return c;
}

httplib::Result complete(int port, const std::string& api_key, json body = json::object()) {
  if (!body.contains("prompt")) body["prompt"] = "Once upon a time";
  if (!body.contains("max_tokens")) body["max_tokens"] = 2;
  body["temperature"] = 0;
  httplib::Headers h;
  if (!api_key.empty()) h.emplace("Authorization", "Bearer " + api_key);
  return client(port).Post("/v1/completions", h, body.dump(), "application/json");
}

/// POSTs `body` to /v1/completions with `api_key`, handing each chunk of the response body
/// to `on_chunk` (false hangs up); returns the HTTP status (-1: no response).
int post_streaming(int port, const std::string& api_key, const json& body,
                   std::function<bool(const char*, size_t)> on_chunk) {
  httplib::Client c = client(port);
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.set_header("Authorization", "Bearer " + api_key);
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) { return on_chunk(data, n); };
  httplib::Response res;
  httplib::Error err;
  c.send(req, res, err);
  return res.status;
}

std::string error_code(const httplib::Result& r) {
  auto j = json::parse(r->body, nullptr, false);
  if (j.is_discarded() || !j.contains("error") || j["error"]["code"].is_null()) return "";
  return j["error"]["code"].get<std::string>();
}

TEST(Gateway, WrongKey401ModelNotAllowed404AndRateLimitHeaders) {
  AuthDir d;
  d.write(json{{"tenants", {{"t1", json::object()}}},
               {"keys", {key("k-basic", "t1"), key("k-model", "t1", {{"models", {"another-model"}}}),
                         key("k-limits", "t1", {{"limits", {{"requests_per_minute", 100}, {"tokens_per_minute", 1000}}}})}}}
              .dump(2));
  testing::ServerProcess srv({"--auth-file", d.path()});
  ASSERT_TRUE(srv.ready()) << srv.error();
  auto none = complete(srv.port(), "");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 401);
  EXPECT_EQ(error_code(none), "invalid_api_key");
  auto wrong = complete(srv.port(), "k-nope");
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 401);
  // The hash itself is not a key.
  EXPECT_EQ(complete(srv.port(), gateway::hash_api_key("k-basic"))->status, 401);
  auto models = client(srv.port()).Get("/v1/models", {{"Authorization", "Bearer k-nope"}});
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 401);
  auto m = complete(srv.port(), "k-model");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 404) << m->body;
  EXPECT_EQ(error_code(m), "model_not_found");
  // Allowed by the key, but not the model served here: the same 404 (the serving check's).
  auto other = complete(srv.port(), "k-model", {{"model", "another-model"}});
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 404) << other->body;
  EXPECT_NE(other->body.find("'another-model'"), std::string::npos) << other->body;
  auto ok = complete(srv.port(), "k-basic");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  EXPECT_FALSE(ok->has_header("x-ratelimit-limit-requests")) << "a key without limits";
  // With limits: every response says them; tokens are debited by prompt + max_tokens.
  auto lim = complete(srv.port(), "k-limits", {{"max_tokens", 10}});
  ASSERT_TRUE(lim);
  EXPECT_EQ(lim->status, 200);
  EXPECT_EQ(lim->get_header_value("x-ratelimit-limit-requests"), "100");
  EXPECT_EQ(lim->get_header_value("x-ratelimit-remaining-requests"), "99");
  EXPECT_EQ(lim->get_header_value("x-ratelimit-limit-tokens"), "1000");
  const int prompt_tokens = json::parse(lim->body)["usage"]["prompt_tokens"].get<int>();
  EXPECT_EQ(lim->get_header_value("x-ratelimit-remaining-tokens"), std::to_string(1000 - prompt_tokens - 10));
  EXPECT_FALSE(lim->get_header_value("x-ratelimit-reset-requests").empty());
  EXPECT_FALSE(lim->get_header_value("x-ratelimit-reset-tokens").empty());
  auto listed = client(srv.port()).Get("/v1/models", {{"Authorization", "Bearer k-limits"}});
  ASSERT_TRUE(listed);
  EXPECT_EQ(listed->status, 200);
  EXPECT_EQ(listed->get_header_value("x-ratelimit-limit-tokens"), "1000");
  // /v1/models lists only the models the key may use, and another's id is a 404.
  const json all = json::parse(listed->body);
  ASSERT_EQ(all["data"].size(), 1u);
  const std::string served = all["data"][0]["id"];
  auto hidden = client(srv.port()).Get("/v1/models", {{"Authorization", "Bearer k-model"}});
  ASSERT_TRUE(hidden);
  EXPECT_EQ(hidden->status, 200);
  EXPECT_EQ(json::parse(hidden->body)["object"], "list");
  EXPECT_TRUE(json::parse(hidden->body)["data"].empty()) << hidden->body;
  auto one = client(srv.port()).Get("/v1/models/" + served, {{"Authorization", "Bearer k-model"}});
  ASSERT_TRUE(one);
  EXPECT_EQ(one->status, 404);
  EXPECT_EQ(error_code(one), "model_not_found");
  auto mine = client(srv.port()).Get("/v1/models/" + served, {{"Authorization", "Bearer k-basic"}});
  ASSERT_TRUE(mine);
  EXPECT_EQ(mine->status, 200);
  EXPECT_EQ(json::parse(mine->body)["id"], served);
  // Larger than the whole tokens-per-minute limit: 429, no Retry-After (waiting cannot help).
  auto big = complete(srv.port(), "k-limits", {{"max_tokens", 2000}});
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 429);
  EXPECT_EQ(error_code(big), "rate_limit_exceeded");
  EXPECT_FALSE(big->has_header("Retry-After"));
  EXPECT_EQ(json::parse(big->body)["error"]["type"], "tokens");
}

// Without an auth file no request has a class: the latency histograms still count them
// under slo_class="none" (they stayed empty before), and no SLO is attained or missed.
TEST(Gateway, RequestsWithoutAClassFeedTheLatencyHistogramsOnly) {
  testing::ServerProcess srv(std::vector<std::string>{});
  ASSERT_TRUE(srv.ready()) << srv.error();
  for (int i = 0; i < 3; ++i) {
    auto r = complete(srv.port(), "", {{"max_tokens", 4}});
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
  }
  auto samples = testing::parse_prometheus_text(client(srv.port()).Get("/metrics")->body);
  EXPECT_EQ(testing::sum_samples(samples, "pdserve_gateway_requests_total", "slo_class", "none"), 3);
  EXPECT_EQ(testing::sum_samples(samples, "pdserve_gateway_time_to_first_token_seconds_count", "slo_class", "none"), 3);
  EXPECT_EQ(testing::sum_samples(samples, "pdserve_gateway_time_per_output_token_seconds_count", "slo_class", "none"), 3);
  EXPECT_GT(testing::sum_samples(samples, "pdserve_gateway_time_to_first_token_seconds_sum", "slo_class", "none"), 0);
  EXPECT_EQ(testing::sum_samples(samples, "pdserve_slo_attained_total", "slo_class", "none"), 0);
  EXPECT_EQ(testing::sum_samples(samples, "pdserve_slo_missed_total", "slo_class", "none"), 0);
}

TEST(Gateway, RequestsPerMinuteExactUnder32ConcurrentClientsAndRetryAfterIsRight) {
  AuthDir d;
  d.write(json{{"tenants", {{"t", json::object()}}},
               {"keys", {key("k10", "t", {{"limits", {{"requests_per_minute", 10}}}}),
                         key("k60", "t", {{"limits", {{"requests_per_minute", 60}}}})}}}
              .dump());
  testing::ServerProcess srv({"--auth-file", d.path()});
  ASSERT_TRUE(srv.ready()) << srv.error();
  std::atomic<int> go{0};
  std::vector<std::optional<httplib::Result>> results(32);
  std::vector<std::thread> th;
  for (int i = 0; i < 32; ++i)
    th.emplace_back([&, i] {
      while (go.load() == 0) std::this_thread::yield();
      results[i] = complete(srv.port(), "k10", {{"max_tokens", 1}});
    });
  const auto t0 = std::chrono::steady_clock::now();
  go = 1;
  for (auto& t : th) t.join();
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_LT(elapsed, 6.0) << "the bucket refills one request per 6 s: the count below would be off";
  int ok = 0, limited = 0;
  std::multiset<std::string> remaining;
  for (auto& ro : results) {
    ASSERT_TRUE(ro && *ro);
    httplib::Result& r = *ro;
    if (r->status == 200) {
      ++ok;
      remaining.insert(r->get_header_value("x-ratelimit-remaining-requests"));
    } else {
      ASSERT_EQ(r->status, 429) << r->body;
      ++limited;
      EXPECT_EQ(error_code(r), "rate_limit_exceeded");
      EXPECT_EQ(json::parse(r->body)["error"]["type"], "requests");
      EXPECT_EQ(r->get_header_value("x-ratelimit-remaining-requests"), "0");
      EXPECT_EQ(r->get_header_value("x-ratelimit-limit-requests"), "10");
      const int retry = std::stoi(r->get_header_value("Retry-After"));
      EXPECT_GE(retry, 1);
      EXPECT_LE(retry, 6);
    }
  }
  EXPECT_EQ(ok, 10);
  EXPECT_EQ(limited, 22);
  // Each admitted request saw its own count: 9, 8, ..., 0 once each.
  std::multiset<std::string> want;
  for (int i = 0; i < 10; ++i) want.insert(std::to_string(i));
  EXPECT_EQ(remaining, want);

  // Retry-After is when a retry succeeds: 60/min = one per second.
  // (Drained by sequential requests; under CPU contention they may take more than a
  // second, so the bucket refills meanwhile: send until the first 429.)
  int sent = 0;
  httplib::Result r = complete(srv.port(), "k60", {{"max_tokens", 1}});
  while (r && r->status == 200 && ++sent < 600) r = complete(srv.port(), "k60", {{"max_tokens", 1}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 429);
  EXPECT_GE(sent, 60);
  ASSERT_EQ(r->get_header_value("Retry-After"), "1");
  std::this_thread::sleep_for(std::chrono::seconds(1));  // the wait the server asked for
  EXPECT_EQ(complete(srv.port(), "k60", {{"max_tokens", 1}})->status, 200);
  // Refusals are counted by reason.
  auto samples = testing::parse_prometheus_text(client(srv.port()).Get("/metrics")->body);
  EXPECT_EQ(testing::sum_samples(samples, "pdserve_gateway_refused_total", "reason", "rate_limit_requests"), 22 + 1);
}

/// Streams one completion to its end; returns the number of tokens and whether [DONE] came.
/// `started` is raised at the first chunk.
std::pair<int, bool> stream_all(int port, const std::string& api_key, int max_tokens, std::atomic<int>& started) {
  json body = {{"prompt", "Once upon a time"}, {"max_tokens", max_tokens}, {"stream", true}, {"ignore_eos", true},
               {"temperature", 0}, {"stream_options", {{"include_usage", true}}}};
  std::string text;
  bool first = true;
  const int status = post_streaming(port, api_key, body, [&](const char* data, size_t n) {
    text.append(data, n);
    if (first) started++;
    first = false;
    return true;
  });
  if (status != 200) return {-1, false};
  int tokens = -1;
  const bool done = text.find("data: [DONE]") != std::string::npos;
  const size_t u = text.rfind("\"completion_tokens\":");
  if (u != std::string::npos) tokens = std::stoi(text.substr(u + 20));
  return {tokens, done};
}

TEST(Gateway, SighupReloadAddsAndRemovesKeysWhileRequestsStreamLosingNone) {
  AuthDir d;
  auto file = [&](std::vector<std::string> keys) {
    json ks = json::array();
    for (auto& k : keys) ks.push_back(key(k, "t"));
    return json{{"tenants", {{"t", json::object()}}}, {"keys", ks}}.dump(2);
  };
  d.write(file({"k-stay", "k-old"}));
  testing::ServerProcess srv({"--auth-file", d.path()});
  ASSERT_TRUE(srv.ready()) << srv.error();
  ASSERT_EQ(complete(srv.port(), "k-new")->status, 401);
  // Streams in flight with both keys while the file changes.
  std::atomic<bool> stop{false};
  std::atomic<int> streams_ok{0}, streams_bad{0}, started{0};
  std::vector<std::thread> th;
  for (const char* k : {"k-stay", "k-old", "k-stay"})
    th.emplace_back([&, k] {
      const auto [n, done] = stream_all(srv.port(), k, 480, started);
      (n == 480 && done ? streams_ok : streams_bad)++;
    });
  ASSERT_TRUE(testing::wait_until([&] { return started.load() == 3; }));
  std::thread steady([&] {  // a client whose key stays: never refused
    while (!stop) {
      auto r = complete(srv.port(), "k-stay", {{"max_tokens", 1}});
      if (!r || r->status != 200) streams_bad++;
    }
  });
  d.write(file({"k-stay", "k-new"}));
  ::kill(srv.pid(), SIGHUP);
  EXPECT_TRUE(testing::wait_until([&] { return complete(srv.port(), "k-new", {{"max_tokens", 1}})->status == 200; }));
  EXPECT_EQ(complete(srv.port(), "k-old")->status, 401);
  // A malformed file: the reload is refused (naming the line) and the old keys stay.
  d.write("{\n  \"tenants\": {\"t\": {}},\n  \"keys\": [oops]\n}\n");
  ::kill(srv.pid(), SIGHUP);
  EXPECT_TRUE(testing::wait_until([&] { return srv.log().find("auth file not reloaded") != std::string::npos; }));
  EXPECT_NE(srv.log().find("auth.json:3:"), std::string::npos) << srv.log();
  EXPECT_EQ(complete(srv.port(), "k-new")->status, 200);
  stop = true;
  steady.join();
  for (auto& t : th) t.join();
  EXPECT_EQ(streams_ok.load(), 3);
  EXPECT_EQ(streams_bad.load(), 0);
  EXPECT_TRUE(srv.running());
}

TEST(Gateway, TenantsShareNoPrefixCacheBlocksUnlessTheirGroupSaysSo) {
  AuthDir d;
  d.write(json{{"tenants", {{"a", {{"share_cache_group", "ac"}}}, {"b", json::object()}, {"c", {{"share_cache_group", "ac"}}}}},
               {"keys", {key("ka", "a"), key("ka2", "a"), key("kb", "b"), key("kc", "c")}}}
              .dump());
  testing::ServerProcess srv({"--auth-file", d.path()});
  ASSERT_TRUE(srv.ready()) << srv.error();
  const std::string prompt =
      "The little dog ran to the park and found a big red ball under the old tree near the pond where the ducks swim";
  auto cached = [&](const std::string& k) {
    auto r = complete(srv.port(), k, {{"prompt", prompt}, {"max_tokens", 1}});
    EXPECT_EQ(r->status, 200) << r->body;
    auto j = json::parse(r->body);
    EXPECT_GT(j["usage"]["prompt_tokens"].get<int>(), 32);
    return j["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
  };
  EXPECT_EQ(cached("kb"), 0);
  EXPECT_GT(cached("kb"), 0) << "a tenant reuses its own blocks";
  EXPECT_EQ(cached("ka"), 0) << "tenant a sees none of tenant b's blocks";
  EXPECT_GT(cached("ka2"), 0) << "keys of one tenant share";
  EXPECT_GT(cached("kc"), 0) << "tenants a and c share the group 'ac'";
  // A request's own cache_salt splits further within the tenant.
  auto r = complete(srv.port(), "ka", {{"prompt", prompt}, {"max_tokens", 1}, {"cache_salt", "x"}});
  EXPECT_EQ(json::parse(r->body)["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
}

TEST(Gateway, PastTheQueueBoundRequestsGet503AtOnceAndTheServerKeepsServing) {
  AuthDir d;
  // The hog below must hold the seat past max_queue_ms: 4,000 tokens take >= 3.6 s at the
  // model's bare 1-thread decode rate on a Zen 5 (~1,100 tok/s, bench-model), so a 1 s
  // queue bound leaves a wide margin. (3,000 tokens against a 4 s bound flaked once the
  // sampler got faster: the hog finished and the queued requests were served.)
  d.write(json{{"classes", {{"low", {{"max_queue", 2}, {"max_queue_ms", 1000}}}}},
               {"tenants", {{"t", {{"slo_class", "low"}, {"allowed_slo_classes", {"high"}}}}}},
               {"keys", {key("k", "t")}}}
              .dump());
  testing::ServerProcess::Options o;
  o.model = "../shared/models/synth-llama-small-q4_0.gguf";
  o.extra_args = {"--auth-file", d.path(), "--max-seqs", "1", "--threads", "1"};
  testing::ServerProcess srv(o);
  ASSERT_TRUE(srv.ready()) << srv.error();
  // One long low stream takes the only seat; it is cut when the test is done.
  std::atomic<bool> done{false}, started{false}, hog_ended{false};
  std::thread hog([&] {
    json body = {{"prompt", "Once upon a time"}, {"max_tokens", 4000}, {"stream", true}, {"ignore_eos", true}};
    post_streaming(srv.port(), "k", body, [&](const char*, size_t) {
      started = true;
      return !done.load();
    });
    hog_ended = true;
  });
  ASSERT_TRUE(testing::wait_until([&] { return started.load(); }, std::chrono::seconds(30)));
  // Two more low requests queue behind it (the class bound) ...
  std::vector<std::thread> queued;
  std::atomic<int> queued_status[2] = {0, 0};
  std::string queued_code[2];
  for (int i = 0; i < 2; ++i)
    queued.emplace_back([&, i] {
      auto r = complete(srv.port(), "k", {{"max_tokens", 2}});
      queued_status[i] = r ? r->status : -1;
      if (r) queued_code[i] = error_code(r);
    });
  auto metric = [&](const char* name) {
    return testing::sum_samples(testing::parse_prometheus_text(client(srv.port()).Get("/metrics")->body), name);
  };
  ASSERT_TRUE(testing::wait_until([&] { return metric("pdserve_requests_waiting") == 2; }, std::chrono::seconds(30)));
  // ... and the next low one is refused at once.
  const auto t0 = std::chrono::steady_clock::now();
  auto r = complete(srv.port(), "k", {{"max_tokens", 2}});
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503) << r->body;
  EXPECT_EQ(error_code(r), "server_overloaded");
  EXPECT_EQ(r->get_header_value("Retry-After"), "1");
  EXPECT_LT(s, 1.0);
  // The high class is not bounded: it preempts the low stream and is served.
  auto h = complete(srv.port(), "k", {{"max_tokens", 2}, {"slo_class", "high"}});
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200) << h->body;
  // The two queued low requests wait at most the class's max_queue_ms (the hog holds the
  // seat far longer), then get 503 too.
  for (auto& t : queued) t.join();
  EXPECT_FALSE(hog_ended.load()) << "precondition: the hog must hold the seat past max_queue_ms";
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(queued_status[i].load(), 503);
    EXPECT_EQ(queued_code[i], "server_overloaded");
  }
  done = true;
  hog.join();
  EXPECT_EQ(complete(srv.port(), "k", {{"max_tokens", 2}})->status, 200) << "low served again";
  auto samples = testing::parse_prometheus_text(client(srv.port()).Get("/metrics")->body);
  EXPECT_EQ(testing::sum_samples(samples, "pdserve_gateway_refused_total", "reason", "queue_full"), 1);
  EXPECT_EQ(testing::sum_samples(samples, "pdserve_gateway_refused_total", "reason", "queue_timeout"), 2);
  EXPECT_GE(testing::sum_samples(samples, "pdserve_slo_attained_total", "slo_class", "high") +
                testing::sum_samples(samples, "pdserve_slo_missed_total", "slo_class", "high"),
            1);
  EXPECT_EQ(testing::sum_samples(samples, "pdserve_gateway_requests_total", "slo_class", "high"), 1);
  EXPECT_EQ(testing::sum_samples(samples, "pdserve_class_queue_time_seconds_count", "slo_class", "high"), 1);
  EXPECT_EQ(testing::sum_samples(samples, "pdserve_gateway_time_to_first_token_seconds_count", "slo_class", "high"), 1);
}

TEST(Gateway, TheRouterAppliesTheSameKeysLimitsNamespacesAndClasses) {
  AuthDir d;
  d.write(json{{"tenants", {{"a", {{"allowed_slo_classes", {"high"}}}}, {"b", json::object()}}},
               {"keys", {key("ka", "a", {{"slo_class", "low"}, {"limits", {{"requests_per_minute", 6}}}}), key("kb", "b")}}}
              .dump());
  testing::ClusterOptions o;
  o.router_args = {"--auth-file", d.path()};
  testing::Cluster cluster(o);
  ASSERT_TRUE(cluster.ready()) << cluster.error();
  const int port = cluster.router_port();
  EXPECT_EQ(complete(port, "")->status, 401);
  EXPECT_EQ(complete(port, "kb", {{"slo_class", "high"}})->status, 400) << "b may not pick high";
  const std::string prompt =
      "The little dog ran to the park and found a big red ball under the old tree near the pond where the ducks swim";
  auto run = [&](const std::string& k, json extra) {
    extra["prompt"] = prompt;
    extra["max_tokens"] = 8;
    auto r = complete(port, k, extra);
    EXPECT_EQ(r->status, 200) << r->body;
    return json::parse(r->body);
  };
  const json low = run("ka", json::object());
  const json high = run("ka", {{"slo_class", "high"}});
  EXPECT_EQ(low["choices"][0]["text"], high["choices"][0]["text"]) << "the class changes the order, not the tokens";
  EXPECT_GT(high["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0);
  EXPECT_EQ(run("kb", json::object())["usage"]["prompt_tokens_details"]["cached_tokens"], 0)
      << "tenant b sees none of a's blocks on the decode worker";
  // 6 per minute: 2 used above, 4 more, then 429.
  for (int i = 0; i < 4; ++i) EXPECT_EQ(complete(port, "ka")->status, 200) << i;
  auto r = complete(port, "ka");
  EXPECT_EQ(r->status, 429);
  EXPECT_EQ(r->get_header_value("x-ratelimit-remaining-requests"), "0");
  // One request per 10 s, partly refilled while the requests above ran.
  const int retry = std::stoi(r->get_header_value("Retry-After"));
  EXPECT_GE(retry, 1);
  EXPECT_LE(retry, 10);
}

TEST(Gateway, AMalformedAuthFileRefusesToStartAndNamesTheLine) {
  AuthDir d;
  d.write("{\n  \"tenants\": {\"t\": {}},\n  \"keys\": [\n    {\"key_sha256\": \"" + gateway::hash_api_key("k") +
          "\", \"tenant\": \"nobody\"}\n  ]\n}\n");
  const std::string cmd = testing::pdserve_bin() + " serve -m " + testing::kStoriesModel + " --port 0 --auth-file " +
                          d.path() + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_TRUE(p);
  std::string out;
  char buf[512];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int rc = ::pclose(p);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("auth.json:4:"), std::string::npos) << out;
  EXPECT_NE(out.find("unknown tenant 'nobody'"), std::string::npos) << out;
  // hash-key prints what the file stores.
  FILE* h = ::popen((testing::pdserve_bin() + " hash-key secret").c_str(), "r");
  ASSERT_TRUE(h);
  std::string hex(64, '\0');
  ASSERT_EQ(std::fread(hex.data(), 1, 64, h), 64u);
  ::pclose(h);
  EXPECT_EQ(hex, gateway::hash_api_key("secret"));
}

}  // namespace
}  // namespace pdserve
