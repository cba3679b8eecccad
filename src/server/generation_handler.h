// HTTP handlers of POST /v1/completions and POST /v1/chat/completions: parse ▸ check
// model ▸ tokenize ▸ submit ▸ answer with one JSON response or an SSE stream.
#pragma once

#include <atomic>
#include <memory>

#include <httplib.h>

#include "engine/engine.h"
#include "server/generation.h"
#include "server/request_limits.h"
#include "server/openai_protocol.h"
#include "tokenizer/chat_template.h"

namespace pdserve::server {

class GenerationHandler {
 public:
  /// `stopping` (may be null) is set when the server shuts down; running requests are
  /// then aborted.
  /// `gateway` (may be null: no classes, limits or keys) admits each request.
  /// `template_kwargs`: see PromptEncoder.
  GenerationHandler(engine::Engine& engine, tokenizer::ChatTemplateKind chat_template,
                    const std::atomic<bool>* stopping, RequestLimits limits = {},
                    std::shared_ptr<const tokenizer::JinjaChatTemplate> jinja = nullptr,
                    std::time_t template_now = 0, gateway::Gateway* gateway = nullptr, json template_kwargs = nullptr);

  /// POST /apply-template: {messages, tools?, add_generation_prompt?} → {"prompt": text},
  /// the chat prompt as /v1/chat/completions would render it (llama.cpp's endpoint).
  void apply_template(const std::string& body, httplib::Response& res) const;

  /// POST /tokenize and /detokenize (server/tokenize_api.h): a chat prompt's ids as a chat
  /// completion would make them, a text's, or the text of ids.
  void tokenize(const std::string& body, httplib::Response& res) const;
  void detokenize(const std::string& body, httplib::Response& res) const;

  /// Serves one request whose JSON body is `body` (read by the caller, whatever the
  /// Content-Type: curl's -d sends form-encoded, which must not limit or parse it).
  void handle(Endpoint endpoint, const httplib::Request& req, const std::string& body, httplib::Response& res) const;

  /// Requests being handled whose response is not fully written yet: a stream or a long
  /// non-streamed body is written after handle() returns, by a content provider that
  /// httplib stops calling once the server stops. At shutdown the server waits for 0
  /// before it stops, so an aborted request still gets its error and its end.
  int open_responses() const { return open_->load(); }

 private:
  /// Counts one open response until the returned token (kept by the content provider,
  /// if any) is destroyed.
  std::shared_ptr<void> hold_open() const;
  struct FullResult;
  /// Non-streamed answer. Requests that finish within kHeartbeatAfter get a normal
  /// response; longer ones get status 200 at once and white-space heartbeats until the
  /// JSON body, so a disconnected client is noticed and its request aborted.
  void respond_full(const GenerationRequest& r, std::unique_ptr<ChoiceStreams> streams,
                    std::shared_ptr<void> open, const httplib::Request& req, httplib::Response& res) const;
  /// Gathers output for up to `budget`; true when every choice has finished.
  bool collect(FullResult& f, std::chrono::milliseconds budget) const;
  /// The HTTP status and JSON body for gathered output (an error object on failure).
  std::pair<int, std::string> full_response(FullResult& f) const;
  void respond_stream(const GenerationRequest& r, std::unique_ptr<ChoiceStreams> streams,
                      std::shared_ptr<void> open, const httplib::Request& req, httplib::Response& res) const;
  /// Authenticates and admits `r` at the gateway (rate limits, class, queue bound),
  /// setting the x-ratelimit-* headers; the error to answer with, or null and `lease`.
  std::optional<ApiError> admit(const GenerationRequest& r, const std::vector<std::vector<int32_t>>& prompts,
                                const httplib::Request& req, httplib::Response& res,
                                std::shared_ptr<gateway::RequestLease>& lease) const;
  ResponseMeta new_meta(Endpoint endpoint) const;
  PieceFn piece_fn() const;

  engine::Engine& engine_;
  PromptEncoder encoder_;
  const std::atomic<bool>* stopping_;
  RequestLimits limits_;
  gateway::Gateway* gateway_;
  std::shared_ptr<std::atomic<int>> open_ = std::make_shared<std::atomic<int>>(0);
};

}  // namespace pdserve::server
