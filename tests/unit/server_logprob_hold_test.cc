// LogprobHold: logprobs are given out with their token's text; at a stop, those of tokens
// whose text was cut are dropped; an end-of-generation token (no text) is kept; any other
// end gives out everything.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "server/logprob_hold.h"

namespace pdserve::server {
namespace {

using engine::FinishReason;
using engine::StreamDelta;
using engine::TokenLogprob;

const std::map<int32_t, std::string> kPieces = {{1, " Sound"}, {2, " L"}, {3, "LC"}, {4, ""}, {5, " end"}};

PieceFn pieces() {
  return [](int32_t id) { return kPieces.at(id); };
}

StreamDelta delta(std::vector<int32_t> ids, std::string text, FinishReason finish = FinishReason::None) {
  StreamDelta d;
  for (int32_t id : ids) d.logprobs.push_back(TokenLogprob{id, -1.f, {}});
  d.tokens = std::move(ids);
  d.text = std::move(text);
  d.finish = finish;
  return d;
}

std::vector<int32_t> ids(const std::vector<TokenLogprob>& lps) {
  std::vector<int32_t> out;
  for (const auto& lp : lps) out.push_back(lp.token);
  return out;
}

TEST(LogprobHold, HeldWithTheirTextAndDroppedWithAStopString) {
  LogprobHold h(pieces());
  EXPECT_EQ(ids(h.take(delta({1}, " Sound"))), (std::vector<int32_t>{1}));
  // " L" could begin the stop string " LLC": its text is held, so is its logprob.
  EXPECT_TRUE(h.take(delta({2}, "")).empty());
  // "LC" completes it: text " Sound" only, and neither " L" nor "LC" is given out.
  EXPECT_TRUE(h.take(delta({3}, "", FinishReason::Stop)).empty());
}

TEST(LogprobHold, ATokenPartlySentIsKept) {
  LogprobHold h(pieces());
  // Stop string "LLC" (beginning inside " L"): the text is " Sound L"; " L" was partly sent.
  EXPECT_EQ(ids(h.take(delta({1, 2}, " Sound"))), (std::vector<int32_t>{1}));
  EXPECT_EQ(ids(h.take(delta({3}, " L", FinishReason::Stop))), (std::vector<int32_t>{2}));
}

TEST(LogprobHold, EndOfGenerationAndLengthEnds) {
  LogprobHold eos(pieces());
  EXPECT_EQ(ids(eos.take(delta({1, 4}, " Sound", FinishReason::Stop))), (std::vector<int32_t>{1, 4}));
  LogprobHold length(pieces());
  EXPECT_TRUE(length.take(delta({2}, "")).empty());
  EXPECT_EQ(ids(length.take(delta({5}, " L end", FinishReason::Length))), (std::vector<int32_t>{2, 5}));
  LogprobHold aborted(pieces());
  EXPECT_TRUE(aborted.take(delta({2}, "")).empty());
  EXPECT_EQ(ids(aborted.take(delta({}, "", FinishReason::Abort))), (std::vector<int32_t>{2}));
}

}  // namespace
}  // namespace pdserve::server
