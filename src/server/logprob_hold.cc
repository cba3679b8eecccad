#include "server/logprob_hold.h"

namespace pdserve::server {

std::vector<engine::TokenLogprob> LogprobHold::take(const engine::StreamDelta& d) {
  for (const engine::TokenLogprob& lp : d.logprobs) {
    const size_t n = piece_(lp.token).size();
    held_.push_back({lp, piece_bytes_, n == 0});
    piece_bytes_ += n;
  }
  sent_bytes_ += d.text.size();
  std::vector<engine::TokenLogprob> out;
  auto sent = [&](const Entry& e) { return e.start < sent_bytes_ || (e.empty && e.start <= sent_bytes_); };
  while (!held_.empty() && sent(held_.front())) {
    out.push_back(std::move(held_.front().lp));
    held_.pop_front();
  }
  if (d.finish != engine::FinishReason::None) {
    if (d.finish != engine::FinishReason::Stop)
      for (Entry& e : held_) out.push_back(std::move(e.lp));
    held_.clear();
  }
  return out;
}

}  // namespace pdserve::server
