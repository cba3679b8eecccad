// One streaming (SSE) response: turns the merged deltas of a request's choices into
// OpenAI chunks and writes them to the client, ending with `data: [DONE]`.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <httplib.h>

#include "server/generation.h"
#include "server/openai_protocol.h"
#include "server/logprob_hold.h"
#include "server/openai_response.h"
#include "server/tool_calls.h"

namespace pdserve::server {

class StreamSession {
 public:
  /// Takes over `streams` (already submitted). `stopping` (may be null) is the server's
  /// shutdown flag.
  StreamSession(Endpoint endpoint, ResponseMeta meta, std::unique_ptr<ChoiceStreams> streams,
                bool want_logprobs, bool include_usage, PieceFn piece,
                const std::atomic<bool>* stopping);

  /// The chunked content provider body: writes whatever is ready (waiting briefly), and
  /// the end of the stream once every choice finished. Returns false to cancel the
  /// response (client gone or server stopping); the engine requests are then aborted.
  bool pump(httplib::DataSink& sink);

  /// Chat with tools: a choice's output that is tool calls (in `syntax`) is sent as one
  /// tool_calls delta when it ends, with finish_reason "tool_calls" (or "length" with the
  /// cut call's arguments as written, as parse_tool_output reads them); other text
  /// streams as content (logprobs are not sent in this mode).
  void enable_tool_calls(ToolSyntax syntax = ToolSyntax::kWrapper);

  /// The SSE text for one delta of choice `choice` (exposed for tests).
  std::string render(int choice, const engine::StreamDelta& delta);
  /// The SSE text that opens the stream (chat: a role chunk per choice).
  std::string opening();
  /// The SSE text that closes the stream (usage chunk if asked, then [DONE]).
  std::string closing();

 private:
  bool pump_unguarded(httplib::DataSink& sink);
  /// Whether the client's end is closed (sink.is_writable false): looked at on every pump
  /// when `idle` (nothing to write), else at most every 250 ms.
  bool client_hung_up(httplib::DataSink& sink, bool idle, std::chrono::steady_clock::time_point now);
  std::string render_with_tools(int choice, const engine::StreamDelta& delta);

  Endpoint endpoint_;
  ResponseMeta meta_;
  std::unique_ptr<ChoiceStreams> streams_;
  bool want_logprobs_;
  bool include_usage_;
  PieceFn piece_;
  const std::atomic<bool>* stopping_;
  std::vector<Utf8CharCounter> text_chars_;  // per choice: its text so far, for text_offset
  std::vector<LogprobHold> logprob_holds_;   // per choice: logprobs given out with their text
  std::vector<ToolCallStreamFilter> tool_filters_;  // per choice; empty: no tools
  // per choice, with tools: logprobs of text the filter holds (given out if it is text)
  std::vector<std::vector<engine::TokenLogprob>> tool_held_logprobs_;
  bool started_ = false;
  bool finished_ = false;
  std::chrono::steady_clock::time_point last_write_;
  std::chrono::steady_clock::time_point last_hang_up_check_;
};

}  // namespace pdserve::server
