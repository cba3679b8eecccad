// Limits on what one client request may ask for, beyond those the OpenAI protocol
// validation enforces as constants (openai_protocol.h: n 1..16, logprobs 0..5, at most 4
// stop strings, 64 choices). Each is a server flag (README "Limits"); a request over one
// gets a 400 invalid_request_error naming the field, and other requests are unaffected.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

#include "server/api_error.h"
#include "server/openai_protocol.h"

namespace pdserve::server {

/// --max-json-depth's default; also the bound for JSON text inside a request's strings (a
/// schema given as text, tool-call arguments), which the body's pre-scan does not see.
inline constexpr int kDefaultMaxJsonDepth = 64;

struct RequestLimits {
  int max_json_depth = kDefaultMaxJsonDepth;  // --max-json-depth: nesting of objects/arrays in the body
  size_t max_stop_bytes = 256;   // --max-stop-length: bytes of each stop string
  int max_prompt_tokens = 0;     // --max-prompt-tokens: tokens of each prompt (0 = context − 1)
  int max_completion_tokens = 0; // --max-completion-tokens: largest max_tokens (0 = the context end)
  size_t max_grammar_states = kDefaultMaxGrammarStates;  // --max-grammar-states: elements of a structured-output grammar after expansion
};

/// Members an object of a request body may have: the parser keeps objects in document
/// order (ordered_json), so finding a key costs a scan of the object, and an object of
/// 200,000 keys (a 2.7 MB logit_bias) took 50 s of CPU to parse.
inline constexpr int kMaxJsonObjectMembers = 10000;

/// 400 when `body` nests JSON arrays/objects deeper than `max_depth`, or has an object of
/// more than kMaxJsonObjectMembers members (a linear scan that skips strings; run before
/// parsing). Malformed JSON is left to the parser.
std::optional<ApiError> check_json_depth(std::string_view body, int max_depth);

/// 400 for a stop string longer than the limit (param "stop"), or a max_tokens /
/// max_completion_tokens above limits.max_completion_tokens when set (param "max_tokens").
std::optional<ApiError> check_request_limits(const GenerationRequest& req, const RequestLimits& limits);

/// The max_tokens a request runs with: its own, or limits.max_completion_tokens (when set)
/// for a request that gave none (which would otherwise run to the context end).
int effective_max_tokens(const GenerationRequest& req, const RequestLimits& limits);
/// 400 (param: the constraint's field, e.g. response_format or tools; grammar_too_large)
/// when the request's grammar expands to more than limits.max_grammar_states elements
/// (grammar::Grammar::expanded_size: every non-tail rule reference copied, so nested
/// repetitions multiply), found while parsing, before anything is expanded. The request
/// parser checks the same bound (parse_chat_request); this covers the tools grammar,
/// which is built after the prompt is rendered.
std::optional<ApiError> check_grammar_size(const GenerationRequest& req, const RequestLimits& limits);

/// 400 for a prompt of more than limits.max_prompt_tokens tokens (when set), code
/// "context_length_exceeded", param prompt/messages.
std::optional<ApiError> check_prompt_tokens(const GenerationRequest& req, const std::vector<std::vector<int32_t>>& prompts,
                                            const RequestLimits& limits);

}  // namespace pdserve::server
