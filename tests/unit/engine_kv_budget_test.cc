// Token eviction (--kv-budget, kv/token_eviction.h) in the engine on the real stories260K
// model: bounded KV of long generations past the pool's size, the pool whole again after,
// other sequences (and the prefix cache) unaffected, batch-, chunk- and preemption-
// invariant eviction, n > 1, budget 0 = today's output, the request field's limits, and
// budgeted requests taking no --max-cache-salts slot (they use no prefix-cache namespace).
#include <gtest/gtest.h>

#include <algorithm>

#include "support/engine_runner.h"
#include "support/pool_free.h"
#include "support/reference.h"

namespace pdserve {
namespace {

using testing::Completion;
using testing::drain;
using testing::make_engine;
using testing::submit;
using kv::TokenEvictionPolicy;

const std::vector<testing::ReferenceCase>& cases() {
  static const auto c = testing::load_reference("../shared/reference/stories260K.json");
  return c;
}

engine::SamplingParams greedy(int max_tokens, bool ignore_eos = false) {
  engine::SamplingParams p;
  p.temperature = 0.f;
  p.max_tokens = max_tokens;
  p.ignore_eos = ignore_eos;
  return p;
}

engine::EngineConfig budget_cfg(int budget, TokenEvictionPolicy policy) {
  engine::EngineConfig c;
  c.block_size = 4;
  c.kv_budget = budget;
  c.kv_evict.policy = policy;
  c.kv_evict.sinks = 4;
  c.kv_evict.recent = 8;
  return c;
}

std::shared_ptr<engine::RequestStream> submit_opts(engine::Engine& e, const std::vector<int32_t>& prompt,
                                                   const engine::SamplingParams& p, int kv_budget) {
  engine::RequestOptions o;
  o.kv_budget = kv_budget;
  auto r = e.submit_group(prompt, p, o);
  EXPECT_TRUE(r.ok()) << r.error();
  return r.ok() ? r.value()[0] : nullptr;
}

// A prompt longer than the budgets below: case 0's prompt and its reference continuation.
std::vector<int32_t> long_prompt() {
  std::vector<int32_t> p = cases()[0].prompt_tokens;
  p.insert(p.end(), cases()[0].tokens.begin(), cases()[0].tokens.end());
  return p;
}

class KvBudget : public ::testing::TestWithParam<TokenEvictionPolicy> {};

INSTANTIATE_TEST_SUITE_P(Policies, KvBudget, ::testing::Values(TokenEvictionPolicy::kH2o, TokenEvictionPolicy::kStreaming),
                         [](const auto& i) { return std::string(kv::token_eviction_name(i.param)); });

TEST_P(KvBudget, ZeroBudgetAndAnUnreachedBudgetGiveTheReference) {
  // --kv-budget 0 with the other eviction flags set is today's engine; a budget no sequence
  // reaches runs the attention-mass pass (h2o) but never evicts: the output is unchanged.
  for (int budget : {0, 500}) {
    auto e = make_engine(budget_cfg(budget, GetParam()));
    std::vector<std::shared_ptr<engine::RequestStream>> streams;
    const size_t n = std::min<size_t>(3, cases().size());
    for (size_t i = 0; i < n; ++i) streams.push_back(submit(*e, cases()[i].prompt_tokens, greedy(cases()[i].tokens.size())));
    for (size_t i = 0; i < n; ++i) {
      Completion c = drain(*streams[i]);
      EXPECT_EQ(c.tokens, cases()[i].tokens) << "budget " << budget << " case " << i;
    }
    EXPECT_TRUE(testing::wait_pool_free(*e));
  }
}

TEST_P(KvBudget, LongGenerationStaysWithinTheBudgetPastThePoolSize) {
  constexpr int kBudget = 32, kBlocks = 16, kTokens = 400;  // the pool holds 64 tokens
  engine::EngineConfig cfg = budget_cfg(kBudget, GetParam());
  cfg.num_kv_blocks = kBlocks;
  cfg.prefix_cache = false;  // every block the sequence lets go of is free at once
  const auto& prompt = cases()[0].prompt_tokens;
  {  // Without a budget the pool cannot hold the request.
    engine::EngineConfig no_budget = cfg;
    no_budget.kv_budget = 0;
    auto e = make_engine(no_budget);
    auto r = e->submit(prompt, greedy(kTokens, true));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::ResourceExhausted);
  }
  cfg.fault_step_delay_ms = 2;  // >= 0.8 s of steps: the stats below are sampled while it runs
  auto e = make_engine(cfg);
  auto stream = submit(*e, prompt, greedy(kTokens, true));
  Completion c;
  int64_t peak = 0;
  engine::StreamDelta d;
  while (c.finish == engine::FinishReason::None) {
    if (!stream->next(d, std::chrono::milliseconds(100))) continue;
    c.tokens.insert(c.tokens.end(), d.tokens.begin(), d.tokens.end());
    c.finish = d.finish;
    peak = std::max(peak, e->stats().kv_blocks_used);
  }
  EXPECT_EQ(c.finish, engine::FinishReason::Length);
  EXPECT_EQ(static_cast<int>(c.tokens.size()), kTokens);
  EXPECT_LE(peak, kBudget / 4 + 1);
  EXPECT_GE(peak, kBudget / 4);  // the stats were sampled while it ran
  EXPECT_TRUE(testing::wait_pool_free(*e));
  EXPECT_EQ(e->stats().kv_blocks_free, kBlocks);

  // Until the first eviction the tokens are the full-KV ones: logits of positions <= the
  // budget attend to every position.
  auto full = make_engine({});
  Completion ref = drain(*submit(*full, prompt, greedy(kTokens, true)));
  const size_t same = kBudget + 1 - prompt.size();
  ASSERT_GE(ref.tokens.size(), same);
  EXPECT_EQ(std::vector<int32_t>(c.tokens.begin(), c.tokens.begin() + same),
            std::vector<int32_t>(ref.tokens.begin(), ref.tokens.begin() + same));
}

TEST_P(KvBudget, OtherSequencesAndThePrefixCacheAreUnaffected) {
  // The server keeps everything; one request lowers its own budget (kv_budget). Its prompt
  // is in the prefix cache (another request computed it) and other requests share it
  // while it evicts: they and the cache must see the KV they would see without it.
  engine::EngineConfig cfg = budget_cfg(0, GetParam());
  const std::vector<int32_t> prompt = long_prompt();
  Completion alone;
  {
    auto e = make_engine(cfg);
    alone = drain(*submit_opts(*e, prompt, greedy(120, true), 16));
    EXPECT_TRUE(testing::wait_pool_free(*e));
  }
  auto e = make_engine(cfg);
  Completion warm = drain(*submit(*e, prompt, greedy(40)));  // caches the prompt's blocks
  auto evicting = submit_opts(*e, prompt, greedy(120, true), 16);
  std::vector<std::shared_ptr<engine::RequestStream>> others;
  for (const auto& r : cases()) others.push_back(submit(*e, r.prompt_tokens, greedy(r.tokens.size())));
  auto same_prompt = submit(*e, prompt, greedy(40));
  Completion ev = drain(*evicting);
  EXPECT_EQ(ev.tokens, alone.tokens) << "batched with others vs alone";
  for (size_t i = 0; i < cases().size(); ++i) EXPECT_EQ(drain(*others[i]).tokens, cases()[i].tokens) << "case " << i;
  EXPECT_EQ(drain(*same_prompt).tokens, warm.tokens);
  // After the evicting request ended, the cached prompt still gives the same tokens.
  EXPECT_EQ(drain(*submit(*e, prompt, greedy(40))).tokens, warm.tokens);
  EXPECT_NE(ev.tokens, std::vector<int32_t>(warm.tokens.begin(), warm.tokens.end())) << "eviction changed nothing";
  EXPECT_TRUE(testing::wait_pool_free(*e));
}

TEST_P(KvBudget, ChunkedPrefillAndPreemptionReEvictDeterministically) {
  // Alone with a roomy pool vs six at once in a pool too small for them (preemption, the
  // preempted recomputing prompt and generated tokens), with prompts split into 5-token
  // chunks: every sequence gives its lone output.
  constexpr int kBudget = 24;
  const std::vector<int32_t> prompt = long_prompt();  // longer than the budget
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) {
    prompts.push_back(i % 2 ? prompt : cases()[i % cases().size()].prompt_tokens);
    prompts.back().push_back(static_cast<int32_t>(100 + i));
  }
  std::vector<Completion> alone;
  {
    auto e = make_engine(budget_cfg(kBudget, GetParam()));
    for (const auto& p : prompts) alone.push_back(drain(*submit(*e, p, greedy(60, true))));
  }
  engine::EngineConfig cfg = budget_cfg(kBudget, GetParam());
  // One long prompt, the copies of its first eviction (prefix-cached prompt blocks are
  // copied, not written) and 2 blocks: the six need far more at once.
  cfg.num_kv_blocks = static_cast<int>((prompt.size() + 1 + 3) / 4) + kBudget / 4 + 2;
  cfg.max_batched_tokens = 5;
  auto e = make_engine(cfg);
  std::vector<std::shared_ptr<engine::RequestStream>> streams;
  for (const auto& p : prompts) streams.push_back(submit(*e, p, greedy(60, true)));
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(drain(*streams[i]).tokens, alone[i].tokens) << "request " << i;
  EXPECT_GT(e->metrics().preemptions, 0);
  EXPECT_TRUE(testing::wait_pool_free(*e));
}

TEST_P(KvBudget, ChoicesOfOneRequestMatchSeededSingleRequests) {
  auto e = make_engine(budget_cfg(20, GetParam()));
  engine::SamplingParams p;
  p.temperature = 0.9f;
  p.seed = 77;
  p.max_tokens = 60;
  p.ignore_eos = true;
  const std::vector<int32_t> prompt = long_prompt();
  engine::RequestOptions o;
  o.n = 3;
  auto group = e->submit_group(prompt, p, o);
  ASSERT_TRUE(group.ok()) << group.error();
  std::vector<Completion> choices;
  for (auto& s : group.value()) choices.push_back(drain(*s));
  for (int k = 0; k < 3; ++k) {
    engine::SamplingParams q = p;
    q.seed = 77 + k;
    EXPECT_EQ(drain(*submit(*e, prompt, q)).tokens, choices[k].tokens) << "choice " << k;
  }
  EXPECT_TRUE(testing::wait_pool_free(*e));
}

TEST(KvBudgetLimits, RequestBudgetMayOnlyLowerTheServersAndNotBelowItsMinimum) {
  auto e = make_engine(budget_cfg(32, TokenEvictionPolicy::kH2o));  // minimum 4 sinks + 8 recent
  const auto& prompt = cases()[0].prompt_tokens;
  for (int bad : {11, 33}) {
    engine::RequestOptions o;
    o.kv_budget = bad;
    auto r = e->submit_group(prompt, greedy(4), o);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::InvalidArgument);
    EXPECT_NE(r.status().message().find("kv_budget"), std::string::npos) << r.status().message();
    EXPECT_NE(e->kv_budget_error(bad), "");
  }
  EXPECT_EQ(e->kv_budget_error(12), "");
  EXPECT_EQ(drain(*submit_opts(*e, prompt, greedy(4), 12)).finish, engine::FinishReason::Length);
  {  // Without the server's --kv-budget a request's may reach the context length, not beyond.
    auto free = make_engine(budget_cfg(0, TokenEvictionPolicy::kH2o));
    EXPECT_EQ(free->kv_budget_error(12), "");
    EXPECT_NE(free->kv_budget_error(100000), "");
    EXPECT_NE(free->kv_budget_error(100000).find("context length"), std::string::npos);
  }
  // Bad server flags: one error at start.
  auto bad = engine::Engine::create([] {
    engine::EngineConfig c = budget_cfg(10, TokenEvictionPolicy::kH2o);
    c.model_path = "../shared/models/stories260K.gguf";
    return c;
  }());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--kv-budget 10"), std::string::npos) << bad.status().message();
  EXPECT_TRUE(testing::wait_pool_free(*e));
}


// A sequence with a kv_budget neither matches nor inserts in the prefix cache, so it makes
// no namespace: its cache_salt takes no --max-cache-salts slot (a request field budget or
// the server's --kv-budget), while requests that use the cache are still capped.
TEST(KvBudgetSalts, ARequestWithAKvBudgetTakesNoCacheSaltSlot) {
  const auto& prompt = cases()[0].prompt_tokens;
  engine::EngineConfig c = budget_cfg(0, TokenEvictionPolicy::kStreaming);
  c.max_cache_salts = 1;
  c.ctx_size = 4096;  // the held requests run for seconds; they are aborted at the end
  auto e = make_engine(c);
  const engine::SamplingParams long_run = greedy(4000, /*ignore_eos=*/true);
  auto salted = [](const std::string& salt, int kv_budget) {
    engine::RequestOptions o;
    o.cache_salt = salt;
    o.kv_budget = kv_budget;
    return o;
  };
  std::vector<std::shared_ptr<engine::RequestStream>> held;
  auto a = e->submit_group(prompt, long_run, salted("A", 16));
  ASSERT_TRUE(a.ok()) << a.error();
  held.push_back(a.value()[0]);
  EXPECT_EQ(e->stats().cache_salts_in_use, 0);
  // So a cached request with another salt takes the one slot...
  auto b = e->submit_group(prompt, long_run, salted("B", 0));
  ASSERT_TRUE(b.ok()) << b.error();
  held.push_back(b.value()[0]);
  EXPECT_EQ(e->stats().cache_salts_in_use, 1);
  // ...and the cap holds for the next cached one; a budgeted one is admitted and served.
  auto c_cached = e->submit_group(prompt, greedy(4), salted("C", 0));
  ASSERT_FALSE(c_cached.ok());
  EXPECT_EQ(c_cached.status().code(), StatusCode::RateLimited);
  auto c_budgeted = e->submit_group(prompt, greedy(4), salted("C", 16));
  ASSERT_TRUE(c_budgeted.ok()) << c_budgeted.error();
  EXPECT_EQ(drain(*c_budgeted.value()[0]).tokens,
            std::vector<int32_t>(cases()[0].tokens.begin(), cases()[0].tokens.begin() + 4));
  for (auto& s : held) {
    s->abort();
    drain(*s);
  }
  ASSERT_TRUE(testing::wait_pool_free(*e));
  EXPECT_EQ(e->stats().cache_salts_in_use, 0);
  EXPECT_LE(e->stats().prefix_cache_namespaces, 1) << "only B's";

  // The server's --kv-budget: no request uses the cache, so no salt is counted.
  engine::EngineConfig all = budget_cfg(32, TokenEvictionPolicy::kStreaming);
  all.max_cache_salts = 1;
  all.ctx_size = 4096;
  auto server_budget = make_engine(all);
  std::vector<std::shared_ptr<engine::RequestStream>> streams;
  for (const char* salt : {"A", "B", "C"}) {
    auto r = server_budget->submit_group(prompt, long_run, salted(salt, 0));
    ASSERT_TRUE(r.ok()) << salt << ": " << r.error();
    streams.push_back(r.value()[0]);
  }
  EXPECT_EQ(server_budget->stats().cache_salts_in_use, 0);
  for (auto& s : streams) {
    s->abort();
    drain(*s);
  }
  EXPECT_TRUE(testing::wait_pool_free(*server_budget));
}

}  // namespace
}  // namespace pdserve
