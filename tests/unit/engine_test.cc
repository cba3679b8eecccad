// Engine behaviour on the real stories260K model: reference equality, batch invariance,
// chunked prefill, preemption, stops, aborts, and that every KV block comes back.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <thread>

#include "support/engine_runner.h"
#include "support/pool_free.h"
#include "support/reference.h"

namespace pdserve {
namespace {

using testing::Completion;
using testing::drain;
using testing::make_engine;
using testing::submit;

engine::SamplingParams greedy(int max_tokens) {
  engine::SamplingParams p;
  p.temperature = 0.f;
  p.max_tokens = max_tokens;
  return p;
}

const std::vector<testing::ReferenceCase>& cases() {
  static const auto c = testing::load_reference("../shared/reference/stories260K.json");
  return c;
}

void expect_matches_reference(const Completion& c, const testing::ReferenceCase& r) {
  EXPECT_EQ(c.tokens, r.tokens) << "prompt '" << r.prompt << "'";
  EXPECT_EQ(c.text, r.text) << "prompt '" << r.prompt << "'";
}

TEST(Engine, GreedyMatchesReferenceWithLogprobs) {
  auto e = make_engine({});
  for (const auto& r : cases()) {
    EXPECT_EQ(e->tokenizer().encode(r.prompt, true), r.prompt_tokens);
    auto p = greedy(static_cast<int>(r.tokens.size()));
    p.top_logprobs = 5;
    Completion c = drain(*submit(*e, r.prompt_tokens, p));
    expect_matches_reference(c, r);
    EXPECT_EQ(c.finish, engine::FinishReason::Length);
    EXPECT_EQ(c.completion_tokens, static_cast<int>(r.tokens.size()));
    ASSERT_EQ(c.logprobs.size(), c.tokens.size());
    for (size_t step = 0; step < c.logprobs.size(); ++step) {
      const auto& ours = c.logprobs[step].top;
      const auto& ref = r.top_logprobs[step];
      ASSERT_EQ(ours.size(), 5u);
      // Compare by token id: near-ties may order differently, values must agree.
      for (const auto& ref_entry : ref) {
        const auto id = ref_entry.first;  // not a structured binding: clang 14 cannot capture one
        const auto ref_lp = ref_entry.second;
        auto it = std::find_if(ours.begin(), ours.end(), [&](const auto& e) { return e.first == id; });
        ASSERT_NE(it, ours.end()) << "prompt '" << r.prompt << "' step " << step << ": token " << id << " not in our top-5";
        EXPECT_NEAR(it->second, ref_lp, 1e-3) << "prompt '" << r.prompt << "' step " << step << " token " << id;
      }
      for (size_t k = 1; k < ours.size(); ++k) EXPECT_GE(ours[k - 1].second, ours[k].second);
      EXPECT_EQ(c.logprobs[step].token, c.tokens[step]);
    }
  }
  EXPECT_TRUE(testing::wait_pool_free(*e));
}

TEST(Engine, AllReferenceCasesBatchedTogetherMatch) {
  auto e = make_engine({});
  std::vector<std::shared_ptr<engine::RequestStream>> streams;
  for (const auto& r : cases()) streams.push_back(submit(*e, r.prompt_tokens, greedy(r.tokens.size())));
  for (size_t i = 0; i < cases().size(); ++i) expect_matches_reference(drain(*streams[i]), cases()[i]);
  EXPECT_TRUE(testing::wait_pool_free(*e));
}

TEST(Engine, ChunkedPrefillAndTinyBlocksMatch) {
  engine::EngineConfig cfg;
  cfg.max_batched_tokens = 3;  // every prompt is split into chunks of <= 3 tokens
  cfg.block_size = 2;
  auto e = make_engine(cfg);
  std::vector<std::shared_ptr<engine::RequestStream>> streams;
  for (const auto& r : cases()) streams.push_back(submit(*e, r.prompt_tokens, greedy(r.tokens.size())));
  for (size_t i = 0; i < cases().size(); ++i) expect_matches_reference(drain(*streams[i]), cases()[i]);
  EXPECT_TRUE(testing::wait_pool_free(*e));
}

TEST(Engine, PreemptionUnderATinyPoolGivesStandaloneOutput) {
  engine::EngineConfig cfg;
  cfg.block_size = 4;
  cfg.num_kv_blocks = 24;  // 96 tokens: one request (<= 77 tokens) fits, six at once do not
  auto e = make_engine(cfg);
  std::vector<std::shared_ptr<engine::RequestStream>> streams;
  for (int rep = 0; rep < 2; ++rep)
    for (const auto& r : cases()) streams.push_back(submit(*e, r.prompt_tokens, greedy(r.tokens.size())));
  for (size_t i = 0; i < streams.size(); ++i) expect_matches_reference(drain(*streams[i]), cases()[i % cases().size()]);
  EXPECT_TRUE(testing::wait_pool_free(*e));
  EXPECT_EQ(e->stats().kv_blocks_free + e->stats().kv_blocks_cached, 24);
}

TEST(Engine, SeededSamplingIsReproducibleInAnyBatch) {
  auto e = make_engine({});
  engine::SamplingParams p;
  p.temperature = 0.9f;
  p.top_p = 0.95f;
  p.top_k = 40;
  p.seed = 1234;
  p.max_tokens = 40;
  const auto& prompt = cases()[0].prompt_tokens;
  Completion alone = drain(*submit(*e, prompt, p));
  ASSERT_EQ(alone.tokens.size(), 40u);
  // Same request next to unseeded sampled and greedy requests of other prompts.
  std::vector<std::shared_ptr<engine::RequestStream>> noise;
  for (const auto& r : cases()) {
    engine::SamplingParams q;
    q.temperature = 1.0f;
    q.max_tokens = 30;
    noise.push_back(submit(*e, r.prompt_tokens, q));
  }
  auto again = submit(*e, prompt, p);
  for (const auto& r : cases()) noise.push_back(submit(*e, r.prompt_tokens, greedy(20)));
  EXPECT_EQ(drain(*again).tokens, alone.tokens);
  for (auto& s : noise) drain(*s);
  // A different seed gives a different continuation (40 sampled tokens).
  p.seed = 99;
  EXPECT_NE(drain(*submit(*e, prompt, p)).tokens, alone.tokens);
  EXPECT_TRUE(testing::wait_pool_free(*e));
}

// A resumed request (prompt + the k tokens already sent, original_prompt_len = the prompt)
// continues a seeded sampled stream exactly: the generator skips the k draws already made.
TEST(Engine, ResumedSeededStreamContinuesTheOriginal) {
  auto e = make_engine({});
  engine::SamplingParams p;
  p.temperature = 0.9f;
  p.top_k = 40;
  p.seed = 77;
  p.max_tokens = 30;
  const auto& prompt = cases()[0].prompt_tokens;
  const Completion full = drain(*submit(*e, prompt, p));
  ASSERT_EQ(full.tokens.size(), 30u);
  for (int k : {1, 11}) {
    std::vector<int32_t> resumed = prompt;
    resumed.insert(resumed.end(), full.tokens.begin(), full.tokens.begin() + k);
    engine::RequestOptions opts;
    opts.original_prompt_len = static_cast<int>(prompt.size());
    engine::SamplingParams rest = p;
    rest.max_tokens = 30 - k;
    auto s = e->submit_group(resumed, rest, opts);
    ASSERT_TRUE(s.ok()) << s.error();
    const Completion tail = drain(*s.value()[0]);
    EXPECT_EQ(tail.tokens, std::vector<int32_t>(full.tokens.begin() + k, full.tokens.end())) << "resumed after " << k;
  }
  EXPECT_TRUE(testing::wait_pool_free(*e));
}

TEST(Engine, StopStringEndsGenerationAndIsNotReturned) {
  auto e = make_engine({});
  const auto& r = cases()[0];  // ", there was a little girl named Lily. She loved ..."
  auto p = greedy(64);
  p.stop = {"Lily"};
  Completion c = drain(*submit(*e, r.prompt_tokens, p));
  EXPECT_EQ(c.finish, engine::FinishReason::Stop);
  EXPECT_EQ(c.text, r.text.substr(0, r.text.find("Lily")));
  // Stop strings split across tokens (" named L" + "ily") and multiple candidates.
  p.stop = {"zzz", "girl nam"};
  c = drain(*submit(*e, r.prompt_tokens, p));
  EXPECT_EQ(c.text, r.text.substr(0, r.text.find("girl nam")));
  EXPECT_TRUE(testing::wait_pool_free(*e));
}

TEST(Engine, MaxTokensAndContextEnd) {
  engine::EngineConfig cfg;
  cfg.ctx_size = 16;
  auto e = make_engine(cfg);
  const auto& r = cases()[0];
  for (int n : {1, 2, 3}) {
    Completion c = drain(*submit(*e, r.prompt_tokens, greedy(n)));
    EXPECT_EQ(c.tokens, std::vector<int32_t>(r.tokens.begin(), r.tokens.begin() + n));
    EXPECT_EQ(c.finish, engine::FinishReason::Length);
  }
  // max_tokens < 0: until the context (16 tokens) is full.
  Completion c = drain(*submit(*e, r.prompt_tokens, greedy(-1)));
  EXPECT_EQ(c.tokens.size() + r.prompt_tokens.size(), 16u);
  EXPECT_EQ(c.finish, engine::FinishReason::Length);
  // A prompt that fills the context is refused at submit.
  std::vector<int32_t> longp(16, 300);
  EXPECT_FALSE(e->submit(longp, greedy(1)).ok());
  EXPECT_FALSE(e->submit({}, greedy(1)).ok());
  EXPECT_FALSE(e->submit({1, 100000}, greedy(1)).ok());
  EXPECT_TRUE(testing::wait_pool_free(*e));
}

TEST(Engine, AbortFreesBlocks) {
  // A model slow enough (seconds to its 4096-token context) that only the abort ends it.
  engine::EngineConfig cfg;
  cfg.model_path = "../shared/models/synth-llama-small-f16.gguf";
  cfg.max_seqs = 2;
  auto e = make_engine(cfg);
  auto p = greedy(-1);
  p.ignore_eos = true;
  auto s = submit(*e, {1, 100, 200, 300, 400}, p);
  engine::StreamDelta d;
  ASSERT_TRUE(s->next(d, std::chrono::seconds(10)));
  testing::wait_until([&] { return e->stats().kv_blocks_used > 0; });  // stats are published after each step
  EXPECT_GT(e->stats().kv_blocks_used, 0);
  s->abort();
  Completion c = drain(*s);
  EXPECT_EQ(c.finish, engine::FinishReason::Abort);
  EXPECT_TRUE(testing::wait_pool_free(*e));
  EXPECT_EQ(e->stats().kv_blocks_free, e->stats().kv_blocks_total);
}

TEST(Engine, RequestLargerThanThePoolIsRefused) {
  engine::EngineConfig cfg;
  cfg.block_size = 4;
  cfg.num_kv_blocks = 4;
  auto e = make_engine(cfg);
  auto r = e->submit(cases()[0].prompt_tokens, greedy(64));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("blocks"), std::string::npos);
  EXPECT_EQ(drain(*submit(*e, cases()[0].prompt_tokens, greedy(8))).tokens.size(), 8u);
}

}  // namespace
}  // namespace pdserve

namespace pdserve {
namespace {

TEST(Engine, GreedyRequestIsTheSameAloneAndInBatchesOfOneToThirtyTwo) {
  auto e = make_engine({});
  const auto& target = cases()[1];
  const Completion alone = drain(*submit(*e, target.prompt_tokens, greedy(40)));
  std::mt19937 rng(7);
  for (int batch : {1, 2, 4, 8, 16, 32}) {
    std::vector<std::shared_ptr<engine::RequestStream>> others;
    const int before = static_cast<int>(rng() % batch);
    auto add_other = [&] {
      engine::SamplingParams p;
      p.temperature = rng() % 2 ? 0.f : 1.1f;
      p.top_k = static_cast<int>(rng() % 50);
      p.max_tokens = 1 + static_cast<int>(rng() % 60);
      if (rng() % 3 == 0) p.stop = {"."};
      if (rng() % 2) p.seed = rng();
      const auto& c = cases()[rng() % cases().size()];
      others.push_back(submit(*e, c.prompt_tokens, p));
    };
    for (int i = 0; i < before; ++i) add_other();
    auto mine = submit(*e, target.prompt_tokens, greedy(40));
    for (int i = before + 1; i < batch; ++i) add_other();
    EXPECT_EQ(drain(*mine).tokens, alone.tokens) << "batch of " << batch;
    for (auto& s : others) drain(*s);
  }
  EXPECT_TRUE(testing::wait_pool_free(*e));
}

}  // namespace
}  // namespace pdserve
