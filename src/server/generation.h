// The bridge from a validated request to the engine: prompt tokenization (chat template,
// BOS, context check) and one engine request per choice, with their delta streams merged.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/auto_reset_event.h"
#include "engine/engine.h"
#include "engine/request_stream.h"
#include "gateway/gateway.h"
#include "server/api_error.h"
#include "server/openai_protocol.h"
#include "server/openai_response.h"
#include "tokenizer/chat_jinja.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace pdserve::server {

/// Turns request prompts into token ids.
class PromptEncoder {
 public:
  /// `jinja` (optional): the model's own chat template, rendered for chat requests with
  /// `template_now` as the date it sees; when it fails for a request, the reason is
  /// logged and `chat_template` (the built-in renderer) is used instead.
  /// `template_kwargs` (an object, or null): the Jinja template's extra variables for every
  /// request (--chat-template-kwargs); a request's chat_template_kwargs add to them and win.
  PromptEncoder(const tokenizer::Tokenizer& tok, tokenizer::ChatTemplateKind chat_template,
                std::shared_ptr<const tokenizer::JinjaChatTemplate> jinja = nullptr, std::time_t template_now = 0,
                json template_kwargs = nullptr);

  /// Completions: each text prompt with add_bos = vocab().add_bos, parse_special = false;
  /// token prompts as given (ids checked against the vocabulary). Chat: the messages
  /// rendered with the chat template, tokenized with parse_special = true and BOS added
  /// unless the rendered text already starts with it. Errors (400, param prompt/messages):
  /// an empty prompt, an id outside the vocabulary, a prompt that leaves no room in a
  /// context of `context_length` tokens (code "context_length_exceeded"; 0 ⇒ unchecked) —
  /// for text, already by its byte length when that exceeds what the context can hold.
  /// `tool_syntax` (optional): the tool-call syntax the chat prompt asked for (see
  /// render_chat_prompt).
  std::optional<ApiError> encode(const GenerationRequest& req, int context_length,
                                 std::vector<std::vector<int32_t>>& out, ToolSyntax* tool_syntax = nullptr) const;

  /// The prompt text the chat template makes of `messages` (with the generation prompt).
  std::string render(const std::vector<tokenizer::ChatMessage>& messages) const;

  /// The chat prompt text of `req` (Jinja template when there is one and it renders,
  /// else the built-in renderer). `content` (optional) gets the message-content spans;
  /// `*bos_stripped` is set when a leading BOS text was removed because the tokenizer
  /// adds BOS itself.
  /// With a Jinja template, `req.template_messages` and the request's tools go to the
  /// template when it renders tools (and tool-call turns, if the conversation has them);
  /// otherwise the messages in the tool wire format with the tools system prompt.
  /// `*tool_syntax` (optional) gets the call syntax the prompt asks for: the template's
  /// native one (tool_syntax.h) when the template rendered the tools and defines one, else
  /// kWrapper — then, if the template rendered the tools, tool_syntax_instructions() is
  /// appended to the system message (one is added when there is none).
  /// `error` (optional): set, and "" returned, when the template fails with the request's
  /// chat_template_kwargs but renders without them — the request's variables are at fault (a
  /// 400 naming chat_template_kwargs), not the template, so there is no fallback.
  std::string render_chat_prompt(const GenerationRequest& req, std::vector<tokenizer::TextSpan>* content,
                                 bool* bos_stripped = nullptr, bool add_generation_prompt = true,
                                 ToolSyntax* tool_syntax = nullptr, std::optional<ApiError>* error = nullptr) const;

  /// The call syntax the Jinja template defines (kWrapper: none, or no template).
  ToolSyntax template_tool_syntax() const { return template_syntax_; }

  /// Bytes one token covers at most (0: the vocabulary gives no bound). A text prompt
  /// longer than context_length × this is refused before it is tokenized.
  size_t max_bytes_per_token() const { return max_bytes_per_token_; }

 private:
  std::optional<ApiError> check_bytes(size_t bytes, int max_tokens, const GenerationRequest& req) const;

  const tokenizer::Tokenizer& tok_;
  tokenizer::ChatTemplateKind chat_template_;
  std::shared_ptr<const tokenizer::JinjaChatTemplate> jinja_;
  ToolSyntax template_syntax_ = ToolSyntax::kWrapper;
  std::time_t template_now_ = 0;
  json template_kwargs_;  // --chat-template-kwargs (null: none)
  std::string bos_text_, eos_text_;
  size_t max_bytes_per_token_ = 0;
};

/// The engine requests of one API request (prompts × n choices), read as one stream of
/// (choice index, delta) events. Destroying it aborts every request that has not
/// finished, so KV blocks are freed however the handler ends.
class ChoiceStreams {
 public:
  ChoiceStreams() = default;
  ~ChoiceStreams() {
    abort_all();
    if (lease_) lease_->finish(usage().prompt_tokens + usage().completion_tokens);
  }
  ChoiceStreams(const ChoiceStreams&) = delete;
  ChoiceStreams& operator=(const ChoiceStreams&) = delete;

  /// Submits choice i = p * n + k for prompt p with seed + k (when a seed is given). On
  /// an engine error, aborts what was already submitted and returns a 400 error.
  std::optional<ApiError> submit(engine::Engine& engine, const GenerationRequest& req,
                                 const std::vector<std::vector<int32_t>>& prompts);
  /// The gateway's hold on this request (may be null): submit() takes its class and
  /// cache namespace, tokens are reported to it, and it ends with these streams.
  void set_lease(std::shared_ptr<gateway::RequestLease> lease) { lease_ = std::move(lease); }
  const gateway::RequestLease* lease() const { return lease_.get(); }

  struct Event {
    int choice = 0;
    engine::StreamDelta delta;
  };
  /// The next delta of any unfinished choice, waiting up to `timeout` (returning as soon
  /// as one is pushed); false on timeout or when all choices are finished.
  bool next(Event& out, std::chrono::milliseconds timeout);

  /// True when every choice has delivered its final delta.
  bool done() const { return unfinished_ == 0; }
  int size() const { return static_cast<int>(slots_.size()); }
  /// Asks the engine to stop every unfinished choice (their final Abort deltas follow).
  void abort_all();
  /// Token counts so far: prompt/cached tokens once per prompt, completion tokens summed.
  UsageCounts usage() const;

 private:
  struct Slot {
    std::shared_ptr<engine::RequestStream> stream;
    bool finished = false;
    bool first_of_prompt = false;
    int prompt_tokens = 0;
    int cached_tokens = 0;
    int completion_tokens = 0;
  };
  void record(Slot& s, const engine::StreamDelta& d);

  std::vector<Slot> slots_;
  std::shared_ptr<AutoResetEvent> ready_ = std::make_shared<AutoResetEvent>();  // raised by every push
  int unfinished_ = 0;
  size_t cursor_ = 0;
  int completion_total_ = 0;  // over all choices, for the lease
  std::shared_ptr<gateway::RequestLease> lease_;
};

}  // namespace pdserve::server
