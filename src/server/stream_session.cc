#include "server/stream_session.h"

#include <exception>
#include <utility>

#include "base/log.h"
#include "server/sse.h"

namespace pdserve::server {
namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(50);
// An SSE comment after this much silence (long queues/prefills): keeps proxies from
// timing out and finds clients that went away.
constexpr auto kKeepAliveInterval = std::chrono::seconds(10);
constexpr size_t kMaxBatchBytes = 64 * 1024;
// While tokens flow, how often the client's end is looked at (at once when nothing flows).
constexpr auto kHangUpCheckInterval = std::chrono::milliseconds(250);

}  // namespace

StreamSession::StreamSession(Endpoint endpoint, ResponseMeta meta,
                             std::unique_ptr<ChoiceStreams> streams, bool want_logprobs,
                             bool include_usage, PieceFn piece, const std::atomic<bool>* stopping)
    : endpoint_(endpoint),
      meta_(std::move(meta)),
      streams_(std::move(streams)),
      want_logprobs_(want_logprobs),
      include_usage_(include_usage),
      piece_(std::move(piece)),
      stopping_(stopping),
      text_chars_(static_cast<size_t>(streams_->size())),
      logprob_holds_(static_cast<size_t>(streams_->size()), LogprobHold(piece_)),
      last_write_(std::chrono::steady_clock::now()) {}

std::string StreamSession::opening() {
  std::string out;
  if (endpoint_ == Endpoint::ChatCompletions) {
    for (int i = 0; i < streams_->size(); ++i) {
      out += sse_data(chat_chunk(meta_, i, json{{"role", "assistant"}, {"content", ""}}, nullptr,
                                 engine::FinishReason::None, include_usage_));
    }
  }
  return out;
}

std::string StreamSession::closing() {
  std::string out;
  if (include_usage_) {
    out += sse_data(usage_chunk(
        meta_, endpoint_ == Endpoint::ChatCompletions ? "chat.completion.chunk" : "text_completion",
        streams_->usage()));
  }
  out += sse_done();
  return out;
}

void StreamSession::enable_tool_calls(ToolSyntax syntax) {
  tool_filters_.assign(static_cast<size_t>(streams_->size()), ToolCallStreamFilter(syntax));
  tool_held_logprobs_.assign(static_cast<size_t>(streams_->size()), {});
}

std::string StreamSession::render_with_tools(int choice, const engine::StreamDelta& d) {
  std::string out;
  ToolCallStreamFilter& f = tool_filters_[choice];
  // Logprobs go out with the text they cover: as it passes, or with the held text if that
  // turns out to be text; a call has none (as a whole answer, apply_tool_calls).
  std::vector<engine::TokenLogprob>& held = tool_held_logprobs_[choice];
  if (want_logprobs_) {
    std::vector<engine::TokenLogprob> lps = logprob_holds_[choice].take(d);
    held.insert(held.end(), std::make_move_iterator(lps.begin()), std::make_move_iterator(lps.end()));
  }
  const auto content_chunk = [&](const std::string& text) {
    json lp = held.empty() ? json(nullptr) : json{{"content", chat_logprob_content(held, piece_)}};
    held.clear();
    return sse_data(chat_chunk(meta_, choice, json{{"content", text}}, std::move(lp), engine::FinishReason::None, include_usage_));
  };
  const std::string text = f.push(d.text);
  if (f.passing() && (!text.empty() || !held.empty())) out += content_chunk(text);
  if (d.finish == engine::FinishReason::None) return out;
  ParsedToolOutput p = f.finish(tool_call_id_prefix(meta_.id, choice));
  if (p.content && (!p.content->empty() || !held.empty())) out += content_chunk(*p.content);
  if (!p.calls.empty()) {
    json calls = json::array();
    for (size_t k = 0; k < p.calls.size(); ++k) {
      json c = p.calls[k];
      c["index"] = static_cast<int>(k);
      calls.push_back(std::move(c));
    }
    out += sse_data(chat_chunk(meta_, choice, json{{"tool_calls", std::move(calls)}}, nullptr, engine::FinishReason::None,
                               include_usage_));
  }
  if (d.finish == engine::FinishReason::Error) {
    out += sse_data(server_error(d.error.empty() ? "generation failed" : d.error).to_json());
    return out;
  }
  json last = chat_chunk(meta_, choice, json::object(), nullptr, d.finish, include_usage_);
  if (!p.calls.empty() && !p.cut && d.finish == engine::FinishReason::Stop) last["choices"][0]["finish_reason"] = "tool_calls";
  out += sse_data(last);
  return out;
}

std::string StreamSession::render(int choice, const engine::StreamDelta& d) {
  if (!tool_filters_.empty()) return render_with_tools(choice, d);
  std::string out;
  const std::vector<engine::TokenLogprob> lps = want_logprobs_ ? logprob_holds_[choice].take(d) : std::vector<engine::TokenLogprob>();
  const bool has_lp = !lps.empty();
  if (endpoint_ == Endpoint::Completions) {
    if (d.finish == engine::FinishReason::Error) {
      if (!d.text.empty() || has_lp) {
        json lp = has_lp ? completion_logprobs_json(lps, piece_, &text_chars_[choice])
                         : json(nullptr);
        out += sse_data(completion_chunk(meta_, choice, d.text, std::move(lp),
                                         engine::FinishReason::None, include_usage_));
      }
      out += sse_data(server_error(d.error.empty() ? "generation failed" : d.error).to_json());
      return out;
    }
    if (d.text.empty() && !has_lp && d.finish == engine::FinishReason::None) return out;
    json lp = has_lp ? completion_logprobs_json(lps, piece_, &text_chars_[choice])
                     : json(nullptr);
    out += sse_data(completion_chunk(meta_, choice, d.text, std::move(lp), d.finish, include_usage_));
    return out;
  }
  // Chat: content chunks, then a final chunk with an empty delta and the finish reason.
  if (!d.text.empty() || has_lp) {
    json lp = has_lp ? json{{"content", chat_logprob_content(lps, piece_)}} : json(nullptr);
    out += sse_data(chat_chunk(meta_, choice, json{{"content", d.text}}, std::move(lp),
                               engine::FinishReason::None, include_usage_));
  }
  if (d.finish == engine::FinishReason::Error) {
    out += sse_data(server_error(d.error.empty() ? "generation failed" : d.error).to_json());
  } else if (d.finish != engine::FinishReason::None) {
    out += sse_data(chat_chunk(meta_, choice, json::object(), nullptr, d.finish, include_usage_));
  }
  return out;
}

bool StreamSession::pump(httplib::DataSink& sink) {
  // An exception must not escape into httplib's writer thread.
  try {
    return pump_unguarded(sink);
  } catch (const std::exception& e) {
    PDS_LOG_ERROR("stream {}: {}", meta_.id, e.what());
  } catch (...) {
    PDS_LOG_ERROR("stream {}: unknown exception", meta_.id);
  }
  streams_->abort_all();
  return false;
}

bool StreamSession::client_hung_up(httplib::DataSink& sink, bool idle, std::chrono::steady_clock::time_point now) {
  if (!sink.is_writable || (!idle && now - last_hang_up_check_ < kHangUpCheckInterval)) return false;
  last_hang_up_check_ = now;
  return !sink.is_writable();
}

bool StreamSession::pump_unguarded(httplib::DataSink& sink) {
  if (finished_) return true;
  std::string out;
  if (!started_) {
    started_ = true;
    out += opening();
  }
  ChoiceStreams::Event ev;
  if (streams_->next(ev, kPollInterval)) {
    out += render(ev.choice, ev.delta);
    // Take whatever else is ready so one write carries it.
    while (out.size() < kMaxBatchBytes && streams_->next(ev, std::chrono::milliseconds(0))) {
      out += render(ev.choice, ev.delta);
    }
  }
  const auto now = std::chrono::steady_clock::now();
  if (streams_->done()) {
    out += closing();
    finished_ = true;
  } else if (stopping_ && stopping_->load()) {
    // Shutdown: the client gets an error event and the stream's end, so it can tell a cut
    // answer from a finished one (and retry elsewhere), instead of a dropped connection.
    streams_->abort_all();
    out += sse_data(aborted_by_shutdown().to_json());
    out += sse_done();
    finished_ = true;
  } else if (out.empty() && now - last_write_ >= kKeepAliveInterval) {
    out = sse_comment("keep-alive");
  } else if (client_hung_up(sink, out.empty(), now)) {
    // The client closed its side (a disconnect, or a half-close after sending), found
    // without waiting for a write to fail: the engine requests are freed now. As for a
    // non-streamed request, a client that can still read gets the error (an event here)
    // and the stream's end; for one that is gone the write fails, which costs nothing.
    streams_->abort_all();
    out += sse_data(aborted_by_client().to_json());
    out += sse_done();
    finished_ = true;
  }
  if (!out.empty()) {
    // A failed write means the client is gone: free the engine requests now.
    if (!sink.write(out.data(), out.size())) {
      streams_->abort_all();
      return false;
    }
    last_write_ = now;
  }
  if (finished_) sink.done();
  return true;
}

}  // namespace pdserve::server
