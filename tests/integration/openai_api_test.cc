// The OpenAI API of a real `pdserve serve` process on stories260K: shapes, greedy
// determinism (JSON = stream = concurrent), seeds, stop strings, logprobs, errors,
// KV blocks freed after client disconnects, API keys and SIGTERM shutdown.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "support/pool_free.h"
#include "support/raw_http.h"
#include "support/server_process.h"
#include "support/wait.h"

namespace {

using json = nlohmann::json;
using pdserve::testing::ServerProcess;
using namespace std::chrono_literals;

const char* kPrompt = "Once upon a time, there was a little";

class OpenAiApi : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new ServerProcess(); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(server_->ready()) << server_->error(); }

  static json post(const std::string& path, const json& body, int expect_status = 200) {
    auto c = server_->client();
    auto res = c.Post(path.c_str(), body.dump(), "application/json");
    EXPECT_TRUE(res) << "no response for " << body.dump();
    if (!res) return json();
    EXPECT_EQ(res->status, expect_status) << res->body;
    return json::parse(res->body);
  }

  /// POST with "stream": true; returns the parsed chunks (checks the final [DONE]).
  static std::vector<json> post_stream(const std::string& path, json body) {
    body["stream"] = true;
    auto c = server_->client();
    auto res = c.Post(path.c_str(), body.dump(), "application/json");
    std::vector<json> chunks;
    EXPECT_TRUE(res);
    if (!res) return chunks;
    EXPECT_EQ(res->status, 200) << res->body;
    EXPECT_EQ(res->get_header_value("Content-Type"), "text/event-stream");
    const std::string& b = res->body;
    size_t pos = 0;
    bool done = false;
    while (pos < b.size()) {
      size_t end = b.find("\n\n", pos);
      if (end == std::string::npos) end = b.size();
      const std::string ev = b.substr(pos, end - pos);
      pos = end + 2;
      if (ev.rfind("data: ", 0) != 0) continue;
      const std::string data = ev.substr(6);
      EXPECT_FALSE(done) << "data after [DONE]";
      if (data == "[DONE]") {
        done = true;
      } else {
        chunks.push_back(json::parse(data));
      }
    }
    EXPECT_TRUE(done) << b;
    return chunks;
  }

  static json health() {
    auto c = server_->client();
    auto res = c.Get("/health");
    return res && res->status == 200 ? json::parse(res->body) : json();
  }

  /// Waits until no request runs and no KV block is referenced.
  static bool wait_idle() { return pdserve::testing::wait_pool_free(server_->port(), 15s); }

  static ServerProcess* server_;
};

ServerProcess* OpenAiApi::server_ = nullptr;

TEST_F(OpenAiApi, ModelsAndHealth) {
  auto c = server_->client();
  auto res = c.Get("/v1/models");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  json m = json::parse(res->body);
  ASSERT_EQ(m["data"].size(), 1u);
  EXPECT_EQ(m["data"][0]["id"], "stories260K");
  EXPECT_EQ(m["data"][0]["max_model_len"], 512);
  json h = health();
  EXPECT_EQ(h["status"], "ok");
  EXPECT_GT(h["kv_blocks_total"].get<int64_t>(), 0);
  EXPECT_EQ(h["kv_blocks_free"].get<int64_t>() + h["kv_blocks_used"].get<int64_t>(),
            h["kv_blocks_total"].get<int64_t>());
}

TEST_F(OpenAiApi, GreedyCompletionIsDeterministicAndMatchesStream) {
  const json req = {{"model", "stories260K"}, {"prompt", kPrompt}, {"max_tokens", 24}, {"temperature", 0}};
  json a = post("/v1/completions", req);
  json b = post("/v1/completions", req);
  ASSERT_EQ(a["choices"].size(), 1u);
  const std::string text = a["choices"][0]["text"];
  EXPECT_FALSE(text.empty());
  EXPECT_EQ(b["choices"][0]["text"], text);
  EXPECT_EQ(a["object"], "text_completion");
  const std::string finish = a["choices"][0]["finish_reason"];
  EXPECT_TRUE(finish == "length" || finish == "stop") << finish;
  if (finish == "length") {
    EXPECT_EQ(a["usage"]["completion_tokens"], 24);
  }
  EXPECT_GT(a["usage"]["prompt_tokens"].get<int>(), 1);
  EXPECT_EQ(a["usage"]["total_tokens"].get<int>(),
            a["usage"]["prompt_tokens"].get<int>() + a["usage"]["completion_tokens"].get<int>());

  auto chunks = post_stream("/v1/completions", req);
  ASSERT_FALSE(chunks.empty());
  std::string streamed;
  for (const auto& ch : chunks) streamed += ch["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(streamed, text);
  EXPECT_EQ(chunks.back()["choices"][0]["finish_reason"], finish);
  EXPECT_TRUE(wait_idle());
}

TEST_F(OpenAiApi, ConcurrentGreedyRequestsMatchALoneRun) {
  const json req = {{"prompt", kPrompt}, {"max_tokens", 32}, {"temperature", 0}};
  const std::string lone = post("/v1/completions", req)["choices"][0]["text"];
  constexpr int kClients = 8;
  std::vector<std::string> texts(kClients);
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      auto c = server_->client();
      json r = req;
      r["stream"] = i % 2 == 1;
      auto res = c.Post("/v1/completions", r.dump(), "application/json");
      if (!res || res->status != 200) return;
      if (!r["stream"].get<bool>()) {
        texts[i] = json::parse(res->body)["choices"][0]["text"];
        return;
      }
      std::string acc;
      size_t pos = 0;
      const std::string& b = res->body;
      while ((pos = b.find("data: ", pos)) != std::string::npos) {
        size_t end = b.find("\n\n", pos);
        const std::string data = b.substr(pos + 6, end - pos - 6);
        if (data != "[DONE]") acc += json::parse(data)["choices"][0]["text"].get<std::string>();
        pos = end;
      }
      texts[i] = acc;
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kClients; ++i) EXPECT_EQ(texts[i], lone) << "client " << i;
  EXPECT_TRUE(wait_idle());
}

TEST_F(OpenAiApi, SeededSamplingIsReproducible) {
  const json req = {{"prompt", kPrompt}, {"max_tokens", 24}, {"temperature", 1.0}, {"seed", 42}};
  json a = post("/v1/completions", req);
  json b = post("/v1/completions", req);
  EXPECT_EQ(a["choices"][0]["text"], b["choices"][0]["text"]);

  json n2 = post("/v1/completions", {{"prompt", kPrompt}, {"max_tokens", 8}, {"n", 2}, {"seed", 42}});
  ASSERT_EQ(n2["choices"].size(), 2u);
  EXPECT_EQ(n2["choices"][0]["index"], 0);
  EXPECT_EQ(n2["choices"][1]["index"], 1);
  // Choice 0 of n=2 uses the request's seed: the same as the n=1 run's first 8 tokens.
  json one = post("/v1/completions", {{"prompt", kPrompt}, {"max_tokens", 8}, {"seed", 42}});
  EXPECT_EQ(n2["choices"][0]["text"], one["choices"][0]["text"]);
}

TEST_F(OpenAiApi, StopString) {
  json full = post("/v1/completions", {{"prompt", kPrompt}, {"max_tokens", 40}, {"temperature", 0}});
  const std::string text = full["choices"][0]["text"];
  ASSERT_GE(text.size(), 12u);
  const std::string stop = text.substr(6, 4);
  const size_t first = text.find(stop);
  json cut = post("/v1/completions",
                  {{"prompt", kPrompt}, {"max_tokens", 40}, {"temperature", 0}, {"stop", json::array({stop})}});
  EXPECT_EQ(cut["choices"][0]["text"], text.substr(0, first));
  EXPECT_EQ(cut["choices"][0]["finish_reason"], "stop");

  auto chunks = post_stream("/v1/completions",
                            {{"prompt", kPrompt}, {"max_tokens", 40}, {"temperature", 0}, {"stop", stop}});
  std::string streamed;
  for (const auto& ch : chunks) streamed += ch["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(streamed, text.substr(0, first));
}

TEST_F(OpenAiApi, CompletionLogprobs) {
  json j = post("/v1/completions", {{"prompt", kPrompt}, {"max_tokens", 10}, {"temperature", 0}, {"logprobs", 5}});
  const json& lp = j["choices"][0]["logprobs"];
  ASSERT_TRUE(lp.is_object());
  const size_t n = lp["tokens"].size();
  EXPECT_EQ(n, static_cast<size_t>(j["usage"]["completion_tokens"].get<int>()));
  ASSERT_EQ(lp["token_logprobs"].size(), n);
  ASSERT_EQ(lp["top_logprobs"].size(), n);
  ASSERT_EQ(lp["text_offset"].size(), n);
  std::string joined;
  for (size_t i = 0; i < n; ++i) {
    const double chosen = lp["token_logprobs"][i];
    EXPECT_LE(chosen, 0.0);
    EXPECT_GE(lp["top_logprobs"][i].size(), 1u);
    EXPECT_LE(lp["top_logprobs"][i].size(), 5u);
    double best = -1e30;
    for (const auto& [tok, v] : lp["top_logprobs"][i].items()) best = std::max(best, v.get<double>());
    EXPECT_NEAR(chosen, best, 1e-5) << "greedy picks the most likely token (step " << i << ")";
    EXPECT_EQ(lp["text_offset"][i], static_cast<int>(joined.size()));
    joined += lp["tokens"][i].get<std::string>();
  }
  EXPECT_EQ(joined, j["choices"][0]["text"]);
}

TEST_F(OpenAiApi, ChatJsonStreamAndLogprobs) {
  const json messages = json::array({{{"role", "user"}, {"content", "Tell me a story."}}});
  const json req = {{"messages", messages}, {"max_tokens", 20}, {"temperature", 0}};
  json j = post("/v1/chat/completions", req);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  const std::string content = j["choices"][0]["message"]["content"];
  EXPECT_FALSE(content.empty());

  auto chunks = post_stream("/v1/chat/completions", req);
  ASSERT_GE(chunks.size(), 2u);
  EXPECT_EQ(chunks.front()["choices"][0]["delta"]["role"], "assistant");
  std::string streamed;
  for (size_t i = 1; i + 1 < chunks.size(); ++i) {
    streamed += chunks[i]["choices"][0]["delta"].value("content", "");
    EXPECT_TRUE(chunks[i]["choices"][0]["finish_reason"].is_null());
  }
  EXPECT_EQ(streamed, content);
  EXPECT_EQ(chunks.back()["choices"][0]["finish_reason"], j["choices"][0]["finish_reason"]);
  EXPECT_TRUE(chunks.back()["choices"][0]["delta"].empty());

  json lp = post("/v1/chat/completions",
                 {{"messages", messages}, {"max_tokens", 8}, {"temperature", 0}, {"logprobs", true}, {"top_logprobs", 3}});
  const json& entries = lp["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(entries.size(), static_cast<size_t>(lp["usage"]["completion_tokens"].get<int>()));
  std::string bytes;
  for (const auto& e : entries) {
    EXPECT_LE(e["top_logprobs"].size(), 3u);
    for (const auto& b : e["bytes"]) bytes.push_back(static_cast<char>(b.get<int>()));
  }
  EXPECT_EQ(bytes, lp["choices"][0]["message"]["content"]);
  EXPECT_TRUE(wait_idle());
}

TEST_F(OpenAiApi, ErrorsKeepTheServerServing) {
  auto c = server_->client();
  auto bad = c.Post("/v1/completions", "{not json", "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_TRUE(json::parse(bad->body)["error"]["message"].is_string());

  json model = post("/v1/completions", {{"prompt", "x"}, {"model", "gpt-4"}}, 404);
  EXPECT_EQ(model["error"]["code"], "model_not_found");
  post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 0}}, 400);
  post("/v1/completions", {{"prompt", "x"}, {"top_p", 0}}, 400);

  std::string long_prompt;
  for (int i = 0; i < 700; ++i) long_prompt += "story ";
  json too_long = post("/v1/completions", {{"prompt", long_prompt}}, 400);
  EXPECT_EQ(too_long["error"]["param"], "prompt");
  json chat_too_long = post("/v1/chat/completions",
                            {{"messages", json::array({{{"role", "user"}, {"content", long_prompt}}})}}, 400);
  EXPECT_EQ(chat_too_long["error"]["param"], "messages");

  json ok = post("/v1/completions", {{"prompt", kPrompt}, {"max_tokens", 4}});
  EXPECT_EQ(ok["choices"].size(), 1u);
  EXPECT_TRUE(wait_idle());
}

// The kv_budget extension (token eviction): below the server's minimum (--kv-sinks +
// --kv-recent), above the context length (this server has no --kv-budget), or not a positive
// integer => 400 naming the field; a valid one generates.
TEST_F(OpenAiApi, KvBudgetFieldIsCheckedAndHonoured) {
  for (const json& bad : {json(3), json(0), json("16"), json(100000), json(int64_t{4294967396})}) {
    json r = post("/v1/completions", {{"prompt", kPrompt}, {"max_tokens", 4}, {"kv_budget", bad}}, 400);
    EXPECT_EQ(r["error"]["param"], "kv_budget") << bad.dump();
    // The message gives the value sent, not a clamped one.
    if (bad.is_number()) {
      EXPECT_NE(r["error"]["message"].get<std::string>().find(bad.dump()), std::string::npos) << r.dump();
    }
  }
  // Above the context length (512, /v1/models' max_model_len): the message names that number.
  json over = post("/v1/completions", {{"prompt", kPrompt}, {"max_tokens", 4}, {"kv_budget", 513}}, 400);
  EXPECT_NE(over["error"]["message"].get<std::string>().find("context length, 512"), std::string::npos) << over.dump();
  post("/v1/completions", {{"prompt", kPrompt}, {"max_tokens", 4}, {"kv_budget", 512}});
  json ok = post("/v1/completions", {{"prompt", kPrompt}, {"max_tokens", 60}, {"ignore_eos", true}, {"kv_budget", 16}});
  EXPECT_EQ(ok["usage"]["completion_tokens"], 60);
  EXPECT_TRUE(wait_idle());
}

// Disconnects are tested in serve_e2e_test.cc (on a model slow enough that only the
// abort can free the blocks in time) and, for the abort call itself, in server_http_test.cc.

TEST(OpenAiApiProcess, ApiKeyAndSigterm) {
  ServerProcess srv({"--api-key", "test-key"});
  ASSERT_TRUE(srv.ready()) << srv.error();
  {  // Expect: 100-continue without the key: the 401 comes before the body is invited.
    pdserve::testing::RawConnection raw(srv.port());
    ASSERT_TRUE(raw.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 20\r\n\r\n"));
    const std::string got = raw.read_all(std::chrono::milliseconds(3000));
    EXPECT_EQ(pdserve::testing::http_status(got), 401) << got;
    EXPECT_EQ(pdserve::testing::http_responses(got), 1u) << got;
    EXPECT_TRUE(raw.peer_closed()) << got;
  }
  auto c = srv.client();
  auto no_key = c.Get("/v1/models");
  ASSERT_TRUE(no_key);
  EXPECT_EQ(no_key->status, 401);
  EXPECT_EQ(json::parse(no_key->body)["error"]["code"], "invalid_api_key");
  auto ok = c.Get("/v1/models", {{"Authorization", "Bearer test-key"}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  // A POST refused for its key is answered before its body is read: the connection closes,
  // so a request inside that body is never read as the next one (it was served before).
  {
    const std::string inner = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    pdserve::testing::RawConnection raw(srv.port());
    ASSERT_TRUE(raw.send(pdserve::testing::http_post("/v1/completions", inner)));
    const std::string got = raw.read_all(std::chrono::milliseconds(3000));
    EXPECT_EQ(pdserve::testing::http_status(got), 401) << got;
    EXPECT_EQ(pdserve::testing::http_responses(got), 1u) << got;
    EXPECT_TRUE(raw.peer_closed()) << got;
  }
  EXPECT_NE(srv.log().find("listening on http://127.0.0.1:" + std::to_string(srv.port())), std::string::npos)
      << srv.log();

  // SIGTERM: a clean exit, promptly.
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(srv.stop(10s), 0) << srv.log();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
}

TEST(OpenAiApiProcess, BusyPortFailsToStart) {
  ServerProcess first;
  ASSERT_TRUE(first.ready()) << first.error();
  const ServerProcess::Options o;  // binary and model paths
  // Start a second server by hand on the same port: it must exit non-zero.
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int devnull = ::open("/dev/null", O_WRONLY);
    ::dup2(devnull, STDOUT_FILENO);
    ::dup2(devnull, STDERR_FILENO);
    const std::string port = std::to_string(first.port());
    ::execl(o.binary.c_str(), o.binary.c_str(), "serve", "--model", o.model.c_str(), "--port", port.c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  bool exited = pdserve::testing::wait_until([&] { return ::waitpid(pid, &status, WNOHANG) == pid; }, 30s);
  if (!exited) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  EXPECT_TRUE(exited) << "a second server on a busy port kept running";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0);
}

}  // namespace
