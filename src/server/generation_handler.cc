#include "server/generation_handler.h"
#include "server/logprob_hold.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/log.h"
#include "server/gateway_http.h"
#include "server/http_connections.h"
#include "server/http_util.h"
#include "server/sse.h"
#include "server/stream_session.h"
#include "server/tokenize_api.h"

namespace pdserve::server {
namespace {

// How often a waiting non-streamed request checks the server's stopping flag (which has
// no event); a delta wakes it at once.
constexpr auto kPollInterval = std::chrono::milliseconds(100);
// After asking the engine to abort (shutdown), how long to wait for its final deltas.
constexpr auto kAbortGrace = std::chrono::seconds(10);
// Non-streamed requests still running after kHeartbeatAfter send a space every
// kHeartbeatInterval, which is how a client's disconnect gets noticed.
constexpr auto kHeartbeatAfter = std::chrono::milliseconds(1000);
constexpr auto kHeartbeatInterval = std::chrono::milliseconds(250);

/// A /tokenize or /detokenize body checked (depth, JSON, model) and answered by `fn`.
template <typename Fn>
void answer_tokenize(const std::string& body, httplib::Response& res, Fn&& fn, const RequestLimits& limits,
                     const std::string& model) {
  if (auto err = check_json_depth(body, limits.max_json_depth)) return send_error(res, *err);
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {
    return send_error(res, bad_request(std::string("We could not parse the JSON body of your request: ") + e.what()));
  }
  if (j.is_object() && j.contains("model") && !j["model"].is_null()) {
    if (!j["model"].is_string())
      return send_error(res, bad_request("Invalid 'model': expected a string, but got " + json_type_phrase(j["model"]) + ".", "model"));
    if (!j["model"].get<std::string>().empty() && j["model"].get<std::string>() != model)
      return send_error(res, model_not_found(j["model"].get<std::string>()));
  }
  json out;
  if (auto err = fn(j, out)) return send_error(res, *err);
  send_json(res, 200, out);
}

}  // namespace

GenerationHandler::GenerationHandler(engine::Engine& engine,
                                     tokenizer::ChatTemplateKind chat_template,
                                     const std::atomic<bool>* stopping, RequestLimits limits,
                                     std::shared_ptr<const tokenizer::JinjaChatTemplate> jinja,
                                     std::time_t template_now, gateway::Gateway* gateway, json template_kwargs)
    : engine_(engine),
      encoder_(engine.tokenizer(), chat_template, std::move(jinja), template_now, std::move(template_kwargs)),
      stopping_(stopping),
      limits_(limits),
      gateway_(gateway) {}

void GenerationHandler::apply_template(const std::string& body, httplib::Response& res) const {
  if (auto err = check_json_depth(body, limits_.max_json_depth)) {
    send_error(res, *err);
    return;
  }
  ParsedRequest parsed = parse_apply_template_request(body);
  if (!parsed.ok()) {
    send_error(res, *parsed.error);
    return;
  }
  const GenerationRequest& r = parsed.request;
  std::optional<ApiError> template_error;
  const std::string prompt = encoder_.render_chat_prompt(r, nullptr, nullptr, r.add_generation_prompt, nullptr, &template_error);
  if (template_error) return send_error(res, *template_error);
  send_json(res, 200, json{{"prompt", prompt}});
}

void GenerationHandler::tokenize(const std::string& body, httplib::Response& res) const {
  answer_tokenize(body, res, [&](const json& j, json& out) {
    return tokenize_request(j, encoder_, engine_.tokenizer(), engine_.context_length(), out);
  }, limits_, engine_.model_name());
}

void GenerationHandler::detokenize(const std::string& body, httplib::Response& res) const {
  answer_tokenize(body, res, [&](const json& j, json& out) { return detokenize_request(j, engine_.tokenizer(), out); }, limits_,
                  engine_.model_name());
}

std::optional<ApiError> GenerationHandler::admit(const GenerationRequest& r,
                                                 const std::vector<std::vector<int32_t>>& prompts,
                                                 const httplib::Request& req, httplib::Response& res,
                                                 std::shared_ptr<gateway::RequestLease>& lease) const {
  auto who = gateway_->authenticate(req.get_header_value("Authorization"));
  if (!who.ok()) return unauthorized(who.status().message());
  std::optional<gateway::SloClass> cls;
  if (!r.slo_class.empty()) cls = gateway::parse_slo_class(r.slo_class);
  // The token estimate: every prompt plus the most each of its n choices may generate.
  double tokens = 0;
  for (const auto& p : prompts) {
    const int64_t gen = r.params.max_tokens > 0 ? r.params.max_tokens
                                                 : std::max<int64_t>(0, engine_.context_length() - static_cast<int64_t>(p.size()));
    tokens += static_cast<double>(p.size()) + static_cast<double>(r.n) * static_cast<double>(gen);
  }
  gateway::RateLimitState state;
  auto out = gateway_->admit(who.value(), r.model.empty() ? engine_.model_name() : r.model, cls, tokens, &state);
  set_rate_limit_headers(res, state);
  if (auto* refusal = std::get_if<gateway::Refusal>(&out)) return refusal_error(*refusal, res);
  lease = std::get<std::shared_ptr<gateway::RequestLease>>(std::move(out));
  return std::nullopt;
}

ResponseMeta GenerationHandler::new_meta(Endpoint endpoint) const {
  return ResponseMeta{
      make_response_id(endpoint == Endpoint::ChatCompletions ? "chatcmpl-" : "cmpl-"),
      unix_seconds(), engine_.model_name()};
}

PieceFn GenerationHandler::piece_fn() const {
  const tokenizer::Tokenizer* tok = &engine_.tokenizer();
  return [tok](int32_t id) { return tok->token_to_piece(id); };
}

std::shared_ptr<void> GenerationHandler::hold_open() const {
  open_->fetch_add(1);
  return std::shared_ptr<void>(nullptr, [n = open_](void*) { n->fetch_sub(1); });
}

void GenerationHandler::handle(Endpoint endpoint, const httplib::Request& req, const std::string& body,
                               httplib::Response& res) const {
  const auto refuse_if_stopping = [&] {
    if (!stopping_ || !stopping_->load()) return false;
    send_error(res, unavailable("The server is shutting down."));
    // The client should go elsewhere (or come back after a restart), not reuse this
    // connection: it is closed after the response.
    res.set_header("Retry-After", "1");
    close_connection_after_response(res);
    return true;
  };
  // Once before counting (so refused requests do not hold the shutdown back), and once
  // after (both sequentially consistent): either this request sees the shutdown and is
  // refused, or the server sees it open and waits for its end.
  if (refuse_if_stopping()) return;
  std::shared_ptr<void> open = hold_open();
  if (refuse_if_stopping()) return;
  if (auto err = check_json_depth(body, limits_.max_json_depth)) {
    send_error(res, *err);
    return;
  }
  ParsedRequest parsed = endpoint == Endpoint::ChatCompletions ? parse_chat_request(body, limits_.max_grammar_states)
                                                                : parse_completion_request(body, limits_.max_grammar_states);
  if (!parsed.ok()) {
    send_error(res, *parsed.error);
    return;
  }
  if (auto err = check_request_limits(parsed.request, limits_)) {
    send_error(res, *err);
    return;
  }
  parsed.request.params.max_tokens = effective_max_tokens(parsed.request, limits_);
  const GenerationRequest& r = parsed.request;
  if (auto err = check_model(r, engine_.model_name())) {
    send_error(res, *err);
    return;
  }
  std::vector<std::vector<int32_t>> prompts;
  ToolSyntax tool_syntax = ToolSyntax::kWrapper;
  if (auto err = encoder_.encode(r, engine_.context_length(), prompts, &tool_syntax)) {
    send_error(res, *err);
    return;
  }
  if (r.tools.active() && tool_syntax != r.tools.syntax) {  // the template's own call syntax
    parsed.request.tools.syntax = tool_syntax;
    parsed.request.params.grammar = tools_grammar(parsed.request.tools);
  }
  if (auto err = check_grammar_size(r, limits_)) {
    send_error(res, *err);
    return;
  }
  if (auto err = check_prompt_tokens(r, prompts, limits_)) {
    send_error(res, *err);
    return;
  }
  std::shared_ptr<gateway::RequestLease> lease;
  if (gateway_) {
    if (auto err = admit(r, prompts, req, res, lease)) {
      send_error(res, *err);
      return;
    }
  }
  auto streams = std::make_unique<ChoiceStreams>();
  streams->set_lease(std::move(lease));
  if (auto err = streams->submit(engine_, r, prompts)) {
    if (err->status == 429) res.set_header("Retry-After", "1");
    send_error(res, *err);
    return;
  }
  if (r.stream) {
    respond_stream(r, std::move(streams), std::move(open), req, res);
  } else {
    respond_full(r, std::move(streams), std::move(open), req, res);
  }
}

/// Output of a non-streamed request, gathered from its choices' streams.
struct GenerationHandler::FullResult {
  GenerationRequest request;
  std::unique_ptr<ChoiceStreams> streams;
  std::vector<ChoiceResult> choices;
  std::vector<LogprobHold> logprob_holds;  // per choice
  std::string error;
  bool aborting = false;
  bool client_closed = false;  // the abort came from the client's end of the connection
  std::chrono::steady_clock::time_point abort_deadline;
};

bool GenerationHandler::collect(FullResult& f, std::chrono::milliseconds budget) const {
  const auto until = std::chrono::steady_clock::now() + budget;
  while (!f.streams->done()) {
    if (!f.aborting && client_disconnected()) {
      // The client hung up before its answer: nobody will read it (a half-closed one may:
      // it reads that it closed, not that the server is stopping).
      f.streams->abort_all();
      f.aborting = true;
      f.client_closed = true;
      f.abort_deadline = std::chrono::steady_clock::now() + kAbortGrace;
    }
    if (!f.aborting && stopping_ && stopping_->load()) {
      f.streams->abort_all();
      f.aborting = true;
      f.abort_deadline = std::chrono::steady_clock::now() + kAbortGrace;
    }
    const auto now = std::chrono::steady_clock::now();
    if (f.aborting && now > f.abort_deadline) return true;
    if (now >= until) return false;
    ChoiceStreams::Event ev;
    if (!f.streams->next(ev, std::min<std::chrono::milliseconds>(
                                 kPollInterval, std::chrono::duration_cast<std::chrono::milliseconds>(until - now) +
                                                    std::chrono::milliseconds(1)))) {
      continue;
    }
    ChoiceResult& c = f.choices[static_cast<size_t>(ev.choice)];
    c.text += ev.delta.text;
    if (f.request.want_logprobs()) {
      std::vector<engine::TokenLogprob> sent = f.logprob_holds[static_cast<size_t>(ev.choice)].take(ev.delta);
      c.logprobs.insert(c.logprobs.end(), std::make_move_iterator(sent.begin()), std::make_move_iterator(sent.end()));
    }
    if (ev.delta.finish != engine::FinishReason::None) c.finish = ev.delta.finish;
    if (ev.delta.finish == engine::FinishReason::Error && f.error.empty()) {
      f.error = ev.delta.error.empty() ? "generation failed" : ev.delta.error;
    }
  }
  return true;
}

std::pair<int, std::string> GenerationHandler::full_response(FullResult& f) const {
  if (f.error.rfind("server_overloaded", 0) == 0) {  // shed: past its class's maximum queue time
    if (gateway_) gateway_->count_refusal("queue_timeout");
    const ApiError e = overloaded("The server is overloaded: " + f.error.substr(f.error.find(':') + 2) + ". Please retry later.");
    return {e.status, e.body()};
  }
  if (!f.error.empty()) {
    PDS_LOG_ERROR("generation failed: {}", f.error);
    const ApiError e = server_error(f.error);
    return {e.status, e.body()};
  }
  for (const auto& c : f.choices) {
    if (c.finish == engine::FinishReason::Abort || c.finish == engine::FinishReason::None) {
      const ApiError e = f.client_closed ? aborted_by_client() : aborted_by_shutdown();
      return {e.status, e.body()};
    }
  }
  const GenerationRequest& r = f.request;
  const ResponseMeta meta = new_meta(r.endpoint);
  json body =
      r.endpoint == Endpoint::ChatCompletions
          ? chat_response(meta, f.choices, f.streams->usage(), r.want_logprobs(), piece_fn())
          : completion_response(meta, f.choices, f.streams->usage(), r.want_logprobs(), piece_fn());
  if (r.tools.active()) apply_tool_calls(body, r.tools.syntax);
  return {200, dump_json(body)};
}

void GenerationHandler::respond_full(const GenerationRequest& r, std::unique_ptr<ChoiceStreams> streams,
                                     std::shared_ptr<void> open, const httplib::Request& req,
                                     httplib::Response& res) const {
  auto f = std::make_shared<FullResult>();
  f->request = r;
  f->streams = std::move(streams);
  f->choices.resize(static_cast<size_t>(f->streams->size()));
  for (size_t i = 0; i < f->choices.size(); ++i) {
    f->choices[i].index = static_cast<int>(i);
    f->logprob_holds.emplace_back(piece_fn());
  }
  // A class with a maximum queue time: its 503 must come as a status, so the 200 and the
  // heartbeats wait until that time has passed.
  auto first_wait = kHeartbeatAfter;
  if (const gateway::RequestLease* l = f->streams->lease(); l && l->policy().max_queue_s > 0)
    first_wait = std::max(first_wait, std::chrono::milliseconds(static_cast<int64_t>(l->policy().max_queue_s * 1000) + 500));
  if (collect(*f, first_wait)) {
    auto [status, body] = full_response(*f);
    if (status == 503 && f->error.rfind("server_overloaded", 0) == 0) res.set_header("Retry-After", "1");
    res.status = status;
    res.set_content(body, "application/json");
    return;
  }
  // A long request: answer 200 now and send a space (JSON allows leading white space)
  // every kHeartbeatInterval until the body is ready. A failed write means the client
  // went away: abort, so its KV blocks are freed at the next engine step. An error after
  // this point arrives as the error object with status 200.
  res.status = 200;
  set_streamed_content(req, res, "application/json", [this, f, open](size_t, httplib::DataSink& sink) {
    if (!collect(*f, kHeartbeatInterval)) {
      if (!sink.write(" ", 1)) {
        f->streams->abort_all();
        return false;
      }
      return true;
    }
    const std::string body = full_response(*f).second;
    const bool ok = sink.write(body.data(), body.size());
    sink.done();
    return ok;
  });
}

void GenerationHandler::respond_stream(const GenerationRequest& r,
                                       std::unique_ptr<ChoiceStreams> streams, std::shared_ptr<void> open,
                                       const httplib::Request& req, httplib::Response& res) const {
  // The session lives in the provider; when httplib destroys the provider (stream done,
  // client gone, server stopping) the ChoiceStreams destructor aborts what is unfinished.
  auto session = std::make_shared<StreamSession>(r.endpoint, new_meta(r.endpoint),
                                                 std::move(streams), r.want_logprobs(),
                                                 r.include_usage, piece_fn(), stopping_);
  if (r.tools.active()) session->enable_tool_calls(r.tools.syntax);
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  set_streamed_content(
      req, res, kSseContentType,
      [session, open](size_t /*offset*/, httplib::DataSink& sink) { return session->pump(sink); });
}

}  // namespace pdserve::server
