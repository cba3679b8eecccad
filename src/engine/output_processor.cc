#include "engine/output_processor.h"

#include <algorithm>
#include <utility>

namespace pdserve::engine {

OutputProcessor::OutputProcessor(const tokenizer::Tokenizer& tok, const SamplingParams& params, int max_new_tokens)
    : tok_(tok), ignore_eos_(params.ignore_eos), logprobs_(params.top_logprobs >= 0),
      include_stop_(params.include_stop_str_in_output), min_tokens_(params.min_tokens),
      stop_token_ids_(params.stop_token_ids), max_new_tokens_(max_new_tokens), decoder_(tok),
      stop_(params.stop, params.include_stop_str_in_output) {}

FinishReason OutputProcessor::add_token(int32_t token, std::optional<TokenLogprob> logprob, StreamDelta& d) {
  ++generated_;
  d.tokens.push_back(token);
  if (logprobs_ && logprob) d.logprobs.push_back(std::move(*logprob));
  if (!ignore_eos_ && tok_.is_eog(token)) {
    flush(d);
    return FinishReason::Stop;
  }
  if (std::find(stop_token_ids_.begin(), stop_token_ids_.end(), token) != stop_token_ids_.end()) {
    if (include_stop_) d.text += stop_.pass(decoder_.push(token));
    flush(d);
    return FinishReason::Stop;
  }
  d.text += stop_.feed(decoder_.push(token), /*may_stop=*/generated_ > min_tokens_);
  if (stop_.stopped()) return FinishReason::Stop;
  if (generated_ >= max_new_tokens_) {
    flush(d);
    return FinishReason::Length;
  }
  return FinishReason::None;
}

void OutputProcessor::flush(StreamDelta& d) {
  if (stop_.stopped()) return;
  d.text += stop_.feed(decoder_.flush());  // the decoder's bytes may still complete a stop string
  d.text += stop_.flush();
}

}  // namespace pdserve::engine
