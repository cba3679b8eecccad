#include "server/request_limits.h"

#include <string>
#include <vector>

#include "grammar/grammar.h"

namespace pdserve::server {

std::optional<ApiError> check_json_depth(std::string_view body, int max_depth) {
  int depth = 0;
  bool in_string = false;
  std::vector<int> members;  // per open level: an object's commas so far, -1 for an array
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (in_string) {
      if (c == '\\') ++i;  // the escaped character cannot end the string
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        return bad_request("The request body nests JSON deeper than " + std::to_string(max_depth) +
                           " levels (--max-json-depth).");
      }
      members.push_back(c == '{' ? 0 : -1);
    } else if (c == ']' || c == '}') {
      --depth;
      if (!members.empty()) members.pop_back();
    } else if (c == ',' && !members.empty() && members.back() >= 0) {
      if (++members.back() >= kMaxJsonObjectMembers)
        return bad_request("The request body has a JSON object of more than " + std::to_string(kMaxJsonObjectMembers) +
                           " members.");
    }
  }
  return std::nullopt;
}

std::optional<ApiError> check_request_limits(const GenerationRequest& req, const RequestLimits& limits) {
  for (const std::string& s : req.params.stop) {
    if (s.size() > limits.max_stop_bytes) {
      return bad_request("Invalid 'stop': a stop string is " + std::to_string(s.size()) +
                             " bytes long; this server accepts at most " + std::to_string(limits.max_stop_bytes) +
                             " bytes (--max-stop-length).",
                         std::string("stop"));
    }
  }
  if (limits.max_completion_tokens > 0 && req.params.min_tokens > limits.max_completion_tokens)
    return bad_request("Invalid 'min_tokens': " + std::to_string(req.params.min_tokens) +
                           " is more than this server generates per request (at most " +
                           std::to_string(limits.max_completion_tokens) + ", --max-completion-tokens).",
                       std::string("min_tokens"));
  if (limits.max_completion_tokens > 0 && req.params.max_tokens > limits.max_completion_tokens) {
    return bad_request("Invalid 'max_tokens': " + std::to_string(req.params.max_tokens) +
                           " is more than this server generates per request (at most " +
                           std::to_string(limits.max_completion_tokens) + ", --max-completion-tokens).",
                       std::string("max_tokens"));
  }
  return std::nullopt;
}

int effective_max_tokens(const GenerationRequest& req, const RequestLimits& limits) {
  if (req.params.max_tokens > 0 || limits.max_completion_tokens <= 0) return req.params.max_tokens;
  return limits.max_completion_tokens;
}

std::optional<ApiError> check_grammar_size(const GenerationRequest& req, const RequestLimits& limits) {
  if (req.params.grammar.empty()) return std::nullopt;
  const std::string param = req.grammar_param.empty() ? "grammar" : req.grammar_param;
  auto g = grammar::parse_gbnf(req.params.grammar, limits.max_grammar_states);
  if (g.code() == StatusCode::ResourceExhausted) return grammar_too_large(param, limits.max_grammar_states);
  return std::nullopt;  // a grammar that does not parse was refused when the request was read
}

std::optional<ApiError> check_prompt_tokens(const GenerationRequest& req, const std::vector<std::vector<int32_t>>& prompts,
                                            const RequestLimits& limits) {
  if (limits.max_prompt_tokens <= 0) return std::nullopt;
  for (const auto& p : prompts) {
    if (static_cast<int64_t>(p.size()) > limits.max_prompt_tokens) {
      return bad_request("The prompt is " + std::to_string(p.size()) + " tokens long; this server accepts at most " +
                             std::to_string(limits.max_prompt_tokens) + " prompt tokens per request (--max-prompt-tokens).",
                         std::string(req.prompt_param()), std::string("context_length_exceeded"));
    }
  }
  return std::nullopt;
}

}  // namespace pdserve::server
