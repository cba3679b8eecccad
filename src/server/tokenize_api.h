// POST /tokenize and /detokenize, in both shapes clients send: vLLM's
// ({prompt | messages, add_special_tokens?, return_token_strs?} → {count, max_model_len,
// tokens, token_strs?}) and llama.cpp's server's ({content, add_special?, parse_special?,
// with_pieces?} → {tokens}); /detokenize {tokens} → {prompt, content} (vLLM's and
// llama.cpp's key, the same text).
#pragma once

#include <optional>

#include "server/api_error.h"
#include "server/generation.h"
#include "server/json_util.h"
#include "tokenizer/tokenizer.h"

namespace pdserve::server {

/// The token ids of a /tokenize `body` into `out`, or the 4xx to answer. `messages` are
/// rendered and tokenized exactly as a chat completion's prompt (same template, tools,
/// chat_template_kwargs; add_generation_prompt as given, default true), so `count` is its
/// usage.prompt_tokens. A text is tokenized as /v1/completions does (`prompt`: BOS added
/// unless add_special_tokens is false, special-token text stays text) or with llama.cpp's
/// defaults (`content`: add_special false, parse_special true). A text longer than the
/// context can hold (in bytes, as /v1/completions checks) and a chat prompt of more tokens
/// than the context are 400s (code context_length_exceeded).
std::optional<ApiError> tokenize_request(const json& body, const PromptEncoder& enc, const tokenizer::Tokenizer& tok,
                                         int64_t context_length, json& out);

/// The text of a /detokenize `body`'s `tokens` into `out` ({"prompt", "content"}); control
/// tokens are written as their text (as vLLM's decode and llama.cpp's detokenize do). 400
/// for ids outside the vocabulary.
std::optional<ApiError> detokenize_request(const json& body, const tokenizer::Tokenizer& tok, json& out);

}  // namespace pdserve::server
