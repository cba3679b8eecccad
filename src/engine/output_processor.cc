#include "engine/output_processor.h"

#include <utility>

namespace pdserve::engine {

OutputProcessor::OutputProcessor(const tokenizer::Tokenizer& tok, const SamplingParams& params, int max_new_tokens)
    : tok_(tok), ignore_eos_(params.ignore_eos), logprobs_(params.top_logprobs >= 0),
      max_new_tokens_(max_new_tokens), decoder_(tok), stop_(params.stop) {}

FinishReason OutputProcessor::add_token(int32_t token, std::optional<TokenLogprob> logprob, StreamDelta& d) {
  ++generated_;
  d.tokens.push_back(token);
  if (logprobs_ && logprob) d.logprobs.push_back(std::move(*logprob));
  if (!ignore_eos_ && tok_.is_eog(token)) {
    flush(d);
    return FinishReason::Stop;
  }
  d.text += stop_.feed(decoder_.push(token));
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
