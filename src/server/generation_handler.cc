#include "server/generation_handler.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/log.h"
#include "server/http_util.h"
#include "server/sse.h"
#include "server/stream_session.h"

namespace pdserve::server {
namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(100);
// After asking the engine to abort (shutdown), how long to wait for its final deltas.
constexpr auto kAbortGrace = std::chrono::seconds(10);

}  // namespace

GenerationHandler::GenerationHandler(engine::Engine& engine,
                                     tokenizer::ChatTemplateKind chat_template,
                                     const std::atomic<bool>* stopping)
    : engine_(engine), encoder_(engine.tokenizer(), chat_template), stopping_(stopping) {}

ResponseMeta GenerationHandler::new_meta(Endpoint endpoint) const {
  return ResponseMeta{
      make_response_id(endpoint == Endpoint::ChatCompletions ? "chatcmpl-" : "cmpl-"),
      unix_seconds(), engine_.model_name()};
}

PieceFn GenerationHandler::piece_fn() const {
  const tokenizer::Tokenizer* tok = &engine_.tokenizer();
  return [tok](int32_t id) { return tok->token_to_piece(id); };
}

void GenerationHandler::handle(Endpoint endpoint, const httplib::Request& req,
                               httplib::Response& res) const {
  if (stopping_ && stopping_->load()) {
    send_error(res, unavailable("The server is shutting down."));
    return;
  }
  ParsedRequest parsed = endpoint == Endpoint::ChatCompletions ? parse_chat_request(req.body)
                                                                : parse_completion_request(req.body);
  if (!parsed.ok()) {
    send_error(res, *parsed.error);
    return;
  }
  const GenerationRequest& r = parsed.request;
  if (auto err = check_model(r, engine_.model_name())) {
    send_error(res, *err);
    return;
  }
  std::vector<std::vector<int32_t>> prompts;
  if (auto err = encoder_.encode(r, engine_.context_length(), prompts)) {
    send_error(res, *err);
    return;
  }
  auto streams = std::make_unique<ChoiceStreams>();
  if (auto err = streams->submit(engine_, r, prompts)) {
    send_error(res, *err);
    return;
  }
  if (r.stream) {
    respond_stream(r, std::move(streams), res);
  } else {
    respond_full(r, *streams, res);
  }
}

void GenerationHandler::respond_full(const GenerationRequest& r, ChoiceStreams& streams,
                                     httplib::Response& res) const {
  std::vector<ChoiceResult> choices(static_cast<size_t>(streams.size()));
  for (size_t i = 0; i < choices.size(); ++i) choices[i].index = static_cast<int>(i);
  std::string error;
  bool aborting = false;
  std::chrono::steady_clock::time_point abort_deadline;
  while (!streams.done()) {
    if (!aborting && stopping_ && stopping_->load()) {
      streams.abort_all();
      aborting = true;
      abort_deadline = std::chrono::steady_clock::now() + kAbortGrace;
    }
    ChoiceStreams::Event ev;
    if (!streams.next(ev, kPollInterval)) {
      if (aborting && std::chrono::steady_clock::now() > abort_deadline) break;
      continue;
    }
    ChoiceResult& c = choices[static_cast<size_t>(ev.choice)];
    c.text += ev.delta.text;
    if (r.want_logprobs()) {
      c.logprobs.insert(c.logprobs.end(), ev.delta.logprobs.begin(), ev.delta.logprobs.end());
    }
    if (ev.delta.finish != engine::FinishReason::None) c.finish = ev.delta.finish;
    if (ev.delta.finish == engine::FinishReason::Error && error.empty()) {
      error = ev.delta.error.empty() ? "generation failed" : ev.delta.error;
    }
  }
  if (!error.empty()) {
    PDS_LOG_ERROR("generation failed: {}", error);
    send_error(res, server_error(error));
    return;
  }
  for (const auto& c : choices) {
    if (c.finish == engine::FinishReason::Abort || c.finish == engine::FinishReason::None) {
      send_error(res, unavailable("The request was aborted because the server is shutting down."));
      return;
    }
  }
  const ResponseMeta meta = new_meta(r.endpoint);
  const json body =
      r.endpoint == Endpoint::ChatCompletions
          ? chat_response(meta, choices, streams.usage(), r.want_logprobs(), piece_fn())
          : completion_response(meta, choices, streams.usage(), r.want_logprobs(), piece_fn());
  send_json(res, 200, body);
}

void GenerationHandler::respond_stream(const GenerationRequest& r,
                                       std::unique_ptr<ChoiceStreams> streams,
                                       httplib::Response& res) const {
  // The session lives in the provider; when httplib destroys the provider (stream done,
  // client gone, server stopping) the ChoiceStreams destructor aborts what is unfinished.
  auto session = std::make_shared<StreamSession>(r.endpoint, new_meta(r.endpoint),
                                                 std::move(streams), r.want_logprobs(),
                                                 r.include_usage, piece_fn(), stopping_);
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      kSseContentType,
      [session](size_t /*offset*/, httplib::DataSink& sink) { return session->pump(sink); });
}

}  // namespace pdserve::server
