// OpenAI request parsing and validation for /v1/completions and /v1/chat/completions.
// Pure functions (no engine, no sockets): a JSON body in, a GenerationRequest or an
// ApiError (status, message, param) out.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/sampling_params.h"
#include "server/api_error.h"
#include "server/json_util.h"
#include "server/structured_output.h"
#include "server/tool_calls.h"
#include "tokenizer/chat_template.h"

namespace pdserve::server {

enum class Endpoint { Completions, ChatCompletions };

/// Limits enforced by validation.
inline constexpr int kMaxLogprobs = 5;   // completions `logprobs`, chat `top_logprobs`
inline constexpr int kMaxStop = 4;       // entries of `stop`
inline constexpr int kMaxN = 16;         // `n`
inline constexpr int kMaxChoices = 64;   // prompts × n of one request
inline constexpr int kDefaultCompletionMaxTokens = 16;

/// One prompt of /v1/completions: text (tokenized by the server) or token ids (sent as is).
struct PromptInput {
  bool is_tokens = false;
  std::string text;
  std::vector<int32_t> tokens;
};

/// A validated generation request of either endpoint.
struct GenerationRequest {
  Endpoint endpoint = Endpoint::Completions;
  std::string model;                             // empty when absent
  std::vector<PromptInput> prompts;              // completions: one entry per prompt
  std::vector<tokenizer::ChatMessage> messages;  // chat
  engine::SamplingParams params;                 // max_tokens < 0 ⇒ until EOS/context end
  int n = 1;                                     // choices per prompt
  int priority = 0;                              // lower is served first (--scheduling-policy priority)
  std::string cache_salt;                        // prefix-cache namespace
  std::string slo_class;                         // "" | high | medium | low (extension; the API key must allow it)
  int kv_budget = 0;                             // KV tokens kept per sequence (0 = the server's --kv-budget)
  bool stream = false;
  bool include_usage = false;                    // stream_options.include_usage
  std::string user;
  ToolConfig tools;                              // chat tools / tool_choice / parallel_tool_calls
  std::string grammar_param;                     // the field params.grammar came from (limit errors)
  /// Chat: the messages for a Jinja chat template — role (developer → system), content
  /// as text (null kept for an assistant's tool-call turn), tool_calls, tool_call_id,
  /// name — before `messages` got the tool wire format and the tools system prompt.
  json template_messages = json::array();
  json template_tools;                           // chat: the request's `tools` as sent (null if none)
  /// Chat: more variables for a Jinja chat template (vLLM's and llama.cpp's
  /// chat_template_kwargs, e.g. {"enable_thinking": false}); null if none.
  json chat_template_kwargs;
  bool add_generation_prompt = true;             // /apply-template's add_generation_prompt

  bool want_logprobs() const { return params.top_logprobs >= 0; }
  /// Total number of choices in the response (prompts × n for completions).
  int num_choices() const {
    return n * (endpoint == Endpoint::Completions ? static_cast<int>(prompts.size()) : 1);
  }
  /// The request field the prompt came from ("prompt" or "messages"), for error params.
  const char* prompt_param() const {
    return endpoint == Endpoint::Completions ? "prompt" : "messages";
  }
};

/// The parsed request, or the error to answer with.
struct ParsedRequest {
  std::optional<ApiError> error;
  GenerationRequest request;
  bool ok() const { return !error.has_value(); }
};

/// Parses a /v1/completions body. Defaults: max_tokens 16 (explicit null ⇒ no limit),
/// temperature 1, top_p 1, no logprobs (-1), n 1. A structured-output constraint whose
/// grammar expands past `max_grammar_states` elements is a 400 (structured_output.h).
ParsedRequest parse_completion_request(std::string_view body, uint64_t max_grammar_states = kDefaultMaxGrammarStates);
ParsedRequest parse_completion_json(const json& body);

/// Parses a /v1/chat/completions body. max_completion_tokens (preferred) or max_tokens;
/// absent ⇒ -1 (until EOS or the context end). `logprobs: true` + `top_logprobs` 0..5.
/// Role "developer" is treated as "system"; text content parts are joined with "\n".
/// `max_grammar_states`: as for parse_completion_request (tools' parameter patterns too).
ParsedRequest parse_chat_request(std::string_view body, uint64_t max_grammar_states = kDefaultMaxGrammarStates);

/// Parses a POST /apply-template body {messages, tools?, add_generation_prompt?}
/// (llama.cpp's server endpoint): messages and tools validated as for chat.
ParsedRequest parse_apply_template_request(std::string_view body);
ParsedRequest parse_chat_json(const json& body);

/// 404 model_not_found (as OpenAI's API, vLLM and the gateway) unless `model` is empty or equals `served_model`.
std::optional<ApiError> check_model(const GenerationRequest& req, const std::string& served_model);

}  // namespace pdserve::server
