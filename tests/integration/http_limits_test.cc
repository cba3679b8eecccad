// `pdserve serve` against hostile HTTP clients: connections that trickle their request
// head (slowloris) do not hold the HTTP threads, a head that never completes gets 408,
// one address cannot open more than --max-connections-per-client connections (429), a
// body over --max-body-bytes is refused by its Content-Length before it is read (413),
// and a prompt whose byte length no context could hold is refused before tokenizing —
// while a normal client keeps being served.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include "support/held_stream.h"
#include "support/pool_free.h"
#include "support/raw_http.h"
#include "support/server_process.h"
#include "support/wait.h"

namespace pdserve {
namespace {

using json = nlohmann::json;
using Ms = std::chrono::milliseconds;

/// A normal completion request from 127.0.0.1; returns its latency (ms), or -1 when it
/// got no 200 within `timeout_s`.
long long timed_completion(int port, int timeout_s = 5) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(timeout_s, 0);
  c.set_read_timeout(timeout_s, 0);
  const auto t0 = std::chrono::steady_clock::now();
  auto res = c.Post("/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0})",
                    "application/json");
  if (!res || res->status != 200) return -1;
  return std::chrono::duration_cast<Ms>(std::chrono::steady_clock::now() - t0).count();
}

TEST(HttpLimits, ThreeHundredSlowHeaderConnectionsDoNotDelayANormalRequest) {
  // Fewer HTTP threads than slow connections: the slow ones must not hold threads.
  testing::ServerProcess srv({"--http-threads", "16"});
  ASSERT_TRUE(srv.ready()) << srv.error();
  const std::string head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n";
  std::vector<std::unique_ptr<testing::RawConnection>> slow;
  for (int i = 0; i < 300; ++i) slow.push_back(std::make_unique<testing::RawConnection>(srv.port(), "127.0.0.2"));
  // One header byte per second on each connection, from another thread.
  std::atomic<bool> done{false};
  std::atomic<size_t> rounds{0};  // bytes sent so far on every slow connection
  std::thread trickle([&] {
    for (size_t k = 0; k < head.size() && !done; ++k) {
      for (auto& c : slow) c->send(std::string(1, head[k]));
      ++rounds;
      for (int t = 0; t < 100 && !done; ++t) std::this_thread::sleep_for(Ms(10));
    }
  });
  // Measure once every slow connection has sent two bytes (the server holds all 300).
  ASSERT_TRUE(testing::wait_until([&] { return rounds >= 2; }, std::chrono::seconds(10)));
  for (int i = 0; i < 4; ++i) {
    const long long ms = timed_completion(srv.port(), 3);
    EXPECT_GE(ms, 0) << "request " << i << " got no answer within 3 s";
    EXPECT_LT(ms, 1000) << "request " << i;
    // Spaces the probes over the trickle (each lands at another point of its 1 s
    // rhythm); a fixed pause is safe here: it only decides when a probe is sent.
    std::this_thread::sleep_for(Ms(300));
  }
  done = true;
  trickle.join();
}

TEST(HttpLimits, AHeadThatNeverCompletesGets408) {
  testing::ServerProcess srv({"--http-header-timeout", "1"});
  ASSERT_TRUE(srv.ready()) << srv.error();
  testing::RawConnection c(srv.port());
  ASSERT_TRUE(c.ok());
  const auto t0 = std::chrono::steady_clock::now();
  const std::string head = "GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
  std::string got;
  for (char ch : head) {  // a byte every 100 ms: ~6 s for the head, far past the 1 s limit
    if (!c.send(std::string(1, ch))) break;
    got = c.read_until("\r\n\r\n", Ms(100));
    if (!got.empty() || c.peer_closed()) break;
  }
  got = c.read_all(Ms(3000));
  const auto ms = std::chrono::duration_cast<Ms>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(testing::http_status(got), 408) << got;
  EXPECT_NE(got.find("\"error\""), std::string::npos) << got;
  EXPECT_LT(ms, 3000);
  EXPECT_GE(timed_completion(srv.port()), 0);
}

TEST(HttpLimits, ConnectionsPerClientAddressAreLimited) {
  testing::ServerProcess srv({"--max-connections-per-client", "4"});
  ASSERT_TRUE(srv.ready()) << srv.error();
  std::vector<std::unique_ptr<testing::RawConnection>> held;
  for (int i = 0; i < 4; ++i) {
    held.push_back(std::make_unique<testing::RawConnection>(srv.port(), "127.0.0.3"));
    ASSERT_TRUE(held.back()->ok());
  }
  // The four are adopted (a request on one of them is answered).
  ASSERT_TRUE(held[0]->send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_EQ(testing::http_status(held[0]->read_until("}", Ms(5000))), 200);
  testing::RawConnection fifth(srv.port(), "127.0.0.3");
  ASSERT_TRUE(fifth.ok());
  const std::string refused = fifth.read_all(Ms(5000));
  EXPECT_EQ(testing::http_status(refused), 429) << refused;
  EXPECT_NE(refused.find("\"error\""), std::string::npos) << refused;
  // Another address is served meanwhile.
  EXPECT_GE(timed_completion(srv.port()), 0);
  // Once one of the four hangs up, the address may connect again.
  held[1]->close();
  ASSERT_TRUE(testing::wait_until([&] {
    testing::RawConnection again(srv.port(), "127.0.0.3");
    if (!again.send("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")) return false;
    return testing::http_status(again.read_all(Ms(2000))) == 200;
  }, Ms(5000)));
}

TEST(HttpLimits, AMalformedRequestLineGetsOne400AndTheConnectionCloses) {
  // What follows a request line the server cannot parse is not read as more requests (one
  // 400 per line, then the smuggled GET answered): one 400, then the connection closes.
  testing::ServerProcess srv(std::vector<std::string>{});
  ASSERT_TRUE(srv.ready()) << srv.error();
  for (const char* bad : {"FOO / HTTP/1.1\r\n", "GET /health\r\n"}) {
    testing::RawConnection c(srv.port());
    ASSERT_TRUE(c.ok());
    ASSERT_TRUE(c.send(std::string(bad) + "Host: x\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"));
    const std::string got = c.read_all(Ms(3000));
    EXPECT_EQ(testing::http_status(got), 400) << got;
    EXPECT_EQ(testing::http_responses(got), 1u) << got;
    EXPECT_EQ(got.find("\"object\":\"list\""), std::string::npos) << got;
    EXPECT_TRUE(c.peer_closed()) << got;
  }
  EXPECT_GE(timed_completion(srv.port()), 0);
}

TEST(HttpLimits, ABodyWhoseEndIsNotKnownGetsOneErrorAndTheConnectionCloses) {
  // Framing httplib would misread (http_framing.h), each with a GET where the body would be:
  // one error naming it, the connection closes, and the GET is not served. Before, the
  // ambiguous lengths were run, and the rest (no length at all, a header name with white space
  // before its colon, an unknown transfer coding) read the connection to its end as the body,
  // taking the pipelined GET with it.
  testing::ServerProcess srv(std::vector<std::string>{});
  ASSERT_TRUE(srv.ready()) << srv.error();
  const std::string get = "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n";
  struct Case {
    std::string headers;
    int status;
    std::string why;
  };
  const Case cases[] = {
      {"Content-Length: abc\r\n", 400, "not a decimal number"},
      {"Content-Length: 0\r\nContent-Length: " + std::to_string(get.size()) + "\r\n", 400, "more than one Content-Length"},
      {"Transfer-Encoding: chunked\r\nContent-Length: 3\r\n", 400, "both Transfer-Encoding and Content-Length"},
      {"Content-Length : " + std::to_string(get.size()) + "\r\n", 400, "malformed header field name: 'Content-Length '"},
      {"Transfer-Encoding\t: chunked\r\n", 400, "malformed header field name"},
      {"", 411, "neither Content-Length nor Transfer-Encoding"},
      {"Transfer-Encoding: gzip, chunked\r\n", 501, "'gzip, chunked' is not supported"},
      {"Transfer-Encoding: identity\r\n", 501, "'identity' is not supported"},
      {"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", 501, "sent more than once"},
      {"Host: y\r\nContent-Length: 0\r\n", 400, "more than one Host"},
      {"Content-Encoding: br\r\nContent-Length: " + std::to_string(get.size()) + "\r\n", 415, "Content-Encoding 'br' is not supported"},
  };
  for (const auto& [headers, status, why] : cases) {
    testing::RawConnection c(srv.port());
    ASSERT_TRUE(c.ok());
    ASSERT_TRUE(c.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + headers + "\r\n" + get));
    const std::string got = c.read_all(Ms(3000));
    EXPECT_EQ(testing::http_status(got), status) << headers << got;
    EXPECT_NE(got.find(why), std::string::npos) << got;
    EXPECT_NE(got.find("Connection: close"), std::string::npos) << got;
    EXPECT_EQ(testing::http_responses(got), 1u) << got;
    EXPECT_TRUE(c.peer_closed()) << got;
  }
  {  // No Host (HTTP/1.1): 400; HTTP/1.0 needs none.
    testing::RawConnection c(srv.port());
    ASSERT_TRUE(c.send("GET /v1/models HTTP/1.1\r\n\r\n"));
    const std::string got = c.read_all(Ms(3000));
    EXPECT_EQ(testing::http_status(got), 400) << got;
    EXPECT_NE(got.find("no Host header"), std::string::npos) << got;
    testing::RawConnection old(srv.port());
    ASSERT_TRUE(old.send("GET /v1/models HTTP/1.0\r\n\r\n"));
    EXPECT_NE(old.read_all(Ms(3000)).find("\"object\":\"list\""), std::string::npos);
  }
  // Expect: 100-continue: a body that would be refused is refused before it is sent (no
  // "100 Continue" inviting the upload); one that fits gets its 100, then its answer.
  for (const auto& [length, status] : {std::pair<std::string, int>{"999999999", 413}, {"x1", 400}}) {
    testing::RawConnection c(srv.port());
    ASSERT_TRUE(c.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: " + length + "\r\n\r\n"));
    const std::string got = c.read_all(Ms(3000));
    EXPECT_EQ(testing::http_status(got), status) << got;
    EXPECT_EQ(testing::http_responses(got), 1u) << got;
    EXPECT_TRUE(c.peer_closed()) << got;
  }
  const std::string body = R"({"prompt":"Hi","max_tokens":2})";
  testing::RawConnection fits(srv.port());
  ASSERT_TRUE(fits.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: " +
                        std::to_string(body.size()) + "\r\n\r\n"));
  ASSERT_NE(fits.read_until("100 Continue\r\n\r\n", Ms(3000)).find("HTTP/1.1 100 Continue"), std::string::npos);
  ASSERT_TRUE(fits.send(body));
  const std::string answered = fits.read_until("\"text_completion\"", Ms(10000));
  EXPECT_NE(answered.find("HTTP/1.1 200"), std::string::npos) << answered;
  EXPECT_NE(answered.find("\"text_completion\""), std::string::npos) << answered;
  EXPECT_GE(timed_completion(srv.port()), 0);
}

TEST(HttpLimits, ABodyOnAMethodThatTakesNoneIsNotReadAsTheNextRequest) {
  // httplib reads no body for GET, HEAD or OPTIONS, so a GET with a Content-Length had its body
  // read as the next request line (a 400, or a request smuggled in it served). Now the request
  // is answered and the connection closes (saying Connection: close); a body of length 0 keeps
  // it open for the next request (as a POST's body by Content-Length does).
  testing::ServerProcess srv(std::vector<std::string>{});
  ASSERT_TRUE(srv.ready()) << srv.error();
  const std::string smuggled = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string next = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  for (const char* head : {"GET /v1/models", "HEAD /health", "OPTIONS /v1/models", "GET /nowhere"}) {
    for (const std::string& framing : {"Content-Length: " + std::to_string(smuggled.size()) + "\r\n\r\n" + smuggled,
                                       "Transfer-Encoding: chunked\r\n\r\n" + testing::http_chunk(smuggled) + "0\r\n\r\n"}) {
      testing::RawConnection c(srv.port());
      ASSERT_TRUE(c.ok());
      ASSERT_TRUE(c.send(std::string(head) + " HTTP/1.1\r\nHost: x\r\n" + framing + next));
      const std::string got = c.read_all(Ms(3000));
      EXPECT_EQ(testing::http_responses(got), 1u) << head << "\n" << got;
      EXPECT_EQ(got.find("pdserve_"), std::string::npos) << head << "\n" << got;  // /metrics not served
      EXPECT_NE(got.find("Connection: close"), std::string::npos) << head << "\n" << got;
      EXPECT_TRUE(c.peer_closed()) << head << "\n" << got;
    }
  }
  testing::RawConnection zero(srv.port());
  ASSERT_TRUE(zero.send("GET /v1/models HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n" + next));
  const std::string both = zero.read_all(Ms(1500));
  EXPECT_EQ(testing::http_responses(both), 2u) << both;
  EXPECT_NE(both.find("kv_blocks_total"), std::string::npos) << both;
  EXPECT_GE(timed_completion(srv.port()), 0);
}

TEST(HttpLimits, NothingAfterAChunkedBodyIsReadAsAnotherRequest) {
  // httplib's chunk reader ends a body at a chunk whose CRLF is missing, without an error; the
  // bytes after it were then read as the next request (a GET /metrics smuggled there was
  // served). A chunked request's connection now closes after its response, well framed or not.
  testing::ServerProcess srv(std::vector<std::string>{});
  ASSERT_TRUE(srv.ready()) << srv.error();
  const std::string chunk = testing::http_chunk(R"({"prompt":"Hi","max_tokens":2})");
  std::string no_crlf = chunk;
  no_crlf.insert(no_crlf.size() - 2, "XX");  // the chunk's data runs on past its size
  const std::string smuggled = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
  for (const std::string& chunks : {no_crlf, chunk + "0\r\n\r\n"}) {
    testing::RawConnection c(srv.port());
    ASSERT_TRUE(c.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" +
                       chunks + smuggled));
    const std::string got = c.read_all(Ms(5000));
    EXPECT_EQ(testing::http_responses(got), 1u) << got;
    EXPECT_EQ(got.find("pdserve_"), std::string::npos) << got;  // /metrics not served
    EXPECT_TRUE(c.peer_closed()) << got;
  }
  EXPECT_GE(timed_completion(srv.port()), 0);
}

TEST(HttpLimits, ABodyThatStopsShortIsRefusedNotRun) {
  // 100 bytes announced, 30 sent (a whole JSON object on its own), then the client's side
  // closes: the part is never run as the request, and the answer is a 400.
  testing::ServerProcess srv(std::vector<std::string>{});
  ASSERT_TRUE(srv.ready()) << srv.error();
  testing::RawConnection c(srv.port());
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(c.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     "Content-Length: 100\r\n\r\n{\"prompt\":\"hi\",\"max_tokens\":2}"));
  c.shutdown_write();
  const std::string got = c.read_all(Ms(5000));
  EXPECT_EQ(testing::http_status(got), 400) << got;
  EXPECT_NE(got.find("could not be read in full"), std::string::npos) << got;
  EXPECT_EQ(got.find("\"choices\""), std::string::npos) << got;
  EXPECT_GE(timed_completion(srv.port()), 0);
}

TEST(HttpLimits, ABodyOverTheLimitIsRefusedByItsContentLength) {
  testing::ServerProcess srv(std::vector<std::string>{});
  ASSERT_TRUE(srv.ready()) << srv.error();
  {
    // 50 MB announced, 64 KiB sent: the answer must not wait for the rest.
    testing::RawConnection c(srv.port());
    ASSERT_TRUE(c.ok());
    ASSERT_TRUE(c.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       "Content-Length: 50000000\r\n\r\n{\"prompt\": \"" + std::string(65536, 'a')));
    const std::string got = c.read_until("}}", Ms(5000));
    EXPECT_EQ(testing::http_status(got), 413) << got.substr(0, 300);
    EXPECT_NE(got.find("max-body-bytes"), std::string::npos) << got.substr(0, 300);
  }
  EXPECT_GE(timed_completion(srv.port()), 0);
}

TEST(HttpLimits, AChunkedBodyOverTheLimitIsRefused) {
  // Every POST route (/apply-template read its chunked body whole, past the limit).
  testing::ServerProcess srv({"--max-body-bytes", "4096"});
  ASSERT_TRUE(srv.ready()) << srv.error();
  for (const char* path : {"/v1/completions", "/v1/chat/completions", "/apply-template", "/tokenize", "/detokenize"}) {
    testing::RawConnection c(srv.port());
    ASSERT_TRUE(c.ok());
    std::string req = std::string("POST ") + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      "Transfer-Encoding: chunked\r\n\r\n";
    for (int i = 0; i < 6; ++i) req += testing::http_chunk(std::string(1000, ' '));
    req += "0\r\n\r\n";
    ASSERT_TRUE(c.send(req));
    const std::string got = c.read_until("}}", Ms(5000));
    EXPECT_EQ(testing::http_status(got), 413) << path << "\n" << got;
  }
  // A body within the limit is served.
  EXPECT_GE(timed_completion(srv.port()), 0);
}

TEST(HttpLimits, AJsonBodySentAsFormDataIsReadWholeOnEveryPostRoute) {
  // `curl -d` says application/x-www-form-urlencoded; cpp-httplib caps such bodies at 8 KiB
  // when it reads them itself (/apply-template answered a 20 KB one with a 413 naming the
  // server's 8 MiB limit). Read through the content reader, as the generation routes are.
  testing::ServerProcess srv(std::vector<std::string>{});
  ASSERT_TRUE(srv.ready()) << srv.error();
  const std::string long_text(20000, 'a');
  httplib::Client cli("127.0.0.1", srv.port());
  auto res = cli.Post("/apply-template", nlohmann::json{{"messages", {{{"role", "user"}, {"content", long_text}}}}}.dump(),
                      "application/x-www-form-urlencoded");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body.substr(0, 300);
  EXPECT_NE(res->body.find(long_text), std::string::npos);
  // multipart/form-data (curl -F) is not JSON: 415 on every POST route, and the unread body
  // is not read as a request (was a 500, bad_function_call: httplib hands such a body only
  // to a form-data callback pair).
  for (const char* path : {"/v1/completions", "/v1/chat/completions", "/apply-template", "/tokenize", "/detokenize"}) {
    const std::string part = "--zz\r\nContent-Disposition: form-data; name=\"x\"\r\n\r\n{}\r\n--zz--\r\n";
    testing::RawConnection c(srv.port());
    ASSERT_TRUE(c.send(std::string("POST ") + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=zz\r\n"
                       "Content-Length: " + std::to_string(part.size()) + "\r\n\r\n" + part));
    const std::string got = c.read_all(Ms(3000));
    EXPECT_EQ(testing::http_status(got), 415) << path << "\n" << got;
    EXPECT_EQ(testing::http_responses(got), 1u) << got;
    EXPECT_TRUE(c.peer_closed()) << got;
  }
  EXPECT_GE(timed_completion(srv.port()), 0);
}

TEST(HttpLimits, APromptNoContextCanHoldIsRefusedBeforeTokenizing) {
  testing::ServerProcess srv(std::vector<std::string>{});
  ASSERT_TRUE(srv.ready()) << srv.error();
  auto cli = srv.client();
  std::string big;
  while (big.size() < 4u << 20) big += "Once upon a time there was a little girl. ";
  for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
    SCOPED_TRACE(path);
    const json body = std::string(path) == "/v1/completions"
                          ? json{{"prompt", big}, {"max_tokens", 1}}
                          : json{{"messages", {{{"role", "user"}, {"content", big}}}}, {"max_tokens", 1}};
    auto res = cli.Post(path, body.dump(), "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400) << res->body.substr(0, 300);
    const json err = json::parse(res->body, nullptr, false);
    ASSERT_TRUE(err.contains("error")) << res->body.substr(0, 300);
    EXPECT_EQ(err["error"]["code"], "context_length_exceeded");
    // Refused by its byte length: the message counts bytes, not tokens.
    EXPECT_NE(err["error"]["message"].get<std::string>().find(" bytes long"), std::string::npos) << err.dump();
  }
  EXPECT_GE(timed_completion(srv.port()), 0);
  EXPECT_TRUE(testing::wait_pool_free(srv.port()));
}


/// VmRSS of process `pid` in KiB (0 when unreadable).
long rss_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  return 0;
}

/// CPU seconds (user + system) the process `pid` has used.
double cpu_seconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::istringstream rest(stat.substr(stat.rfind(')') + 2));  // fields from 3 (state) on
  std::string f;
  long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> f; ++i) {
    if (i == 14) utime = std::atoll(f.c_str());
    if (i == 15) stime = std::atoll(f.c_str());
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

TEST(HttpLimits, EachRequestLimitGetsA400WhileOthersAreServed) {
  testing::ServerProcess srv({"--max-json-depth", "8", "--max-stop-length", "16", "--max-prompt-tokens", "8",
                              "--max-completion-tokens", "256"});
  ASSERT_TRUE(srv.ready()) << srv.error();
  // A long streamed request runs throughout and must end normally.
  std::thread other([&] {
    auto c = srv.client();
    auto res = c.Post("/v1/completions",
                      R"({"prompt": "Once", "max_tokens": 200, "ignore_eos": true, "temperature": 0, "stream": true})",
                      "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200);
    EXPECT_NE(res->body.find("data: [DONE]"), std::string::npos);
    EXPECT_EQ(res->body.find("\"error\""), std::string::npos) << res->body.substr(0, 300);
  });
  struct Case {
    const char* what;
    std::string body;
    const char* param;       // expected error param ("" = null)
    const char* in_message;  // expected part of the message
  };
  // An object of 200,000 keys (2.7 MB, a logit_bias say) took 50 s of CPU to parse: refused
  // before parsing. Commas inside strings and arrays do not count.
  std::string wide = R"({"prompt": "Once", "stop": ["a,b,c"], "logit_bias": {)";
  for (int i = 0; i < 200000; ++i) wide += (i ? ",\"" : "\"") + std::to_string(i) + "\": 0";
  wide += "}}";
  const std::vector<Case> cases = {
      {"JSON nesting", R"({"prompt": "Once", "x": [[[[[[[[[[1]]]]]]]]]]})", "", "max-json-depth"},
      {"JSON object members", wide, "", "more than 10000 members"},
      {"stop length", R"({"prompt": "Once", "stop": "a stop string of more than sixteen bytes"})", "stop", "max-stop-length"},
      {"stop count", R"({"prompt": "Once", "stop": ["a", "b", "c", "d", "e"]})", "stop", "maximum length 4"},
      {"prompt tokens", R"({"prompt": "Once upon a time there was a little girl named Lily"})", "prompt", "max-prompt-tokens"},
      {"n", R"({"prompt": "Once", "n": 17})", "n", ""},
      {"logprobs", R"({"prompt": "Once", "logprobs": 6})", "logprobs", ""},
      {"max_tokens", R"({"prompt": "Once", "max_tokens": 257})", "max_tokens", "max-completion-tokens"},
      // No max_tokens: the server's 256 is the bound (helper-72: min_tokens 300 was taken).
      {"min_tokens", R"({"prompt": "Once", "max_tokens": null, "min_tokens": 300})", "min_tokens", "max-completion-tokens"},
  };
  auto cli = srv.client();
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    auto res = cli.Post("/v1/completions", c.body, "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400) << res->body;
    const json err = json::parse(res->body, nullptr, false);
    ASSERT_TRUE(err.contains("error")) << res->body;
    if (*c.param) {
      EXPECT_EQ(err["error"]["param"], c.param) << res->body;
    } else {
      EXPECT_TRUE(err["error"]["param"].is_null()) << res->body;
    }
    EXPECT_NE(err["error"]["message"].get<std::string>().find(c.in_message), std::string::npos) << res->body;
  }
  // Within the limits: served.
  auto ok = cli.Post("/v1/completions", R"({"prompt": "Once", "stop": "sixteen bytes!!!", "max_tokens": 2})",
                     "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  // A request that gives no max_tokens runs to --max-completion-tokens, not the context end.
  // ("max_tokens": null on /v1/completions asks for the context end, like an absent one on chat.)
  auto capped = cli.Post("/v1/completions",
                         R"({"prompt": "Once", "max_tokens": null, "ignore_eos": true, "temperature": 0})",
                         "application/json");
  ASSERT_TRUE(capped);
  ASSERT_EQ(capped->status, 200) << capped->body;
  const json cj = json::parse(capped->body);
  EXPECT_EQ(cj["usage"]["completion_tokens"], 256) << capped->body;
  EXPECT_EQ(cj["choices"][0]["finish_reason"], "length") << capped->body;
  other.join();
  EXPECT_TRUE(testing::wait_pool_free(srv.port()));
}

TEST(HttpLimits, AGrammarExpandingPastTheCapGetsA400AndTheNextRequestIsServed) {
  // 20000: ([a-z]{100}){100} expands to 30,401 elements, under the default 1,000,000 (it
  // costs ~10,000 matcher states); the other cases are 10^6 and more, past any cap.
  testing::ServerProcess srv({"--max-grammar-states", "20000"});
  ASSERT_TRUE(srv.ready()) << srv.error();
  const json nested_arrays = json::parse(R"({"type": "array", "minItems": 1000,
      "items": {"type": "array", "minItems": 1000, "items": {"type": "integer"}}})");
  const json msgs = json::array({{{"role", "user"}, {"content", "Once"}}});
  struct Case {
    const char* what;
    const char* path;
    json body;
    const char* param;
  };
  const std::vector<Case> cases = {
      {"regex ([a-z]{100}){100}", "/v1/completions", {{"prompt", "Once"}, {"guided_regex", "([a-z]{100}){100}"}}, "guided_regex"},
      {"regex (a{1000}){1000}", "/v1/completions",
       {{"prompt", "Once"}, {"structured_outputs", {{"regex", "(a{1000}){1000}"}}}}, "structured_outputs.regex"},
      {"schema of nested minItems 1000", "/v1/chat/completions",
       {{"messages", msgs}, {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "a"}, {"schema", nested_arrays}}}}}},
       "response_format.json_schema.schema"},
      {"GBNF rule{1000} inside {1000}", "/v1/completions",
       {{"prompt", "Once"}, {"grammar", "root ::= (item{1000}){1000}\nitem ::= [a-z] \"-\"\n"}}, "grammar"},
      {"tool parameters of nested minItems 1000", "/v1/chat/completions",
       {{"messages", msgs},
        {"tools", json::array({{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", {{"type", "object"},
            {"properties", {{"a", nested_arrays}}}, {"required", {"a"}}}}}}}})},
        {"tool_choice", "required"}},
       "tools"},
  };
  auto cli = srv.client();
  const json small = {{"type", "object"}, {"properties", {{"n", {{"type", "integer"}}}}}, {"required", {"n"}}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    auto res = cli.Post(c.path, c.body.dump(), "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400) << res->body;
    const json err = json::parse(res->body, nullptr, false);
    ASSERT_TRUE(err.contains("error")) << res->body;
    EXPECT_EQ(err["error"]["param"], c.param) << res->body;
    EXPECT_EQ(err["error"]["type"], "invalid_request_error") << res->body;
    EXPECT_NE(err["error"]["message"].get<std::string>().find("--max-grammar-states"), std::string::npos) << res->body;
    // The next constrained request is served, and its output follows its schema.
    auto ok = cli.Post("/v1/chat/completions",
                       json{{"messages", msgs}, {"max_tokens", 256}, {"temperature", 0},
                            {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "n"}, {"schema", small}}}}}}
                           .dump(),
                       "application/json");
    ASSERT_TRUE(ok);
    ASSERT_EQ(ok->status, 200) << ok->body;
    // (The grammar's longest sentence is 107 bytes, so 256 tokens always reach its end.)
    const json out = json::parse(ok->body);
    ASSERT_EQ(out["choices"][0]["finish_reason"], "stop") << ok->body;
    const json v = json::parse(out["choices"][0]["message"]["content"].get<std::string>());
    EXPECT_TRUE(v.contains("n") && v["n"].is_number_integer()) << v.dump();
  }
  EXPECT_TRUE(testing::wait_pool_free(srv.port()));
}

json health(const testing::ServerProcess& srv) {
  auto res = srv.client().Get("/health");
  return res ? json::parse(res->body, nullptr, false) : json();
}

const char* const kSaltPrompt = "Once upon a time, there was a little girl named Lily. She loved to play";  // > 1 block

TEST(HttpLimits, ANewCacheSaltPastMaxCacheSaltsGets429WhileOthersAreServed) {
  // A context long enough, and steps paced enough, that the held streams run for seconds
  // (4,000 tokens, >= 2 ms each) while the test needs milliseconds; they end when the test
  // hangs up.
  testing::ServerProcess srv({"--max-cache-salts", "2", "--ctx-size", "4096", "--fault-step-delay-ms", "2"});
  ASSERT_TRUE(srv.ready()) << srv.error();
  auto body = [](const std::string& salt, int max_tokens) {
    json b = {{"prompt", kSaltPrompt}, {"max_tokens", max_tokens}, {"temperature", 0}};
    if (!salt.empty()) b["cache_salt"] = salt;
    return b;
  };
  {
    std::vector<std::unique_ptr<testing::HeldStream>> held;
    for (const char* salt : {"s1", "s2"}) {
      json b = body(salt, 4000);
      b["ignore_eos"] = true;
      b["stream"] = true;
      held.push_back(std::make_unique<testing::HeldStream>(srv.port(), b.dump()));
    }
    ASSERT_TRUE(testing::wait_until([&] { return held[0]->started && held[1]->started; }));
    ASSERT_EQ(held[0]->status, 200);
    ASSERT_EQ(held[1]->status, 200);
    EXPECT_EQ(health(srv)["cache_salts_in_use"], 2);
    auto cli = srv.client();
    // A third salt: 429 naming the field and the flag, with Retry-After.
    auto res = cli.Post("/v1/completions", body("s3", 4).dump(), "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 429) << res->body;
    EXPECT_EQ(res->get_header_value("Retry-After"), "1");
    const json err = json::parse(res->body, nullptr, false);
    ASSERT_TRUE(err.contains("error")) << res->body;
    EXPECT_EQ(err["error"]["param"], "cache_salt") << res->body;
    EXPECT_EQ(err["error"]["code"], "rate_limit_exceeded") << res->body;
    EXPECT_EQ(err["error"]["type"], "requests") << res->body;
    EXPECT_NE(err["error"]["message"].get<std::string>().find("--max-cache-salts 2"), std::string::npos) << res->body;
    // Streamed: the same 429 as a status, before any event.
    json sb = body("s3", 4);
    sb["stream"] = true;
    auto sres = cli.Post("/v1/completions", sb.dump(), "application/json");
    ASSERT_TRUE(sres);
    EXPECT_EQ(sres->status, 429) << sres->body;
    // Meanwhile: a request without a salt, and one with a salt in use, are served.
    for (const std::string salt : {"", "s1"}) {
      auto ok = cli.Post("/v1/completions", body(salt, 4).dump(), "application/json");
      ASSERT_TRUE(ok);
      EXPECT_EQ(ok->status, 200) << salt << ": " << ok->body;
    }
    EXPECT_FALSE(held[0]->finished || held[1]->finished) << "a held stream ended before the checks";
  }  // hang up: both streams are aborted
  ASSERT_TRUE(testing::wait_pool_free(srv.port()));
  EXPECT_TRUE(testing::wait_until([&] { return health(srv)["cache_salts_in_use"] == 0; }));
  // Now s3 is served; its blocks evict the idle namespace released first (s1 or s2): two
  // salted namespaces stay, plus the default one of the unsalted request.
  auto cli = srv.client();
  auto first = cli.Post("/v1/completions", body("s3", 8).dump(), "application/json");
  ASSERT_TRUE(first);
  ASSERT_EQ(first->status, 200) << first->body;
  ASSERT_TRUE(testing::wait_pool_free(srv.port()));
  EXPECT_EQ(health(srv)["prefix_cache_namespaces"], 3) << health(srv).dump();
  // The same salted request again, now from the cache: the same answer.
  auto again = cli.Post("/v1/completions", body("s3", 8).dump(), "application/json");
  ASSERT_TRUE(again);
  ASSERT_EQ(again->status, 200) << again->body;
  const json a = json::parse(first->body), b = json::parse(again->body);
  EXPECT_EQ(a["usage"]["prompt_tokens_details"]["cached_tokens"], 0) << first->body;
  EXPECT_GT(b["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0) << again->body;
  EXPECT_EQ(a["choices"][0]["text"], b["choices"][0]["text"]);
}

TEST(HttpLimits, TenThousandCacheSaltsLeaveTheServersMemoryWhereItWas) {
  // The pool (1,024 blocks) holds far more than the cap's 256 salts' blocks (1 full block
  // each), so it is the cap that evicts: every new salt past 256 evicts the least recently
  // used idle namespace whole. One compute thread: ~11,000 tiny steps, no fork/join per
  // step (which on a loaded machine costs more than the step). 16 HTTP threads: the clients' 8 keep-alive connections are
  // served by the same few threads (stacks touched once, in the warm-up).
  testing::ServerProcess srv({"--num-kv-blocks", "1024", "--max-cache-salts", "256", "--http-threads", "16", "--threads", "1",
                              "--request-timeout", "10"});  // a stall fails, not hangs
  ASSERT_TRUE(srv.ready()) << srv.error();
  constexpr int kClients = 8;
  std::atomic<int> failed{0};
  auto run = [&](int from, int to) {  // salts [from, to) over kClients concurrent clients
    std::vector<std::thread> ts;
    for (int k = 0; k < kClients; ++k)
      ts.emplace_back([&, k] {
        auto c = srv.client();
        c.set_keep_alive(true);
        for (int i = from + k; i < to; i += kClients) {
          const json body = {{"prompt", kSaltPrompt}, {"max_tokens", 1}, {"cache_salt", "tenant-" + std::to_string(i)}};
          auto res = c.Post("/v1/completions", body.dump(), "application/json");
          if (!res || res->status != 200 || res->body.find("\"error\"") != std::string::npos) {
            if (failed++ < 5) ADD_FAILURE() << "salt " << i << ": " << (res ? res->body : "no answer");
          }
        }
      });
    for (auto& t : ts) t.join();
  };
  run(0, 1000);  // warm-up: allocator arenas, radix nodes, connection buffers, the cap filled
  ASSERT_TRUE(testing::wait_pool_free(srv.port()));
  EXPECT_EQ(health(srv)["prefix_cache_namespaces"], 256);
  const long before = rss_kib(srv.pid());
  run(1000, 11000);
  ASSERT_EQ(failed.load(), 0);
  ASSERT_TRUE(testing::wait_pool_free(srv.port()));
  const long after = rss_kib(srv.pid());
  std::printf("RSS after 1,000 salts %ld KiB, after 10,000 more %ld KiB; server CPU %.1f s\n", before, after,
              cpu_seconds(srv.pid()));
  ASSERT_GT(before, 0);
  // Exactly the cap's namespaces live on, none of them held.
  const json h = health(srv);
  EXPECT_EQ(h["prefix_cache_namespaces"], 256) << h.dump();
  EXPECT_EQ(h["cache_salts_in_use"], 0) << h.dump();
  // Each namespace kept would cost at least a radix root, a map node and the salt string
  // (~300 bytes): 10,000 kept would be ~3 MiB. The pool is allocated at start; what stays
  // is bounded by the cap, filled in the warm-up. 1 MiB leaves room for allocator noise.
  EXPECT_LT(after - before, 1024);
  // The cache still works per salt: the same salt twice shares the prompt's block.
  auto c = srv.client();
  const json body = {{"prompt", kSaltPrompt}, {"max_tokens", 1}, {"cache_salt", "tenant-again"}};
  c.Post("/v1/completions", body.dump(), "application/json");
  auto res = c.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(res && res->status == 200);
  EXPECT_GT(json::parse(res->body)["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0);
}

}  // namespace
}  // namespace pdserve
