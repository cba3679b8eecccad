// OutputProcessor: the per-token output pipeline of one choice (end-of-generation token ▸
// detokenize ▸ stop strings ▸ length ▸ finish reason, logprobs), used wherever generated
// tokens become stream deltas: the engine, the router's copy of a routed choice, test fakes.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>

#include "engine/request_stream.h"
#include "engine/sampling_params.h"
#include "engine/stop_checker.h"
#include "tokenizer/tokenizer.h"

namespace pdserve::engine {

/// Turns the generated tokens of one choice into the content of its deltas. A token ends
/// generation with Stop when it is an end-of-generation token (unless ignore_eos; such a
/// token is counted but never detokenized) or one of stop_token_ids (detokenized only with
/// include_stop_str_in_output), or completes a stop string (with a token after the
/// min_tokens-th, as vLLM; returned only with include_stop_str_in_output), else with Length
/// when it brings num_generated() to max_new_tokens. Text that could begin a stop string,
/// and an incomplete UTF-8 character, is held back across tokens and flushed at the end;
/// a matched stop string and everything after it is never emitted.
class OutputProcessor {
 public:
  /// max_new_tokens for a caller that learns the length end elsewhere (e.g. from a worker).
  static constexpr int kNoLimit = std::numeric_limits<int>::max();

  /// `max_new_tokens`: generation ends with Length once that many tokens were generated
  /// (the caller folds max_tokens and the context end into it; 0 ends at the first token).
  /// `tok` must outlive the processor.
  OutputProcessor(const tokenizer::Tokenizer& tok, const SamplingParams& params, int max_new_tokens);

  /// Adds generated token `token` to `d`: its id, `logprob` when the request asked for
  /// logprobs (top_logprobs >= 0) and one is given, and the text now safe to emit. Returns
  /// why generation ends with this token, None if it goes on; on an end, d.text also holds
  /// the flushed held-back text. Call no more after an end.
  FinishReason add_token(int32_t token, std::optional<TokenLogprob> logprob, StreamDelta& d);

  /// Generation ends for a reason from outside (a worker's finish, the end of a fake's
  /// output): appends the held-back text to d.text.
  void flush(StreamDelta& d);

  /// Tokens given to add_token so far (a final end-of-generation token included).
  int num_generated() const { return generated_; }
  const tokenizer::Tokenizer& tokenizer() const { return tok_; }

 private:
  const tokenizer::Tokenizer& tok_;
  const bool ignore_eos_;
  const bool logprobs_;
  const bool include_stop_;
  const int min_tokens_;
  const std::vector<int32_t> stop_token_ids_;
  const int max_new_tokens_;
  int generated_ = 0;
  tokenizer::StreamDecoder decoder_;
  StopChecker stop_;
};

}  // namespace pdserve::engine
