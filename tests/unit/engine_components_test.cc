// Stop strings, the sampler and sequence forks, on hand-made inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "engine/sampler.h"
#include "engine/sequence.h"
#include "engine/stop_checker.h"
#include "support/fake_engine.h"

namespace pdserve::engine {
namespace {

std::string feed_all(StopChecker& sc, const std::vector<std::string>& pieces) {
  std::string out;
  for (const auto& p : pieces) {
    out += sc.feed(p);
    if (sc.stopped()) return out;
  }
  return out + sc.flush();
}

TEST(StopChecker, MatchesAcrossPiecesAndHoldsBackPrefixes) {
  StopChecker sc({"END"});
  EXPECT_EQ(sc.feed("abc E"), "abc ");  // "E" could start "END"
  EXPECT_EQ(sc.feed("N"), "");
  EXPECT_EQ(sc.feed("Dxyz"), "");
  EXPECT_TRUE(sc.stopped());

  StopChecker no({"END"});
  EXPECT_EQ(feed_all(no, {"E", "NT", "ER"}), "ENTER");
  EXPECT_FALSE(no.stopped());

  StopChecker multi({"zz", "\n\n", "cat"});
  EXPECT_EQ(feed_all(multi, {"the c", "a", "r and the ca", "t"}), "the car and the ");
  EXPECT_TRUE(multi.stopped());

  StopChecker earliest({"bc", "a"});
  EXPECT_EQ(feed_all(earliest, {"xabc"}), "x");

  StopChecker none({});
  EXPECT_EQ(none.feed("anything"), "anything");
}

TEST(Sampler, GreedyTopKTopPAndLogprobs) {
  std::vector<float> logits = {1.f, 3.f, 2.f, 3.f, -1.f};
  SamplingParams p;
  p.temperature = 0.f;
  std::mt19937_64 rng(1);
  EXPECT_EQ(sample_token(logits.data(), 5, p, rng), 1);  // tie → lower id

  p.temperature = 1.f;
  p.top_k = 1;
  for (int i = 0; i < 20; ++i) EXPECT_EQ(sample_token(logits.data(), 5, p, rng), 1);

  p.top_k = 0;
  p.top_p = 0.5f;  // ids 1 and 3 each hold ~0.37 of the mass: the nucleus is {1, 3}
  for (int i = 0; i < 50; ++i) {
    int t = sample_token(logits.data(), 5, p, rng);
    EXPECT_TRUE(t == 1 || t == 3) << t;
  }

  TokenLogprob lp = token_logprobs(logits.data(), 5, 2, 3);
  double z = 0;
  for (float l : logits) z += std::exp(l);
  EXPECT_NEAR(lp.logprob, 2.0 - std::log(z), 1e-6);
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[0].first, 1);
  EXPECT_EQ(lp.top[1].first, 3);
  EXPECT_EQ(lp.top[2].first, 2);
}

TEST(Sampler, SeededDrawsAreReproducibleAndFollowTheDistribution) {
  std::vector<float> logits = {0.f, std::log(3.f)};  // p = 0.25, 0.75
  SamplingParams p;
  std::mt19937_64 a(42), b(42);
  int ones = 0;
  for (int i = 0; i < 4000; ++i) {
    int x = sample_token(logits.data(), 2, p, a);
    EXPECT_EQ(x, sample_token(logits.data(), 2, p, b));
    ones += x;
  }
  EXPECT_NEAR(ones / 4000.0, 0.75, 0.03);
}

TEST(Sampler, ArgmaxIsTheFirstLargestOnAnyLengthWithTiesAndInfinities) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> small(-3, 3);  // few distinct values: many ties
  for (int n : {1, 2, 15, 16, 17, 33, 512, 1000, 50257}) {
    std::vector<float> x(n);
    for (float& v : x) v = static_cast<float>(small(rng));
    int naive = 0;
    for (int i = 1; i < n; ++i)
      if (x[i] > x[naive]) naive = i;
    EXPECT_EQ(argmax(x.data(), n), naive) << n;
    x[n - 1] = 100.f;  // the largest in the tail past the 16-wide lanes
    EXPECT_EQ(argmax(x.data(), n), n - 1) << n;
  }
  std::vector<float> inf(40, -INFINITY);
  EXPECT_EQ(argmax(inf.data(), 40), 0);
  inf[37] = -1e30f;
  EXPECT_EQ(argmax(inf.data(), 40), 37);
  std::vector<float> nan_first = {NAN, 1.f, 2.f, 2.f};
  EXPECT_EQ(argmax(nan_first.data(), 4), 2);  // a NaN never wins
}

TEST(Sampler, TopPKeepsTheBestCandidatesInLogitOrderWithTiesByLowerId) {
  // 0.0 and -0.0 tie; the nucleus at top_p = 0.3 is the single best id after the ties break.
  std::vector<float> logits = {-0.f, 0.f, 2.f, 2.f, 1.f, -5.f};
  SamplingParams p;
  p.top_p = 0.3f;  // ids 2 and 3 each hold ~0.39: the nucleus is id 2 alone
  std::mt19937_64 rng(3);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(sample_token(logits.data(), 6, p, rng), 2);
  p.top_p = 0.7f;  // {2, 3}
  for (int i = 0; i < 50; ++i) {
    const int t = sample_token(logits.data(), 6, p, rng);
    EXPECT_TRUE(t == 2 || t == 3) << t;
  }
  p.top_p = 1.f;
  p.top_k = 3;  // {2, 3, 4}
  for (int i = 0; i < 100; ++i) {
    const int t = sample_token(logits.data(), 6, p, rng);
    EXPECT_TRUE(t >= 2 && t <= 4) << t;
  }
}

TEST(Sampler, ASubnormalTemperatureIsGreedyWithAndWithoutCuts) {
  // 1e-39 is a subnormal float: 1 / T overflows to inf, and 0 · inf gave NaN weights, which
  // drew the last candidate (the highest id, the k-th best, or the worst) instead of the best.
  std::vector<float> logits = {0.5f, 3.f, -1.f, 2.f, 1.f};
  std::mt19937_64 rng(1);
  for (float t : {1e-39f, 1e-45f, 1e-30f, 1e-6f}) {
    SamplingParams p;
    p.temperature = t;
    EXPECT_EQ(sample_token(logits.data(), 5, p, rng), 1) << t;
    p.top_k = 3;
    EXPECT_EQ(sample_token(logits.data(), 5, p, rng), 1) << t;
    p.top_k = 0;
    p.top_p = 0.9f;
    EXPECT_EQ(sample_token(logits.data(), 5, p, rng), 1) << t;
  }
}

TEST(Sampler, UncutSamplingFollowsTheSoftmaxOverALargeVocabulary) {
  // Neither top_k nor top_p: drawn in id order without a sort; the frequencies follow
  // softmax(logits / T) (a few buckets of a 50,257-id vocabulary, within ~4 standard deviations).
  const int n = 50257;
  std::vector<float> logits(n, 0.f);
  logits[17] = std::log(4000.f);    // ~4000 / (n + 4000 + 8000 - 2) ≈ 6.6 %
  logits[n - 1] = std::log(8000.f); // ≈ 13.3 %
  SamplingParams p;
  p.temperature = 1.f;
  std::mt19937_64 rng(11);
  const int draws = 4000;
  int a = 0, b = 0, low = 0;
  for (int i = 0; i < draws; ++i) {
    const int t = sample_token(logits.data(), n, p, rng);
    ASSERT_TRUE(t >= 0 && t < n);
    a += t == 17;
    b += t == n - 1;
    low += t < n / 2 && t != 17;
  }
  const double z = n - 2 + 4000.0 + 8000.0;
  EXPECT_NEAR(a / double(draws), 4000 / z, 0.015);  // ~4 standard deviations
  EXPECT_NEAR(b / double(draws), 8000 / z, 0.02);
  EXPECT_NEAR(low / double(draws), (n / 2 - 1) / z, 0.03);
  p.temperature = 0.5f;  // sharper: exp(2·log w) = w²
  int b2 = 0;
  for (int i = 0; i < draws; ++i) b2 += sample_token(logits.data(), n, p, rng) == n - 1;
  const double z2 = n - 2 + 4000.0 * 4000.0 + 8000.0 * 8000.0;
  EXPECT_NEAR(b2 / double(draws), 8000.0 * 8000.0 / z2, 0.03);
}

// OpenAI's formula: l[j] - c[j]·frequency - (c[j] > 0)·presence, plus logit_bias; ids out
// of range ignored; the model's logits untouched.
TEST(Sampler, AdjustLogitsAppliesPenaltiesOverGeneratedTokensAndTheBias) {
  const std::vector<float> logits = {1.f, 2.f, 3.f, 4.f, 5.f};
  SamplingParams p;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  p.logit_bias = {{4, -10.f}, {0, 2.f}, {9, 100.f}};
  // A prompt of {4, 4, 1}, then the generated tokens: the prompt does not count.
  const std::vector<int32_t> generated = {4, 4, 1, 2, 3, 2, 2, 7, -1};
  std::vector<float> out(5);
  adjust_logits(logits.data(), 5, p, generated.data(), generated.size(), 3, out.data());
  EXPECT_EQ(out, (std::vector<float>{3.f, 2.f, 3.f - 1.5f - 0.25f, 4.f - 0.5f - 0.25f, -5.f}));
  EXPECT_EQ(logits, (std::vector<float>{1.f, 2.f, 3.f, 4.f, 5.f}));
  EXPECT_TRUE(p.adjusts_logits());
  EXPECT_FALSE(SamplingParams().adjusts_logits());
  // The same tokens in another order give the same logits.
  const std::vector<int32_t> shuffled = {1, 4, 4, 7, 2, -1, 2, 3, 2};
  std::vector<float> again(5);
  adjust_logits(logits.data(), 5, p, shuffled.data(), shuffled.size(), 3, again.data());
  EXPECT_EQ(again, out);
  // Called again (the counts are per call, not carried over).
  adjust_logits(logits.data(), 5, p, shuffled.data(), shuffled.size(), 3, again.data());
  EXPECT_EQ(again, out);
}

// CTRL's repetition penalty (vLLM, llama.cpp): l / r for l > 0, l · r otherwise, once per id
// among the last n tokens of prompt and output (0 ⇒ all); before the OpenAI penalties.
TEST(Sampler, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogitsOfTheWindow) {
  const std::vector<float> logits = {2.f, -2.f, 4.f, 0.f, 6.f, 8.f};
  SamplingParams p;
  p.repetition_penalty = 2.f;
  EXPECT_TRUE(p.adjusts_logits());
  const std::vector<int32_t> tokens = {5, 0, 1, 1, 2, 3, 2};  // prompt {5, 0, 1}, output {1, 2, 3, 2}
  std::vector<float> out(6);
  adjust_logits(logits.data(), 6, p, tokens.data(), tokens.size(), 3, out.data());
  EXPECT_EQ(out, (std::vector<float>{1.f, -4.f, 2.f, 0.f, 6.f, 4.f}));  // the prompt counts too
  p.repetition_last_n = 4;  // {1, 2, 3, 2}
  adjust_logits(logits.data(), 6, p, tokens.data(), tokens.size(), 3, out.data());
  EXPECT_EQ(out, (std::vector<float>{2.f, -4.f, 2.f, 0.f, 6.f, 8.f}));
  p.repetition_last_n = 100;  // longer than the sequence: all of it
  adjust_logits(logits.data(), 6, p, tokens.data(), tokens.size(), 3, out.data());
  EXPECT_EQ(out, (std::vector<float>{1.f, -4.f, 2.f, 0.f, 6.f, 4.f}));
  // Then the frequency penalty over the output: token 2 (4 / 2 - 2·1) and 1 (-4 - 1).
  p.repetition_last_n = 0;
  p.frequency_penalty = 1.f;
  adjust_logits(logits.data(), 6, p, tokens.data(), tokens.size(), 3, out.data());
  EXPECT_EQ(out, (std::vector<float>{1.f, -5.f, 0.f, -1.f, 6.f, 4.f}));
}

// min-p (as vLLM): candidates at least min_p × the best one's probability at the temperature.
TEST(Sampler, MinPKeepsOnlyTokensWithinItsRatioOfTheMostLikely) {
  // Weights at T = 1: exp(0) = 1 for id 3, exp(-1) ≈ 0.37 for 0, exp(-2) ≈ 0.14 for 4,
  // exp(-5) ≈ 0.0067 for 1 and 2.
  const std::vector<float> logits = {4.f, 0.f, 0.f, 5.f, 3.f};
  std::mt19937_64 rng(5);
  SamplingParams p;
  p.temperature = 1.f;
  p.min_p = 0.2f;  // keeps {3, 0}
  for (int cut = 0; cut < 3; ++cut) {  // in id order; with top_k (sorted); with top_p (sorted)
    p.top_k = cut == 1 ? 4 : 0;
    p.top_p = cut == 2 ? 0.999f : 1.f;
    int seen[5] = {};
    for (int i = 0; i < 2000; ++i) ++seen[sample_token(logits.data(), 5, p, rng)];
    EXPECT_EQ(seen[1] + seen[2] + seen[4], 0) << cut;
    EXPECT_NEAR(seen[0] / 2000.0, std::exp(-1.0) / (1 + std::exp(-1.0)), 0.04) << cut;
  }
  p.top_k = 0;
  p.top_p = 1.f;
  p.temperature = 2.f;  // at T = 2 id 4's ratio is exp(-1) ≈ 0.37 ≥ 0.2: a candidate again
  int four = 0;
  for (int i = 0; i < 2000; ++i) four += sample_token(logits.data(), 5, p, rng) == 4;
  EXPECT_GT(four, 100);
  p.min_p = 1.f;  // only the most likely
  for (int i = 0; i < 200; ++i) EXPECT_EQ(sample_token(logits.data(), 5, p, rng), 3);
  p.min_p = 0.f;  // off: ids 1 and 2 (≈ 7.7 % together at T = 2) are drawn again
  int low = 0;
  for (int i = 0; i < 2000; ++i) {
    const int t = sample_token(logits.data(), 5, p, rng);
    low += t == 1 || t == 2;
  }
  EXPECT_GT(low, 60);
}

TEST(Sequence, ForkCopiesTheRequestStateButNoKvAndNothingGenerated) {
  testing::FakeTokenizer tok;
  SamplingParams p;
  p.stop = {"zz"};
  p.top_logprobs = 2;
  Sequence parent(7, tok.ids("abc"), p, std::make_shared<RequestStream>("7-0"), tok, 11, 8);
  parent.group = std::make_shared<RequestGroup>();
  parent.arrival_time = 1.5;
  parent.deadline = 9.5;
  parent.priority = 3;
  parent.cache_salt = "tenant";
  parent.cached_tokens = 2;
  parent.role_prompt_len = 2;
  parent.tokens.push_back(tok.ids("x")[0]);  // generated
  parent.num_computed = 4;
  parent.kv.block_table.blocks = {5};
  parent.kv.num_cached_blocks = 1;
  parent.num_preemptions = 1;
  StreamDelta d;
  parent.output.add_token(parent.tokens.back(), std::nullopt, d);

  auto stream = std::make_shared<RequestStream>("7-2");
  const std::unique_ptr<Sequence> c = parent.fork(stream, 42, 2);
  EXPECT_EQ(c->id, 7);
  EXPECT_EQ(c->choice_index, 2);
  EXPECT_EQ(c->stream, stream);
  EXPECT_EQ(c->group, parent.group);
  EXPECT_EQ(c->tokens, tok.ids("abc"));
  EXPECT_EQ(c->prompt_len, 3);
  EXPECT_EQ(c->params.stop, p.stop);
  EXPECT_EQ(c->params.top_logprobs, 2);
  EXPECT_EQ(c->max_len, 8);
  EXPECT_EQ(c->arrival_time, 1.5);
  EXPECT_EQ(c->deadline, 9.5);
  EXPECT_EQ(c->priority, 3);
  EXPECT_EQ(c->cache_salt, "tenant");
  EXPECT_EQ(c->cached_tokens, 2);
  EXPECT_EQ(c->role_prompt_len, 2);
  EXPECT_EQ(c->rng, std::mt19937_64(42));
  EXPECT_EQ(c->num_computed, 0);
  EXPECT_TRUE(c->kv.block_table.blocks.empty());
  EXPECT_EQ(c->kv.cache_node, nullptr);
  EXPECT_EQ(c->kv.num_cached_blocks, 0);
  EXPECT_EQ(c->num_preemptions, 0);
  EXPECT_EQ(c->kv_sink, nullptr);
  // Its own output: nothing generated yet, ends at max_len like the parent.
  EXPECT_EQ(c->output.num_generated(), 0);
  std::vector<FinishReason> reasons;
  for (int i = 0; i < 8 - 3; ++i) reasons.push_back(c->output.add_token(tok.ids("y")[0], std::nullopt, d));
  const auto None = FinishReason::None;
  EXPECT_EQ(reasons, (std::vector<FinishReason>{None, None, None, None, FinishReason::Length}));
}

}  // namespace
}  // namespace pdserve::engine
