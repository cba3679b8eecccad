// pdserve bench's client side of streaming: the SSE framing parser and how each event
// (completion / chat chunk, usage, error, [DONE]) updates a request record.
#include <gtest/gtest.h>

#include "loadgen/sse_parser.h"
#include "loadgen/stream_client.h"

namespace pdserve::loadgen {
namespace {

TEST(BenchSse, EventsSplitAnywhere) {
  const std::string stream =
      ": keep-alive\n\n"
      "data: {\"a\":1}\n\n"
      "data: {\"b\":2}\r\n\r\n"
      "event: x\ndata: line1\ndata:line2\nid: 7\n\n"
      "data: [DONE]\n\n";
  const std::vector<std::string> want = {"{\"a\":1}", "{\"b\":2}", "line1\nline2", "[DONE]"};
  // Whole, and fed one byte at a time.
  SseParser whole;
  EXPECT_EQ(whole.feed(stream), want);
  SseParser bytes;
  std::vector<std::string> got;
  for (char c : stream)
    for (auto& e : bytes.feed(std::string_view(&c, 1))) got.push_back(e);
  EXPECT_EQ(got, want);
  // Bare CR line ends (a final CR waits for the next byte: it may start "\r\n"); an
  // unterminated event is held until its blank line.
  SseParser cr;
  EXPECT_TRUE(cr.feed("data: x\r").empty());
  EXPECT_TRUE(cr.feed("\r").empty());
  EXPECT_EQ(cr.feed(":comment\n"), std::vector<std::string>{"x"});
  SseParser held;
  EXPECT_TRUE(held.feed("data: partial").empty());
  EXPECT_EQ(held.feed("\n\n"), std::vector<std::string>{"partial"});
}

TEST(BenchSse, CompletionAndChatChunks) {
  RequestRecord r;
  apply_sse_event(R"({"choices":[{"index":0,"text":"Once"}]})", 1.0, r);
  apply_sse_event(R"({"choices":[{"index":0,"text":""}]})", 1.1, r);  // no text: not a token chunk
  apply_sse_event(R"({"choices":[{"index":0,"delta":{"content":" upon"}}]})", 1.2, r);
  apply_sse_event(R"({"choices":[{"index":0,"delta":{"role":"assistant"}}]})", 1.3, r);
  apply_sse_event(R"({"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}})", 1.4, r);
  apply_sse_event("[DONE]", 1.5, r);
  apply_sse_event("not json", 1.6, r);  // ignored
  EXPECT_DOUBLE_EQ(r.first_token_s, 1.0);
  EXPECT_EQ(r.chunk_s, (std::vector<double>{1.0, 1.2}));
  EXPECT_EQ(r.usage_prompt_tokens, 12);
  EXPECT_EQ(r.usage_completion_tokens, 3);
  EXPECT_TRUE(r.done_marker);
  EXPECT_TRUE(r.error.empty());
  // pdserve puts "usage": null on every chunk when include_usage is set.
  RequestRecord n;
  apply_sse_event(R"({"choices":[{"text":"a"}],"usage":null})", 0.5, n);
  EXPECT_EQ(n.usage_completion_tokens, -1);
  EXPECT_EQ(n.chunk_s.size(), 1u);
}

TEST(BenchSse, ErrorEvents) {
  RequestRecord r;
  apply_sse_event(R"({"error":{"message":"generation failed","type":"server_error"}})", 2.0, r);
  EXPECT_NE(r.error.find("generation failed"), std::string::npos);
  RequestRecord s;
  apply_sse_event(R"({"error":"overloaded"})", 2.0, s);
  EXPECT_NE(s.error.find("overloaded"), std::string::npos);
}

}  // namespace
}  // namespace pdserve::loadgen
