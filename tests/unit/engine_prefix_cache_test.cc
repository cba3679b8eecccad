// The engine with the radix prefix cache: outputs identical with the cache off, cold and
// warm (sequential and 32 at once, with prefixes of block_size·k−1, ·k, ·k+1 tokens), n>1
// choices sharing prompt blocks, preemption under a tiny pool, priorities, cache salts,
// timeouts, and a randomized soak after which every block is free or cached.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "engine/scheduler.h"
#include "support/engine_runner.h"
#include "support/pool_free.h"

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
    EXPECT_TRUE(testing::wait_pool_free(*on));
    auto st = on->stats();
    EXPECT_EQ(st.kv_blocks_used, 0);
    EXPECT_EQ(st.kv_blocks_free + st.kv_blocks_cached, st.kv_blocks_total);
    EXPECT_GT(st.kv_blocks_cached, 0);
    (void)expect_cached;
  }
}

// Cached K/V are those of a full prompt block (gemm order flag 1 | kGemmTiledBatch). A
// short prompt computes its positions in another order (no tiled micro-batch under 8
// tokens; the ragged last len % 4 tokens), which changes bits on Q5_K weights: its
// token-granular reuse of a longer prompt's block must not take those positions. Found by
// a helper: "Once upon a time" after a 19-token prompt with the same start.
TEST(PrefixCache, AShortPromptAfterALongOneWithTheSameStartKeepsItsLogprobs) {
  auto cfg = [](bool cache) {
    engine::EngineConfig c;  // the default block size (16)
    c.model_path = "../shared/models/synth-llama-small-q5_k_m.gguf";
    c.prefix_cache = cache;
    return c;
  };
  auto off = make_engine(cfg(false));
  auto on = make_engine(cfg(true));
  ASSERT_TRUE(off && on);
  const auto long_prompt = off->tokenizer().encode("Once upon a time there was a little girl who lived in a small house near the big forest", true);
  engine::SamplingParams p = greedy(6);
  p.top_logprobs = 0;
  ASSERT_GE(long_prompt.size(), 20u);
  for (int n : {5, 7, 9, 18, 19}) {
    const std::vector<int32_t> shorter(long_prompt.begin(), long_prompt.begin() + n);
    const Completion expect = drain(*submit(*off, shorter, p));
    drain(*submit(*on, long_prompt, greedy(1)));  // caches the long prompt's full blocks
    const Completion got = drain(*submit(*on, shorter, p));
    ASSERT_EQ(got.tokens, expect.tokens) << n << " prompt tokens";
    ASSERT_EQ(got.logprobs.size(), expect.logprobs.size());
    for (size_t i = 0; i < got.logprobs.size(); ++i)
      EXPECT_EQ(got.logprobs[i].logprob, expect.logprobs[i].logprob) << n << " prompt tokens, output " << i;
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
  EXPECT_EQ(d.cached_tokens, 3 * kBs + 1);  // the shared prefix: three full blocks and one token
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

/// The cached_tokens a salted request reports with its first delta (it then runs to the end).
int cached_tokens_with_salt(engine::Engine& e, const std::vector<int32_t>& prompt, const std::string& salt) {
  engine::RequestOptions o;
  o.cache_salt = salt;
  auto s = e.submit_group(prompt, greedy(1), o);
  EXPECT_TRUE(s.ok());
  if (!s.ok()) return -1;
  engine::StreamDelta d;
  EXPECT_TRUE(s.value()[0]->next(d, std::chrono::seconds(10)));
  if (d.finish == engine::FinishReason::None) drain(*s.value()[0]);
  return d.cached_tokens;
}

TEST(PrefixCache, FiveThousandSaltsLeaveNoNamespacesBehindAndNeverShareAcrossSalts) {
  engine::EngineConfig c = config(true);
  c.ctx_size = 256;
  c.num_kv_blocks = 256 / kBs;  // one full context is the whole pool
  c.threads = 1;                // ~250 tiny steps: no fork/join per step
  auto e = make_engine(c);
  ASSERT_TRUE(e);
  const auto prompt = prompts_with_prefix(*e, 2 * kBs, 1)[0];  // 11 tokens: 2 full blocks cached per salt
  for (int wave = 0; wave < 50; ++wave) {
    std::vector<std::shared_ptr<engine::RequestStream>> streams;
    for (int i = 0; i < 100; ++i) {
      engine::RequestOptions o;
      o.cache_salt = "tenant-" + std::to_string(wave * 100 + i);
      auto r = e->submit_group(prompt, greedy(1), o);
      ASSERT_TRUE(r.ok()) << r.error();
      streams.push_back(r.value()[0]);
    }
    for (auto& s : streams) EXPECT_EQ(drain(*s).finish, engine::FinishReason::Length);
  }
  ASSERT_TRUE(testing::wait_pool_free(*e));
  EXPECT_GT(e->stats().prefix_cache_namespaces, 1);
  // One unsalted request that needs the whole pool evicts every salted block.
  engine::SamplingParams all = greedy(256 - static_cast<int>(prompt.size()));
  all.ignore_eos = true;
  EXPECT_EQ(drain(*submit(*e, prompt, all)).finish, engine::FinishReason::Length);
  ASSERT_TRUE(testing::wait_pool_free(*e));
  EXPECT_LE(e->stats().prefix_cache_namespaces, 1);

  // Salts equal in their first 8 bytes are separate namespaces; the same salt shares.
  EXPECT_EQ(cached_tokens_with_salt(*e, prompt, "abcdefgh-1"), 0);
  EXPECT_EQ(cached_tokens_with_salt(*e, prompt, "abcdefgh-2"), 0);
  EXPECT_EQ(cached_tokens_with_salt(*e, prompt, "abcdefgh-1"), 2 * kBs);
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
  EXPECT_TRUE(testing::wait_pool_free(*e));
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
  EXPECT_TRUE(testing::wait_pool_free(*e));
  auto st = e->stats();
  EXPECT_EQ(st.kv_blocks_free + st.kv_blocks_cached, st.kv_blocks_total);
}

TEST(PrefixCache, PriorityPolicyServesLowerValuesFirst) {
  engine::EngineConfig c = config(true);
  c.scheduling_policy = engine::SchedulingPolicy::kPriority;
  c.max_seqs = 1;
  c.fault_step_delay_ms = 2;  // busy's 400 tokens take >= 0.8 s
  auto e = make_engine(c);
  auto prompts = prompts_with_prefix(*e, 5, 3);
  auto ignore = greedy(400);
  ignore.ignore_eos = true;
  auto busy = submit(*e, prompts[0], ignore);  // occupies the only slot
  engine::RequestOptions low, high;
  low.priority = 10;
  high.priority = -1;
  auto late_low = e->submit_group(prompts[1], greedy(4), low).value()[0];
  auto late_high = e->submit_group(prompts[2], greedy(4), high).value()[0];
  // The slot frees only now that both wait (an abort, not busy's own end, which a test thread
  // descheduled that long would miss: then the low one would take the slot first, rightly).
  busy->abort();
  ASSERT_EQ(drain(*busy).finish, engine::FinishReason::Abort) << "busy ended before both requests were queued";
  // One slot: the later-submitted high-priority request runs before the low one (FCFS
  // would run the low one first). Deltas queue up unread, so when the low one's first
  // token is there, the high one's first token is already queued if it came first; no
  // clock compares two threads' wake-ups.
  engine::StreamDelta first_low, first_high;
  ASSERT_TRUE(late_low->next(first_low, std::chrono::seconds(120)));
  const bool high_first = late_high->next(first_high, std::chrono::milliseconds(0));
  EXPECT_TRUE(high_first) << "the low-priority request produced a token before the high-priority one";
  drain(*late_low);
  drain(*late_high);
  auto m = e->metrics();
  EXPECT_EQ(m.request_success["length"], 2);
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
  EXPECT_TRUE(testing::wait_pool_free(*e));
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
  EXPECT_TRUE(testing::wait_pool_free(*e));
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
