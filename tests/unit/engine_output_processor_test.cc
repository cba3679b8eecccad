// engine::OutputProcessor on hand-made token streams: stop strings across tokens, EOS
// with and without ignore_eos, the length limit, held-back text flushed at the end,
// logprobs only when asked for.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "engine/output_processor.h"
#include "support/fake_engine.h"

namespace pdserve::engine {
namespace {

using testing::FakeTokenizer;

/// FakeTokenizer whose EOS ends generation (as in a real vocab) and has a visible piece,
/// so a test sees whether EOS is detokenized.
class EosTokenizer : public FakeTokenizer {
 public:
  EosTokenizer() { vocab_.eog_ids = {kEos}; }
  std::string token_to_piece(int32_t id) const override {
    return id == kEos ? "</s>" : FakeTokenizer::token_to_piece(id);
  }
};

/// One step's outcome: the delta's text and the finish reason.
struct Step {
  std::string text;
  FinishReason reason;
  bool operator==(const Step&) const = default;
};

void PrintTo(const Step& s, std::ostream* os) { *os << "{\"" << s.text << "\", " << finish_reason_name(s.reason) << "}"; }

/// Feeds `ids` one token per delta, as the engine does, until generation ends.
std::vector<Step> run(OutputProcessor& out, const std::vector<int32_t>& ids) {
  std::vector<Step> steps;
  for (int32_t id : ids) {
    StreamDelta d;
    const FinishReason r = out.add_token(id, std::nullopt, d);
    EXPECT_EQ(d.tokens, std::vector<int32_t>{id});
    steps.push_back({d.text, r});
    if (r != FinishReason::None) break;
  }
  return steps;
}

SamplingParams with_stop(std::vector<std::string> stop) {
  SamplingParams p;
  p.stop = std::move(stop);
  return p;
}

constexpr auto None = FinishReason::None;
constexpr auto Stop = FinishReason::Stop;
constexpr auto Length = FinishReason::Length;

TEST(OutputProcessor, StopStringAcrossTokensIsHeldBackAndNeverEmitted) {
  EosTokenizer tok;
  OutputProcessor out(tok, with_stop({"END"}), OutputProcessor::kNoLimit);
  EXPECT_EQ(run(out, tok.ids("aENDx")),
            (std::vector<Step>{{"a", None}, {"", None}, {"", None}, {"", Stop}}));
  EXPECT_EQ(out.num_generated(), 4);  // the stop string's tokens count

  OutputProcessor no_match(tok, with_stop({"END"}), OutputProcessor::kNoLimit);
  EXPECT_EQ(run(no_match, tok.ids("ENx")), (std::vector<Step>{{"", None}, {"", None}, {"ENx", None}}));
}

TEST(OutputProcessor, EosEndsWithStopIsNotDetokenizedAndFlushesHeldBackText) {
  EosTokenizer tok;
  OutputProcessor out(tok, with_stop({"END"}), OutputProcessor::kNoLimit);
  std::vector<int32_t> ids = tok.ids("aE");
  ids.push_back(FakeTokenizer::kEos);
  EXPECT_EQ(run(out, ids), (std::vector<Step>{{"a", None}, {"", None}, {"E", Stop}}));
  EXPECT_EQ(out.num_generated(), 3);  // EOS counts as a completion token
}

TEST(OutputProcessor, IgnoreEosGoesOnPastEos) {
  EosTokenizer tok;
  SamplingParams p;
  p.ignore_eos = true;
  OutputProcessor out(tok, p, 3);
  const std::vector<int32_t> ids = {FakeTokenizer::kEos, tok.ids("a")[0], FakeTokenizer::kEos};
  EXPECT_EQ(run(out, ids), (std::vector<Step>{{"</s>", None}, {"a", None}, {"</s>", Length}}));
}

TEST(OutputProcessor, LengthAtMaxNewTokensFlushesHeldBackText) {
  EosTokenizer tok;
  // "é" is two byte tokens: the first is held back until the character is complete.
  OutputProcessor utf8(tok, SamplingParams{}, 3);
  EXPECT_EQ(run(utf8, tok.ids("\xC3\xA9\xC3\xA9")),
            (std::vector<Step>{{"", None}, {"\xC3\xA9", None}, {"\xC3", Length}}));

  OutputProcessor stop_prefix(tok, with_stop({"END"}), 2);
  EXPECT_EQ(run(stop_prefix, tok.ids("aEND")), (std::vector<Step>{{"a", None}, {"E", Length}}));

  OutputProcessor first(tok, SamplingParams{}, 0);  // 0: the first token ends it
  EXPECT_EQ(run(first, tok.ids("ab")), (std::vector<Step>{{"a", Length}}));
}

TEST(OutputProcessor, FlushAtAnOutsideEndEmitsHeldBackTextButNothingAfterAStop) {
  EosTokenizer tok;
  OutputProcessor out(tok, with_stop({"END"}), OutputProcessor::kNoLimit);
  run(out, tok.ids("aEN"));
  StreamDelta d;
  out.flush(d);
  EXPECT_EQ(d.text, "EN");

  OutputProcessor stopped(tok, with_stop({"END"}), OutputProcessor::kNoLimit);
  run(stopped, tok.ids("END\xC3"));
  StreamDelta after;
  stopped.flush(after);
  EXPECT_EQ(after.text, "");
}

// vLLM's stop_token_ids end generation like EOS (even with ignore_eos), their text held out
// unless include_stop_str_in_output, which also returns a matched stop string; before
// min_tokens, stop strings pass (EOS and stop ids are not sampled then: the sampler's job).
TEST(OutputProcessor, StopTokenIdsIncludeStopStrAndMinTokens) {
  EosTokenizer tok;
  SamplingParams p = with_stop({"END"});
  p.stop_token_ids = {tok.ids("x")[0]};
  p.ignore_eos = true;
  OutputProcessor ids(tok, p, OutputProcessor::kNoLimit);
  EXPECT_EQ(run(ids, tok.ids("aEyxb")), (std::vector<Step>{{"a", None}, {"", None}, {"Ey", None}, {"", Stop}}));
  p.include_stop_str_in_output = true;
  OutputProcessor with_text(tok, p, OutputProcessor::kNoLimit);
  EXPECT_EQ(run(with_text, tok.ids("aEyxb")), (std::vector<Step>{{"a", None}, {"", None}, {"Ey", None}, {"x", Stop}}));
  OutputProcessor stop_str(tok, p, OutputProcessor::kNoLimit);
  EXPECT_EQ(run(stop_str, tok.ids("aENDz")), (std::vector<Step>{{"a", None}, {"", None}, {"", None}, {"END", Stop}}));
  // min_tokens 4 (vLLM's rule): a stop string ends generation when it ends in the text of the
  // 5th token or later, also if it began before; one completed by the 4th is passed over.
  SamplingParams m = with_stop({"END"});
  m.min_tokens = 4;
  OutputProcessor at_min(tok, m, OutputProcessor::kNoLimit);
  EXPECT_EQ(run(at_min, tok.ids("aENDz")), (std::vector<Step>{{"a", None}, {"", None}, {"", None}, {"END", None}, {"z", None}}));
  OutputProcessor across(tok, m, OutputProcessor::kNoLimit);
  EXPECT_EQ(run(across, tok.ids("abENDz")), (std::vector<Step>{{"a", None}, {"b", None}, {"", None}, {"", None}, {"", Stop}}));
  OutputProcessor early(tok, m, OutputProcessor::kNoLimit);
  EXPECT_EQ(run(early, tok.ids("ENDabEND")),
            (std::vector<Step>{{"", None}, {"", None}, {"END", None}, {"a", None}, {"b", None}, {"", None}, {"", None}, {"", Stop}}));
}

TEST(OutputProcessor, LogprobsOnlyWhenRequested) {
  EosTokenizer tok;
  TokenLogprob lp;
  lp.token = tok.ids("a")[0];
  lp.logprob = -0.5f;
  lp.top = {{lp.token, -0.5f}};

  SamplingParams none;  // top_logprobs -1
  OutputProcessor off(tok, none, OutputProcessor::kNoLimit);
  StreamDelta d0;
  off.add_token(lp.token, lp, d0);
  EXPECT_TRUE(d0.logprobs.empty());

  SamplingParams want;
  want.top_logprobs = 1;
  OutputProcessor on(tok, want, OutputProcessor::kNoLimit);
  StreamDelta d1;
  on.add_token(lp.token, lp, d1);
  on.add_token(lp.token, std::nullopt, d1);  // none given: none added
  ASSERT_EQ(d1.logprobs.size(), 1u);
  EXPECT_EQ(d1.logprobs[0].logprob, -0.5f);
  EXPECT_EQ(d1.logprobs[0].top, lp.top);
  EXPECT_EQ(d1.tokens.size(), 2u);
  EXPECT_EQ(d1.text, "aa");
}

}  // namespace
}  // namespace pdserve::engine
