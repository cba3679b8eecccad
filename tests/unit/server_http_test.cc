// The HTTP server over real loopback sockets, with a FakeEngine behind it: JSON and SSE
// shapes, errors (and that the server keeps serving after them), client disconnects,
// shutdown, API keys and concurrent clients.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "server/generation_handler.h"
#include "server/http_server.h"
#include "support/fake_engine.h"
#include "support/raw_http.h"
#include "support/wait.h"
#include "tokenizer/chat_template.h"

namespace pdserve::server {
namespace {

using json = nlohmann::json;
using testing::FakeEngine;
using testing::FakeEngineOptions;
using testing::FakeTokenizer;
using namespace std::chrono_literals;

/// An HttpServer on a free loopback port, running on its own thread.
class TestServer {
 public:
  explicit TestServer(FakeEngineOptions opts = {}, std::string api_key = "") : engine(std::move(opts)) {
    ServerConfig cfg;
    cfg.host = "127.0.0.1";
    cfg.port = 0;
    cfg.http_threads = 16;
    cfg.api_key = std::move(api_key);
    server = std::make_unique<HttpServer>(engine, cfg);
    thread = std::thread([this] { rc = server->run(); });
    testing::wait_until([this] { return server->port() > 0 || rc.load() >= 0; }, 10s);
    port = server->port();
  }
  ~TestServer() { shutdown(); }

  void shutdown() {
    if (thread.joinable()) {
      server->stop();
      thread.join();
    }
  }

  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(20, 0);
    c.set_write_timeout(20, 0);
    return c;
  }

  httplib::Result post(const std::string& path, const json& body,
                       const httplib::Headers& headers = {}) const {
    auto c = client();
    return c.Post(path.c_str(), headers, body.dump(), "application/json");
  }

  FakeEngine engine;
  std::unique_ptr<HttpServer> server;
  std::thread thread;
  std::atomic<int> rc{-1};
  int port = 0;
};

/// The `data:` payloads of an SSE body, in order.
std::vector<std::string> sse_payloads(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) end = body.size();
    std::string event = body.substr(pos, end - pos);
    if (event.rfind("data: ", 0) == 0) out.push_back(event.substr(6));
    pos = end + 2;
  }
  return out;
}

/// Parsed JSON chunks of an SSE body; checks the stream ends with exactly one [DONE].
std::vector<json> sse_chunks(const std::string& body) {
  auto payloads = sse_payloads(body);
  std::vector<json> out;
  EXPECT_FALSE(payloads.empty());
  if (payloads.empty()) return out;
  EXPECT_EQ(payloads.back(), "[DONE]") << body;
  for (size_t i = 0; i + 1 < payloads.size(); ++i) {
    EXPECT_NE(payloads[i], "[DONE]");
    out.push_back(json::parse(payloads[i]));
  }
  return out;
}

void expect_api_error(const httplib::Result& res, int status, const std::string& param_or_empty,
                      const std::string& msg_part) {
  ASSERT_TRUE(res) << "no response";
  EXPECT_EQ(res->status, status) << res->body;
  EXPECT_EQ(res->get_header_value("Content-Type"), "application/json");
  json j = json::parse(res->body);
  ASSERT_TRUE(j.contains("error")) << res->body;
  const json& e = j["error"];
  EXPECT_TRUE(e["message"].is_string());
  EXPECT_TRUE(e["type"].is_string());
  EXPECT_TRUE(e.contains("param"));
  EXPECT_TRUE(e.contains("code"));
  if (param_or_empty.empty()) {
    EXPECT_TRUE(e["param"].is_null()) << res->body;
  } else {
    EXPECT_EQ(e["param"], param_or_empty) << res->body;
  }
  EXPECT_NE(e["message"].get<std::string>().find(msg_part), std::string::npos) << res->body;
}

/// What the fake engine answers to a chat request: the rendered prompt's bytes without
/// the control tokens.
std::string expected_chat_echo(const FakeTokenizer& tok, const json& messages) {
  std::vector<tokenizer::ChatMessage> msgs;
  for (const auto& m : messages) msgs.push_back({m["role"], m["content"]});
  const std::string rendered =
      tokenizer::render_chat(tokenizer::ChatTemplateKind::Plain, msgs, true, "<s>", "</s>");
  std::string out;
  for (int32_t id : tok.encode(rendered, false, true)) out += tok.token_to_piece(id);
  return out;
}

// ---- informational routes ----------------------------------------------------------------

TEST(ServerHttp, HealthAndModels) {
  TestServer s;
  ASSERT_GT(s.port, 0);
  auto c = s.client();
  auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  json h = json::parse(health->body);
  EXPECT_EQ(h["status"], "ok");
  EXPECT_EQ(h["kv_blocks_total"], 64);
  for (const char* k : {"kv_blocks_used", "kv_blocks_free", "requests_running", "requests_waiting"}) {
    EXPECT_TRUE(h[k].is_number_integer()) << k;
  }
  // An engine that cannot serve (a router without a healthy worker) makes /health 503.
  s.engine.set_not_ready("no healthy decode worker");
  auto down = c.Get("/health");
  ASSERT_TRUE(down);
  EXPECT_EQ(down->status, 503);
  EXPECT_EQ(json::parse(down->body)["status"], "unavailable");
  EXPECT_EQ(json::parse(down->body)["reason"], "no healthy decode worker");
  // ... and a generation request gets a 503 server error (clients retry those), not a 400.
  auto refused = c.Post("/v1/completions", R"({"prompt":"abc","max_tokens":2})", "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 503);
  EXPECT_EQ(json::parse(refused->body)["error"]["type"], "server_error");
  EXPECT_NE(json::parse(refused->body)["error"]["message"].get<std::string>().find("no healthy decode worker"), std::string::npos);
  EXPECT_EQ(s.engine.submissions().size(), 0u);
  s.engine.set_not_ready("");
  auto up = c.Get("/health");
  ASSERT_TRUE(up);
  EXPECT_EQ(up->status, 200);

  auto models = c.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 200);
  json m = json::parse(models->body);
  EXPECT_EQ(m["object"], "list");
  ASSERT_EQ(m["data"].size(), 1u);
  EXPECT_EQ(m["data"][0]["id"], "fake-model");
  EXPECT_EQ(m["data"][0]["object"], "model");
  EXPECT_EQ(m["data"][0]["owned_by"], "pdserve");
  EXPECT_EQ(m["data"][0]["max_model_len"], 256);
  EXPECT_TRUE(m["data"][0]["created"].is_number_integer());

  auto one = c.Get("/v1/models/fake-model");
  ASSERT_TRUE(one);
  EXPECT_EQ(one->status, 200);
  EXPECT_EQ(json::parse(one->body)["id"], "fake-model");
  expect_api_error(c.Get("/v1/models/other"), 404, "model", "does not exist");
}

// A browser's preflight for the openai package, which adds its own X-Stainless-* headers to
// every request: each header asked for is allowed (only Authorization and Content-Type were,
// so the browser refused the real request).
TEST(ServerHttp, CorsPreflightAllowsTheHeadersTheClientAsksFor) {
  TestServer s;
  auto c = s.client();
  const std::string asked = "authorization,content-type,openai-organization,x-stainless-os,x-stainless-retry-count";
  auto pre = c.Options("/v1/chat/completions", {{"Origin", "http://localhost:3000"},
                                                {"Access-Control-Request-Method", "POST"},
                                                {"Access-Control-Request-Headers", asked}});
  ASSERT_TRUE(pre);
  EXPECT_EQ(pre->status, 204);
  EXPECT_EQ(pre->get_header_value("Access-Control-Allow-Headers"), asked);
  EXPECT_NE(pre->get_header_value("Access-Control-Allow-Methods").find("POST"), std::string::npos);
  auto plain = c.Options("/v1/models");
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->get_header_value("Access-Control-Allow-Headers"), "Authorization, Content-Type");
  // Not a list of header names: not echoed.
  auto odd = c.Options("/v1/models", {{"Access-Control-Request-Headers", "x-a;<script>"}});
  ASSERT_TRUE(odd);
  EXPECT_EQ(odd->get_header_value("Access-Control-Allow-Headers"), "Authorization, Content-Type");
}

// GET /engine/steps of an engine that runs no model (the router; the fake here has no KV
// layout either): a 404 that says where the steps are, not an empty layout that
// `pdserve calibrate` would then refuse with a confusing mismatch.
TEST(ServerHttp, EngineStepsOfAServerWithoutAModelIs404) {
  TestServer s;
  auto c = s.client();
  expect_api_error(c.Get("/engine/steps"), 404, "", "runs no model (a router)");
}

// ---- /v1/completions -----------------------------------------------------------------------

TEST(ServerHttp, CompletionJson) {
  TestServer s;
  auto res = s.post("/v1/completions", {{"prompt", "hello world"}, {"max_tokens", 5}, {"model", "fake-model"}});
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->get_header_value("Content-Type"), "application/json");
  json j = json::parse(res->body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  EXPECT_EQ(j["model"], "fake-model");
  EXPECT_TRUE(j["created"].is_number_integer());
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["choices"][0]["text"], "hello");
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 12);  // BOS + 11 bytes
  EXPECT_EQ(j["usage"]["completion_tokens"], 5);
  EXPECT_EQ(j["usage"]["total_tokens"], 17);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 0);

  auto subs = s.engine.submissions();
  ASSERT_EQ(subs.size(), 1u);
  EXPECT_EQ(subs[0].prompt.front(), FakeTokenizer::kBos);
  EXPECT_EQ(subs[0].prompt.size(), 12u);
  EXPECT_EQ(subs[0].params.max_tokens, 5);
  EXPECT_EQ(subs[0].params.top_logprobs, -1);
}

// `curl -d '{...}'` without -H labels JSON as form data: the body is still read as JSON,
// whatever its size (cpp-httplib would otherwise cap form bodies at 8 KiB with a 413).
TEST(ServerHttp, JsonBodySentAsFormDataOfAnySize) {
  FakeEngineOptions opts;
  opts.context_length = 1 << 16;
  TestServer s(opts);
  const std::string prompt(20000, 'a');
  auto c = s.client();
  auto res = c.Post("/v1/completions", json{{"prompt", prompt}, {"max_tokens", 2}}.dump(), "application/x-www-form-urlencoded");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(json::parse(res->body)["usage"]["prompt_tokens"], 20001);
}

TEST(ServerHttp, CompletionDefaultsStopAndEos) {
  TestServer s;
  s.engine.set_cached_tokens(3);
  // Default max_tokens is 16.
  auto res = s.post("/v1/completions", {{"prompt", std::string(40, 'x')}});
  ASSERT_TRUE(res);
  json j = json::parse(res->body);
  EXPECT_EQ(j["choices"][0]["text"], std::string(16, 'x'));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 3);
  EXPECT_EQ(s.engine.submissions().back().params.max_tokens, 16);

  // End of the echo = EOS: finish_reason "stop".
  res = s.post("/v1/completions", {{"prompt", "hi"}, {"max_tokens", 10}, {"temperature", 0}});
  j = json::parse(res->body);
  EXPECT_EQ(j["choices"][0]["text"], "hi");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_FLOAT_EQ(s.engine.submissions().back().params.temperature, 0.f);

  // Stop strings reach the engine; the stop text is not returned.
  res = s.post("/v1/completions", {{"prompt", "abc END def"}, {"max_tokens", 50}, {"stop", "END"}});
  j = json::parse(res->body);
  EXPECT_EQ(j["choices"][0]["text"], "abc ");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");

  // Token-id prompts are sent as given (no BOS added).
  const int32_t a = FakeTokenizer::kByteBase + 'a', b = FakeTokenizer::kByteBase + 'b';
  res = s.post("/v1/completions", {{"prompt", json::array({a, b})}, {"max_tokens", 8}});
  j = json::parse(res->body);
  EXPECT_EQ(j["choices"][0]["text"], "ab");
  EXPECT_EQ(s.engine.submissions().back().prompt, (std::vector<int32_t>{a, b}));
}

TEST(ServerHttp, CompletionLogprobs) {
  TestServer s;
  auto res = s.post("/v1/completions", {{"prompt", "abc"}, {"max_tokens", 3}, {"logprobs", 2}});
  ASSERT_EQ(res->status, 200) << res->body;
  json lp = json::parse(res->body)["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], json::array({"a", "b", "c"}));
  EXPECT_EQ(lp["token_logprobs"], json::array({-0.25, -0.25, -0.25}));
  ASSERT_EQ(lp["top_logprobs"].size(), 3u);
  EXPECT_EQ(lp["top_logprobs"][0].size(), 2u);
  EXPECT_DOUBLE_EQ(lp["top_logprobs"][0]["a"].get<double>(), -0.25);
  EXPECT_DOUBLE_EQ(lp["top_logprobs"][0]["b"].get<double>(), -1.5);
  EXPECT_EQ(lp["text_offset"], json::array({0, 1, 2}));
  EXPECT_EQ(s.engine.submissions().back().params.top_logprobs, 2);
}

TEST(ServerHttp, CompletionStream) {
  TestServer s;
  auto res = s.post("/v1/completions", {{"prompt", "hello"}, {"max_tokens", 3}, {"stream", true}});
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/event-stream");
  auto chunks = sse_chunks(res->body);
  ASSERT_GE(chunks.size(), 1u);
  std::string text;
  const std::string id = chunks[0]["id"];
  EXPECT_EQ(id.rfind("cmpl-", 0), 0u);
  for (size_t i = 0; i < chunks.size(); ++i) {
    const json& c = chunks[i];
    EXPECT_EQ(c["object"], "text_completion");
    EXPECT_EQ(c["id"], id);
    EXPECT_EQ(c["model"], "fake-model");
    EXPECT_FALSE(c.contains("usage"));
    ASSERT_EQ(c["choices"].size(), 1u);
    text += c["choices"][0]["text"].get<std::string>();
    if (i + 1 < chunks.size()) {
      EXPECT_TRUE(c["choices"][0]["finish_reason"].is_null());
    }
  }
  EXPECT_EQ(text, "hel");
  EXPECT_EQ(chunks.back()["choices"][0]["finish_reason"], "length");
}

/// `body` as an HTTP/1.0 POST to /v1/completions (no Host, no keep-alive).
std::string http10_post(const json& body) {
  const std::string b = body.dump();
  return "POST /v1/completions HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(b.size()) +
         "\r\n\r\n" + b;
}

TEST(ServerHttp, AnHttp10ClientGetsItsStreamAndItsLongAnswerUnchunkedEndedByTheClose) {
  // An HTTP/1.0 client cannot read chunked encoding (RFC 9112 §6.1): a streamed answer, and the
  // heartbeats of a non-streamed one past kHeartbeatAfter, come as plain bytes that end when
  // the server closes the connection; an HTTP/1.1 client gets the same events chunked.
  FakeEngineOptions opts;
  opts.token_delay = 400ms;
  TestServer s(opts);
  const json stream = {{"prompt", "hello"}, {"max_tokens", 3}, {"stream", true}};
  testing::RawConnection c(s.port);
  ASSERT_TRUE(c.send(http10_post(stream)));
  const std::string got = c.read_all(10s);
  EXPECT_TRUE(c.peer_closed()) << got;
  EXPECT_EQ(testing::http_status(got), 200) << got;
  const size_t head_end = got.find("\r\n\r\n");
  ASSERT_NE(head_end, std::string::npos) << got;
  const std::string head = got.substr(0, head_end), body = got.substr(head_end + 4);
  EXPECT_EQ(head.find("Transfer-Encoding"), std::string::npos) << head;
  EXPECT_NE(head.find("Connection: close"), std::string::npos) << head;
  auto texts = [](const std::vector<json>& chunks) {
    std::vector<std::string> out;
    for (const json& ch : chunks) out.push_back(ch["choices"][0]["text"].get<std::string>() + "|" + ch["choices"][0]["finish_reason"].dump());
    return out;
  };
  auto res = s.post("/v1/completions", stream);
  ASSERT_TRUE(res);
  EXPECT_EQ(texts(sse_chunks(body)), texts(sse_chunks(res->body))) << body;
  // Not streamed, four tokens 400 ms apart: heartbeat spaces, then the JSON.
  testing::RawConnection c2(s.port);
  ASSERT_TRUE(c2.send(http10_post({{"prompt", "hello"}, {"max_tokens", 4}})));
  const std::string full = c2.read_all(10s);
  EXPECT_TRUE(c2.peer_closed()) << full;
  const size_t end2 = full.find("\r\n\r\n");
  ASSERT_NE(end2, std::string::npos) << full;
  EXPECT_EQ(full.substr(0, end2).find("Transfer-Encoding"), std::string::npos) << full;
  const std::string json_body = full.substr(end2 + 4);
  EXPECT_EQ(json_body.rfind(" ", 0), 0u) << "no heartbeat: " << json_body;
  const json parsed = json::parse(json_body);  // throws on a chunk-size line
  EXPECT_EQ(parsed["choices"][0]["text"], "hell");
}

/// `data` as one gzip member (RFC 1952) holding a single stored deflate block (RFC 1951 §3.2.4):
/// a valid gzip body built without zlib.
std::string gzip_stored(const std::string& data) {
  uint32_t crc = 0xFFFFFFFFu;  // CRC-32 (ISO 3309), bit by bit
  for (unsigned char ch : data) {
    crc ^= ch;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  crc = ~crc;
  const auto le32 = [](uint32_t v) { return std::string{char(v), char(v >> 8), char(v >> 16), char(v >> 24)}; };
  const uint16_t len = static_cast<uint16_t>(data.size()), nlen = static_cast<uint16_t>(~len);
  std::string out = {'\x1f', '\x8b', 8, 0, 0, 0, 0, 0, 0, '\xff'};
  out += std::string{1, char(len), char(len >> 8), char(nlen), char(nlen >> 8)} + data;
  return out + le32(crc) + le32(static_cast<uint32_t>(data.size()));
}

TEST(ServerHttp, AGzipBodyIsDecodedAndAnotherContentCodingGets415) {
  TestServer s;
  const std::string body = json{{"prompt", "hello"}, {"max_tokens", 3}}.dump();
  auto c = s.client();
  auto plain = c.Post("/v1/completions", body, "application/json");
  ASSERT_TRUE(plain);
  ASSERT_EQ(plain->status, 200) << plain->body;
  std::string gz = gzip_stored(body);
  auto coded = c.Post("/v1/completions", {{"Content-Encoding", "gzip"}}, gz, "application/json");
  ASSERT_TRUE(coded);
  ASSERT_EQ(coded->status, 200) << coded->body;
  EXPECT_EQ(json::parse(coded->body)["choices"], json::parse(plain->body)["choices"]);
  gz[gz.size() - 8] ^= 1;  // a wrong CRC: 400 naming the coding
  expect_api_error(c.Post("/v1/completions", {{"Content-Encoding", "gzip"}}, gz, "application/json"), 400, "",
                   "The request body's gzip coding could not be decoded");
  for (const char* coding : {"br", "gzip, gzip", "GZIP"}) {  // httplib decodes exactly "gzip" and "deflate"
    auto res = s.client().Post("/v1/completions", {{"Content-Encoding", coding}}, body, "application/json");
    expect_api_error(res, 415, "", std::string("Content-Encoding '") + coding + "' is not supported");
    EXPECT_EQ(json::parse(res->body)["error"]["code"], "unsupported_content_encoding");
    EXPECT_EQ(res->body.find("lower case") != std::string::npos, std::string(coding) == "GZIP") << res->body;
  }
  auto again = s.post("/v1/completions", {{"prompt", "hello"}, {"max_tokens", 3}});
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 200);
}

TEST(ServerHttp, CompletionStreamUsageAndUtf8) {
  TestServer s;
  // "é€" is 5 bytes = 5 one-byte tokens; text deltas must only carry complete characters.
  auto res = s.post("/v1/completions", {{"prompt", "é€!"},
                                        {"max_tokens", 10},
                                        {"stream", true},
                                        {"logprobs", 1},
                                        {"stream_options", {{"include_usage", true}}}});
  ASSERT_EQ(res->status, 200);
  auto chunks = sse_chunks(res->body);
  ASSERT_GE(chunks.size(), 2u);
  std::string text;
  std::vector<std::string> tokens;
  for (size_t i = 0; i + 1 < chunks.size(); ++i) {
    const json& c = chunks[i];
    EXPECT_TRUE(c.contains("usage") && c["usage"].is_null());
    text += c["choices"][0]["text"].get<std::string>();
    if (!c["choices"][0]["logprobs"].is_null()) {
      for (const auto& t : c["choices"][0]["logprobs"]["tokens"]) tokens.push_back(t);
    }
  }
  EXPECT_EQ(text, "é€!");
  ASSERT_EQ(tokens.size(), 6u);
  EXPECT_EQ(tokens[0], "bytes:\\xc3");
  EXPECT_EQ(tokens[5], "!");
  const json& usage_chunk = chunks.back();
  EXPECT_TRUE(usage_chunk["choices"].empty());
  EXPECT_EQ(usage_chunk["usage"]["prompt_tokens"], 7);
  EXPECT_EQ(usage_chunk["usage"]["completion_tokens"], 6);
  EXPECT_EQ(usage_chunk["usage"]["total_tokens"], 13);
  EXPECT_EQ(chunks[chunks.size() - 2]["choices"][0]["finish_reason"], "stop");
}

TEST(ServerHttp, CompletionNChoices) {
  TestServer s;
  auto res = s.post("/v1/completions", {{"prompt", "abcdef"}, {"max_tokens", 4}, {"n", 2}, {"seed", 7}});
  ASSERT_EQ(res->status, 200) << res->body;
  json j = json::parse(res->body);
  ASSERT_EQ(j["choices"].size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(j["choices"][i]["index"], i);
    EXPECT_EQ(j["choices"][i]["text"], "abcd");
  }
  EXPECT_EQ(j["usage"]["prompt_tokens"], 7);  // counted once per prompt
  EXPECT_EQ(j["usage"]["completion_tokens"], 8);
  auto subs = s.engine.submissions();
  ASSERT_EQ(subs.size(), 2u);
  EXPECT_EQ(*subs[0].params.seed, 7u);
  EXPECT_EQ(*subs[1].params.seed, 8u);

  // Streaming with n=2 and two prompts: four choices, each ending with a finish_reason.
  res = s.post("/v1/completions",
               {{"prompt", json::array({"xy", "zw"})}, {"max_tokens", 8}, {"n", 2}, {"stream", true}});
  ASSERT_EQ(res->status, 200);
  auto chunks = sse_chunks(res->body);
  std::vector<std::string> texts(4);
  std::vector<int> finishes(4, 0);
  for (const auto& c : chunks) {
    const int idx = c["choices"][0]["index"];
    ASSERT_GE(idx, 0);
    ASSERT_LT(idx, 4);
    texts[idx] += c["choices"][0]["text"].get<std::string>();
    if (!c["choices"][0]["finish_reason"].is_null()) ++finishes[idx];
  }
  EXPECT_EQ(texts, (std::vector<std::string>{"xy", "xy", "zw", "zw"}));
  EXPECT_EQ(finishes, (std::vector<int>{1, 1, 1, 1}));
}

// ---- /v1/chat/completions ---------------------------------------------------------------

TEST(ServerHttp, ChatJson) {
  TestServer s;
  json messages = json::array({{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi!"}}});
  auto res = s.post("/v1/chat/completions", {{"messages", messages}});
  ASSERT_EQ(res->status, 200) << res->body;
  json j = json::parse(res->body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], expected_chat_echo(s.engine.fake_tokenizer(), messages));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  auto subs = s.engine.submissions();
  ASSERT_EQ(subs.size(), 1u);
  EXPECT_EQ(subs[0].params.max_tokens, -1);  // chat default: until EOS / context end
  EXPECT_EQ(subs[0].prompt.front(), FakeTokenizer::kBos);
  EXPECT_EQ(j["usage"]["prompt_tokens"], static_cast<int>(subs[0].prompt.size()));
}

TEST(ServerHttp, ChatStream) {
  TestServer s;
  json messages = json::array({{{"role", "user"}, {"content", "Tell me"}}});
  auto res = s.post("/v1/chat/completions",
                    {{"messages", messages}, {"max_tokens", 6}, {"stream", true},
                     {"stream_options", {{"include_usage", true}}}});
  ASSERT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/event-stream");
  auto chunks = sse_chunks(res->body);
  ASSERT_GE(chunks.size(), 4u);
  // Role first, then content deltas, then an empty delta with finish_reason, then usage.
  EXPECT_EQ(chunks[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(chunks[0]["choices"][0]["delta"], json::parse(R"({"role":"assistant","content":""})"));
  EXPECT_TRUE(chunks[0]["choices"][0]["finish_reason"].is_null());
  std::string content;
  for (size_t i = 1; i + 2 < chunks.size(); ++i) {
    const json& ch = chunks[i]["choices"][0];
    EXPECT_TRUE(ch["finish_reason"].is_null());
    EXPECT_EQ(ch["delta"].size(), 1u);
    content += ch["delta"]["content"].get<std::string>();
  }
  EXPECT_EQ(content, expected_chat_echo(s.engine.fake_tokenizer(), messages).substr(0, 6));
  const json& fin = chunks[chunks.size() - 2];
  EXPECT_TRUE(fin["choices"][0]["delta"].empty());
  EXPECT_EQ(fin["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(fin["usage"].is_null());
  const json& usage = chunks.back();
  EXPECT_EQ(usage["object"], "chat.completion.chunk");
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 6);
  for (const auto& c : chunks) EXPECT_EQ(c["id"], chunks[0]["id"]);
}

TEST(ServerHttp, ChatLogprobs) {
  TestServer s;
  json messages = json::array({{{"role", "user"}, {"content", "abc"}}});
  auto res = s.post("/v1/chat/completions",
                    {{"messages", messages}, {"max_completion_tokens", 3}, {"logprobs", true}, {"top_logprobs", 2}});
  ASSERT_EQ(res->status, 200) << res->body;
  json j = json::parse(res->body);
  const json& content = j["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 3u);
  for (const auto& e : content) {
    EXPECT_TRUE(e["token"].is_string());
    EXPECT_DOUBLE_EQ(e["logprob"].get<double>(), -0.25);
    ASSERT_EQ(e["bytes"].size(), 1u);
    ASSERT_EQ(e["top_logprobs"].size(), 2u);
    EXPECT_EQ(e["top_logprobs"][0]["token"], e["token"]);
    EXPECT_TRUE(e["top_logprobs"][1]["bytes"].is_array());
  }
  EXPECT_EQ(s.engine.submissions().back().params.top_logprobs, 2);
  EXPECT_EQ(s.engine.submissions().back().params.max_tokens, 3);
}

// ---- errors --------------------------------------------------------------------------------

TEST(ServerHttp, ErrorsKeepServing) {
  TestServer s;
  auto c = s.client();
  auto bad_json = c.Post("/v1/completions", "{\"prompt\": ", "application/json");
  expect_api_error(bad_json, 400, "", "could not parse the JSON body");
  expect_api_error(s.post("/v1/completions", json::object()), 400, "prompt", "Missing required parameter");
  expect_api_error(s.post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 0}}), 400, "max_tokens", ">= 1");
  expect_api_error(s.post("/v1/completions", {{"prompt", "x"}, {"temperature", -1}}), 400, "temperature", "between 0 and 2");
  expect_api_error(s.post("/v1/completions", {{"prompt", "x"}, {"top_p", 0}}), 400, "top_p", "greater than 0");
  expect_api_error(s.post("/v1/completions", {{"prompt", "x"}, {"logprobs", 9}}), 400, "logprobs", "between 0 and 5");
  expect_api_error(s.post("/v1/chat/completions", {{"prompt", "x"}}), 400, "messages", "Missing required parameter");
  auto wrong_model = s.post("/v1/completions", {{"prompt", "x"}, {"model", "gpt-4o"}});
  expect_api_error(wrong_model, 404, "model", "does not exist");
  EXPECT_EQ(json::parse(wrong_model->body)["error"]["code"], "model_not_found");
  // Longer than the context (256): 400 from the context check, param "prompt".
  auto too_long = s.post("/v1/completions", {{"prompt", std::string(300, 'z')}});
  expect_api_error(too_long, 400, "prompt", "maximum context length");
  EXPECT_EQ(json::parse(too_long->body)["error"]["code"], "context_length_exceeded");
  auto chat_too_long = s.post("/v1/chat/completions",
                              {{"messages", json::array({{{"role", "user"}, {"content", std::string(300, 'z')}}})}});
  expect_api_error(chat_too_long, 400, "messages", "maximum context length");

  // Unknown route and wrong method: JSON too.
  expect_api_error(c.Get("/v1/nope"), 404, "", "Invalid URL (GET /v1/nope)");
  auto wrong_method = c.Get("/v1/completions");
  expect_api_error(wrong_method, 405, "", "not allowed");
  EXPECT_EQ(wrong_method->get_header_value("Allow"), "POST");
  expect_api_error(c.Post("/health", "", "application/json"), 405, "", "not allowed");
  EXPECT_EQ(s.engine.submissions().size(), 0u);

  // An engine that refuses the request: 400 with its message.
  s.engine.set_submit_error("request could never fit in the KV pool");
  expect_api_error(s.post("/v1/completions", {{"prompt", "x"}}), 400, "prompt", "could never fit");
  s.engine.set_submit_error(std::nullopt);

  // The refusal's code decides 400 vs 503, not a second look at the engine's readiness
  // (which still reports ready here, as it may by the time it is asked).
  s.engine.set_submit_error("every decode worker went away", StatusCode::Unavailable);
  auto gone = s.post("/v1/completions", {{"prompt", "x"}});
  expect_api_error(gone, 503, "", "every decode worker went away");
  EXPECT_EQ(json::parse(gone->body)["error"]["type"], "server_error");
  s.engine.set_submit_error("the pool is too small for this request", StatusCode::ResourceExhausted);
  expect_api_error(s.post("/v1/completions", {{"prompt", "x"}}), 400, "prompt", "too small");
  s.engine.set_submit_error(std::nullopt);

  // An engine failure mid-generation: 500 server_error, and an error event when streaming.
  s.engine.set_fail_after(2);
  auto failed = s.post("/v1/completions", {{"prompt", "abcdef"}});
  expect_api_error(failed, 500, "", "fake engine failure");
  EXPECT_EQ(json::parse(failed->body)["error"]["type"], "server_error");
  auto failed_stream = s.post("/v1/chat/completions",
                              {{"messages", json::array({{{"role", "user"}, {"content", "abcdef"}}})}, {"stream", true}});
  ASSERT_EQ(failed_stream->status, 200);
  auto payloads = sse_payloads(failed_stream->body);
  ASSERT_GE(payloads.size(), 2u);
  EXPECT_EQ(payloads.back(), "[DONE]");
  json err_event = json::parse(payloads[payloads.size() - 2]);
  EXPECT_EQ(err_event["error"]["message"], "fake engine failure");
  s.engine.set_fail_after(-1);

  // Still serving.
  auto ok = s.post("/v1/completions", {{"prompt", "ok"}, {"max_tokens", 2}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  EXPECT_EQ(json::parse(ok->body)["choices"][0]["text"], "ok");
  EXPECT_TRUE(testing::wait_until([&] { return s.engine.active() == 0; }));
}

// ---- disconnects and shutdown ---------------------------------------------------------------

/// Sends a raw HTTP request, reads until `until` shows up in the response, then closes.
bool post_and_hang_up(int port, const std::string& path, const std::string& body, const std::string& until) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return false;
  }
  const std::string req = "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
                          "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
    ::close(fd);
    return false;
  }
  std::string got;
  char buf[4096];
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  while (got.find(until) == std::string::npos) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return got.find(until) != std::string::npos;
}

TEST(ServerHttp, ClientDisconnectMidStreamAborts) {
  FakeEngineOptions opts;
  opts.context_length = 1 << 20;  // the default 256 would end the stream after ~1.3 s
  TestServer s(opts);
  s.engine.set_token_delay(5ms);
  // Endless generation: ignore_eos with no token limit in a huge context.
  const json body = {{"prompt", "abc"}, {"max_tokens", nullptr}, {"ignore_eos", true}, {"stream", true}};
  ASSERT_TRUE(post_and_hang_up(s.port, "/v1/completions", body.dump(), "\"text\":\"c\""));
  EXPECT_TRUE(testing::wait_until([&] { return s.engine.aborts() == 1; }, 10s))
      << "aborts: " << s.engine.aborts();
  EXPECT_TRUE(testing::wait_until([&] { return s.engine.active() == 0; }));

  const json chat = {{"messages", json::array({{{"role", "user"}, {"content", "xyz"}}})},
                     {"ignore_eos", true}, {"stream", true}};
  ASSERT_TRUE(post_and_hang_up(s.port, "/v1/chat/completions", chat.dump(), "\"content\":\"x\""));
  EXPECT_TRUE(testing::wait_until([&] { return s.engine.aborts() == 2; }, 10s));

  // The server is unaffected.
  auto ok = s.post("/v1/completions", {{"prompt", "fine"}, {"max_tokens", 4}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(json::parse(ok->body)["choices"][0]["text"], "fine");
}

TEST(ServerHttp, StopEndsRunAndAbortsStreams) {
  FakeEngineOptions opts;
  opts.context_length = 1 << 20;
  auto s = std::make_unique<TestServer>(opts);
  s->engine.set_token_delay(5ms);
  std::thread client([&] {
    auto c = s->client();
    c.Post("/v1/completions", json{{"prompt", "abc"}, {"max_tokens", nullptr}, {"ignore_eos", true}, {"stream", true}}.dump(),
           "application/json");
  });
  ASSERT_TRUE(testing::wait_until([&] { return s->engine.active() == 1; }));
  std::this_thread::sleep_for(50ms);
  const auto t0 = std::chrono::steady_clock::now();
  s->shutdown();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_EQ(s->rc.load(), 0);
  EXPECT_TRUE(testing::wait_until([&] { return s->engine.aborts() == 1; }));
  client.join();
}

// A request that arrives once shutdown has begun (while the server still writes the
// aborted requests' ends) is refused before it reaches the engine, and told to go
// elsewhere: 503, Retry-After, and the connection closed after the response.
TEST(ServerHttp, ARequestArrivingAtShutdownGets503RetryAfterAndConnectionClose) {
  FakeEngine engine;
  std::atomic<bool> stopping{true};
  GenerationHandler handler(engine, tokenizer::ChatTemplateKind::Plain, &stopping);
  for (Endpoint endpoint : {Endpoint::Completions, Endpoint::ChatCompletions}) {
    httplib::Request req;
    httplib::Response res;
    const json body = endpoint == Endpoint::Completions
                          ? json{{"prompt", "x"}, {"max_tokens", 1}}
                          : json{{"messages", json::array({{{"role", "user"}, {"content", "x"}}})}, {"max_tokens", 1}};
    handler.handle(endpoint, req, body.dump(), res);
    EXPECT_EQ(res.status, 503);
    EXPECT_EQ(res.get_header_value("Retry-After"), "1");
    EXPECT_EQ(res.get_header_value("Connection"), "close");
    EXPECT_EQ(json::parse(res.body)["error"]["message"], "The server is shutting down.");
  }
  EXPECT_EQ(handler.open_responses(), 0);
  EXPECT_EQ(engine.submissions().size(), 0u);
  stopping = false;  // the same handler serves when not stopping (the check is the flag)
  httplib::Request req;
  httplib::Response res;
  handler.handle(Endpoint::Completions, req, json{{"prompt", "x"}, {"max_tokens", 1}}.dump(), res);
  EXPECT_NE(res.status, 503);
  EXPECT_TRUE(res.get_header_value("Retry-After").empty());
}

TEST(ServerHttp, StopBeforeRunAndBindFailure) {
  FakeEngine engine;
  {
    ServerConfig cfg;
    cfg.port = 0;
    HttpServer server(engine, cfg);
    server.stop();
    std::atomic<int> rc{-1};
    std::thread t([&] { rc = server.run(); });
    EXPECT_TRUE(testing::wait_until([&] { return rc.load() >= 0; }));
    t.join();
    EXPECT_EQ(rc.load(), 0);
  }
  TestServer first;
  ServerConfig cfg;
  cfg.port = first.port;  // taken
  HttpServer second(engine, cfg);
  EXPECT_NE(second.run(), 0);
}

// ---- auth, concurrency -----------------------------------------------------------------------

TEST(ServerHttp, ApiKey) {
  TestServer s({}, "sekret");
  auto c = s.client();
  auto no_key = c.Get("/v1/models");
  expect_api_error(no_key, 401, "", "API key");
  EXPECT_EQ(json::parse(no_key->body)["error"]["code"], "invalid_api_key");
  expect_api_error(c.Get("/v1/models", {{"Authorization", "Bearer wrong"}}), 401, "", "Incorrect API key");
  expect_api_error(s.post("/v1/completions", {{"prompt", "x"}}), 401, "", "API key");
  EXPECT_EQ(s.engine.submissions().size(), 0u);

  auto ok = c.Get("/v1/models", {{"Authorization", "Bearer sekret"}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  auto gen = s.post("/v1/completions", {{"prompt", "x"}}, {{"Authorization", "Bearer sekret"}});
  EXPECT_EQ(gen->status, 200);
  for (const char* path : {"/tokenize", "/detokenize", "/apply-template"}) {
    expect_api_error(s.post(path, {{"prompt", "x"}}), 401, "", "API key");
    EXPECT_NE(s.post(path, {{"prompt", "x"}}, {{"Authorization", "Bearer sekret"}})->status, 401) << path;
  }
  auto health = c.Get("/health");  // no key needed
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
}

TEST(ServerHttp, ManyConcurrentClients) {
  TestServer s;
  s.engine.set_token_delay(1ms);
  constexpr int kThreads = 12, kPerThread = 4;
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto c = s.client();
      for (int i = 0; i < kPerThread; ++i) {
        const std::string prompt = "req-" + std::to_string(t) + "-" + std::to_string(i);
        const bool stream = (t + i) % 2 == 0;
        auto res = c.Post("/v1/completions",
                          json{{"prompt", prompt}, {"max_tokens", 32}, {"stream", stream}}.dump(),
                          "application/json");
        if (!res || res->status != 200) continue;
        std::string text;
        if (stream) {
          for (const auto& p : sse_payloads(res->body)) {
            if (p != "[DONE]") text += json::parse(p)["choices"][0]["text"].get<std::string>();
          }
        } else {
          text = json::parse(res->body)["choices"][0]["text"];
        }
        if (text == prompt) ++ok;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), kThreads * kPerThread);
  EXPECT_EQ(s.engine.aborts(), 0);
}

}  // namespace
}  // namespace pdserve::server
