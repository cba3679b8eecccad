// OpenAI response shapes: full responses, streaming chunks, usage and logprobs objects.
// Pure functions: token pieces come from a PieceFn so tests need no tokenizer.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/request_stream.h"
#include "server/json_util.h"

namespace pdserve::server {

/// The text a token contributes (Tokenizer::token_to_piece).
using PieceFn = std::function<std::string(int32_t)>;

/// Fields shared by every object of one response.
struct ResponseMeta {
  std::string id;       // "cmpl-…" / "chatcmpl-…"
  int64_t created = 0;  // unix seconds
  std::string model;
};

/// One finished choice, accumulated from stream deltas.
struct ChoiceResult {
  int index = 0;
  std::string text;
  std::vector<engine::TokenLogprob> logprobs;
  engine::FinishReason finish = engine::FinishReason::None;
};

struct UsageCounts {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_tokens = 0;
};

/// A fresh id: prefix + 24 random hex digits.
std::string make_response_id(const std::string& prefix);
int64_t unix_seconds();

/// "stop", "length", "abort", "error"; null for FinishReason::None.
json finish_reason_json(engine::FinishReason r);

/// {prompt_tokens, completion_tokens, total_tokens, prompt_tokens_details:{cached_tokens}}.
json usage_json(const UsageCounts& u);

/// Logprobs are reported as finite numbers: -inf/NaN become -9999 (as OpenAI does).
double finite_logprob(float lp);

/// Completions logprobs object {tokens, token_logprobs, top_logprobs, text_offset}.
/// `text_offset` of each token is the index in the choice's text (as dump_json shows it) of
/// the character its first byte starts or continues; `chars` counts the text so far across
/// calls (a stream's chunks) and is updated.
json completion_logprobs_json(const std::vector<engine::TokenLogprob>& lps, const PieceFn& piece,
                              Utf8CharCounter* chars);

/// Chat logprob entries [{token, logprob, bytes, top_logprobs:[{token, logprob, bytes}]}].
json chat_logprob_content(const std::vector<engine::TokenLogprob>& lps, const PieceFn& piece);

/// Non-streaming /v1/completions response.
json completion_response(const ResponseMeta& meta, const std::vector<ChoiceResult>& choices,
                         const UsageCounts& usage, bool with_logprobs, const PieceFn& piece);

/// Non-streaming /v1/chat/completions response.
json chat_response(const ResponseMeta& meta, const std::vector<ChoiceResult>& choices,
                   const UsageCounts& usage, bool with_logprobs, const PieceFn& piece);

/// Streaming /v1/completions chunk with one choice. `logprobs` is null or a completions
/// logprobs object; `with_usage_field` adds "usage": null (stream_options.include_usage).
json completion_chunk(const ResponseMeta& meta, int index, const std::string& text, json logprobs,
                      engine::FinishReason finish, bool with_usage_field);

/// Streaming chat chunk with one choice: `delta` is e.g. {role, content}, {content} or {}.
json chat_chunk(const ResponseMeta& meta, int index, json delta, json logprobs,
                engine::FinishReason finish, bool with_usage_field);

/// The final usage chunk (choices: []) of a stream with include_usage.
json usage_chunk(const ResponseMeta& meta, const char* object, const UsageCounts& usage);

}  // namespace pdserve::server
