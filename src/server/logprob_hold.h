// LogprobHold: the token logprobs of one choice, given out only as their text is: a token
// whose text is held back (a possible stop string) has its logprob held with it, and at a
// stop the logprobs of tokens whose text was cut (the stop string's) are dropped, so the
// logprob tokens spell the text returned (llama.cpp's server trims the stop word's
// probabilities the same way). Streamed and whole responses both pass through it, so they
// carry the same entries.
#pragma once

#include <cstddef>
#include <deque>
#include <vector>

#include "engine/request_stream.h"
#include "server/openai_response.h"

namespace pdserve::server {

class LogprobHold {
 public:
  explicit LogprobHold(PieceFn piece) : piece_(std::move(piece)) {}

  /// Takes one delta of the choice: `d.logprobs` join the held ones, `d.text` counts as sent.
  /// Returns the entries whose token's text has now (partly) been sent, in order; a token
  /// with no text (a control token, EOS) once the text before it has. On d.finish: Stop
  /// drops the entries whose text was never sent; any other end gives out all that remain.
  std::vector<engine::TokenLogprob> take(const engine::StreamDelta& d);

 private:
  struct Entry {
    engine::TokenLogprob lp;
    size_t start = 0;   // bytes of token text before this token
    bool empty = true;  // the token has no text
  };
  PieceFn piece_;
  std::deque<Entry> held_;
  size_t piece_bytes_ = 0;  // bytes of every token's text so far
  size_t sent_bytes_ = 0;   // bytes of text sent so far
};

}  // namespace pdserve::server
