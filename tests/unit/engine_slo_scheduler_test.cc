// Scheduler with SLO classes (Sequence::slo_class), without a model: a waiting high-class
// sequence takes a seat, KV or token budget from running low-class ones within one step;
// a preempted sequence keeps its place in line; earliest deadline first within a class;
// prefill chunks shrink to fit the tightest running TPOT target. Then, on the real engine,
// low-class requests preempted by a high one produce exactly what they produce alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <string>

#include "engine/scheduler.h"
#include "gguf/gguf.h"
#include "kv/kv_cache_manager.h"
#include "support/engine_runner.h"
#include "tokenizer/tokenizer.h"

namespace pdserve::engine {
namespace {

constexpr int kBs = 4;
constexpr int kHigh = 0, kLow = 2;

class SloSchedulerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto f = gguf::GgufFile::open("../shared/tokenizer/ggml-vocab-llama-spm.gguf");
    ASSERT_TRUE(f.ok()) << f.error();
    auto t = tokenizer::Tokenizer::from_gguf(*f.value());
    ASSERT_TRUE(t.ok()) << t.error();
    tok_ = t.value().release();
  }

  void make(int num_blocks, SchedulerConfig cfg) {
    kv::KvCacheShape shape;
    shape.n_layers = 1;
    shape.n_kv_heads = 1;
    shape.head_dim = 2;
    shape.block_size = kBs;
    shape.num_blocks = num_blocks;
    kv_ = std::make_unique<kv::KvCacheManager>(shape, /*prefix_cache=*/false, kv::EvictionPolicy::kLru);
    sched_ = std::make_unique<Scheduler>(cfg, *kv_);
  }

  Sequence* add(int64_t id, int len, double t, int slo_class, double deadline = 0, double tpot = 0) {
    std::vector<int32_t> prompt(len);
    std::iota(prompt.begin(), prompt.end(), 100 + static_cast<int>(id) * 50);
    auto s = std::make_unique<Sequence>(id, prompt, SamplingParams{}, nullptr, *tok_, 0, 1 << 20);
    s->arrival_time = t;
    s->slo_class = slo_class;
    s->slo_deadline = deadline;
    s->tpot_target = tpot;
    s->role_prompt_len = len;
    Sequence* raw = s.get();
    sched_->add(std::move(s));
    return raw;
  }

  void run(const std::vector<ScheduledSeq>& plan) {
    for (const ScheduledSeq& p : plan) {
      p.seq->num_computed += p.n_tokens;
      sched_->on_computed(*p.seq);
      if (p.needs_logits) p.seq->tokens.push_back(7);
    }
  }

  static bool in(const std::vector<ScheduledSeq>& plan, const Sequence* s) {
    return std::any_of(plan.begin(), plan.end(), [&](const ScheduledSeq& p) { return p.seq == s; });
  }
  static int tokens_of(const std::vector<ScheduledSeq>& plan, const Sequence* s) {
    for (const auto& p : plan)
      if (p.seq == s) return p.n_tokens;
    return 0;
  }

  static tokenizer::Tokenizer* tok_;
  std::unique_ptr<kv::KvCacheManager> kv_;
  std::unique_ptr<Scheduler> sched_;
};
tokenizer::Tokenizer* SloSchedulerTest::tok_ = nullptr;

TEST_F(SloSchedulerTest, HighBehindTwentyLowTakesASeatInOneStepAndThePreemptedKeepItsPlace) {
  SchedulerConfig cfg;
  cfg.max_seqs = 4;
  make(1000, cfg);
  std::vector<Sequence*> low;
  for (int i = 0; i < 20; ++i) low.push_back(add(i, 8, 1.0 + i, kLow));
  run(sched_->schedule());  // low 0..3 run
  run(sched_->schedule());
  ASSERT_EQ(sched_->num_running(), 4u);
  Sequence* high = add(100, 8, 50.0, kHigh);
  const auto plan = sched_->schedule();
  EXPECT_TRUE(in(plan, high)) << "the high-class sequence waits behind the low ones";
  EXPECT_EQ(sched_->num_running(), 4u);
  EXPECT_EQ(sched_->num_preemptions(), 1);
  EXPECT_EQ(low[3]->num_preemptions, 1) << "the latest-arriving running low sequence is the victim";
  run(plan);
  // The victim keeps its place: it runs again before low 4..19, which never ran.
  sched_->finish(high);
  const auto next = sched_->schedule();
  EXPECT_TRUE(in(next, low[3]));
  for (int i = 4; i < 20; ++i) EXPECT_FALSE(in(next, low[i])) << i;
}

TEST_F(SloSchedulerTest, HighTakesKvAndBudgetFromLowButNotFromItsOwnClass) {
  SchedulerConfig cfg;
  cfg.max_batched_tokens = 16;
  make(8, cfg);  // 32 tokens of KV
  Sequence* a = add(1, 14, 1.0, kLow);
  Sequence* b = add(2, 14, 2.0, kLow);
  run(sched_->schedule());  // a: 14 tokens (budget 16), b: 2
  run(sched_->schedule());
  Sequence* h = add(3, 12, 3.0, kHigh);
  const auto plan = sched_->schedule();
  EXPECT_TRUE(in(plan, h));
  EXPECT_EQ(tokens_of(plan, h), 12) << "the whole prompt: low chunks give their budget back";
  EXPECT_GE(sched_->num_preemptions(), 1);
  EXPECT_TRUE(a->num_preemptions + b->num_preemptions >= 1);
  // A second high sequence cannot take from the first.
  run(plan);
  Sequence* h2 = add(4, 28, 4.0, kHigh);
  const auto p2 = sched_->schedule();
  EXPECT_TRUE(in(p2, h));
  EXPECT_EQ(h->num_preemptions, 0);
  (void)h2;
}

TEST_F(SloSchedulerTest, EarliestDeadlineFirstWithinAClass) {
  SchedulerConfig cfg;
  cfg.max_seqs = 1;
  make(1000, cfg);
  Sequence* late = add(1, 8, 1.0, kHigh, /*deadline=*/9.0);
  Sequence* early = add(2, 8, 2.0, kHigh, /*deadline=*/3.0);
  const auto plan = sched_->schedule();
  EXPECT_TRUE(in(plan, early));
  EXPECT_FALSE(in(plan, late));
}

TEST_F(SloSchedulerTest, PrefillChunkFitsTheTightestRunningTpot) {
  SchedulerConfig cfg;
  cfg.max_batched_tokens = 512;
  make(1000, cfg);
  Sequence* d = add(1, 4, 1.0, kHigh, 0, /*tpot=*/0.02);
  run(sched_->schedule());  // d decodes from now on
  sched_->observe_step(100, 0.1);  // 1 ms per token: 20 tokens fit in 20 ms
  Sequence* big = add(2, 400, 2.0, kLow);
  const auto plan = sched_->schedule();
  EXPECT_TRUE(in(plan, d));
  EXPECT_EQ(tokens_of(plan, big), 20 - 1) << "20 tokens per step, one of them the decode";
  // Without a TPOT target running, the chunk is the budget again.
  run(plan);
  sched_->finish(d);  // after run(): finish() frees d, which the plan points to
  EXPECT_EQ(tokens_of(sched_->schedule(), big), 400 - 19);
}

TEST_F(SloSchedulerTest, LowerClassDecodesSkipAStepThatWouldOverrunTheTightestTpot) {
  SchedulerConfig cfg;
  cfg.max_batched_tokens = 512;
  make(1000, cfg);
  std::vector<Sequence*> high, low;
  for (int i = 0; i < 4; ++i) low.push_back(add(10 + i, 4, 1.0 + i, kLow, 0, /*tpot=*/0.5));
  for (int i = 0; i < 3; ++i) high.push_back(add(i, 4, 5.0 + i, kHigh, 0, /*tpot=*/0.005));
  run(sched_->schedule());  // every prompt in one step; all seven decode from now on
  sched_->observe_step(100, 0.1);  // 1 ms per token: 5 tokens fit in the high class's 5 ms
  const auto plan = sched_->schedule();
  for (Sequence* h : high) EXPECT_TRUE(in(plan, h)) << "the tightest class always decodes";
  EXPECT_TRUE(in(plan, low[0]));
  EXPECT_TRUE(in(plan, low[1]));
  EXPECT_FALSE(in(plan, low[2])) << "a sixth token would overrun 5 ms";
  EXPECT_FALSE(in(plan, low[3]));
  EXPECT_EQ(sched_->num_running(), 7u) << "skipped, not preempted";
  EXPECT_EQ(sched_->num_preemptions(), 0);
  // A full step takes no lower-class prefill, and a high-class prompt gets one block.
  Sequence* big = add(20, 100, 9.0, kLow, 0, 0.5);
  Sequence* h4 = add(3, 12, 9.5, kHigh, 0, 0.005);
  const auto full = sched_->schedule();
  EXPECT_FALSE(in(full, big)) << "a low prefill chunk would overrun 5 ms";
  EXPECT_EQ(tokens_of(full, h4), kBs) << "the high prompt progresses by one block";
  sched_->finish(big);
  sched_->finish(h4);
  run(plan);
  // Without a high-class decode running, every low decode fits its own 500 ms again.
  for (Sequence* h : high) sched_->finish(h);
  const auto next = sched_->schedule();
  for (Sequence* l : low) EXPECT_TRUE(in(next, l));
}

TEST(SloEngine, PreemptedLowRequestsFinishAsTheyDoAlone) {
  EngineConfig cfg;
  cfg.max_seqs = 2;
  cfg.threads = 1;
  auto eng = testing::make_engine(cfg);
  ASSERT_TRUE(eng);
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 40;
  p.ignore_eos = true;
  // The low requests run long: the high one must find both slots held by decoding low
  // requests. With 40 low tokens (as the high one has), a test thread descheduled for ~39
  // steps (ASan under ctest -j2, 2026-12-03) sent it as a low pair finished, and it took
  // their free slot without preempting anyone.
  SamplingParams p_low = p;
  p_low.max_tokens = 160;
  auto prompt = [](int i) {
    std::vector<int32_t> t(12 + i);
    for (size_t k = 0; k < t.size(); ++k) t[k] = static_cast<int32_t>(1 + (k * 7 + i * 13) % 500);
    return t;
  };
  constexpr int kN = 6;
  std::vector<testing::Completion> alone;
  for (int i = 0; i < kN; ++i) alone.push_back(testing::drain(*testing::submit(*eng, prompt(i), p_low)));
  const std::vector<int32_t> high_alone = testing::drain(*testing::submit(*eng, prompt(100), p)).tokens;
  // Even 160 tokens were not enough: under TSan and ctest -j2 (CI, 2026-12-05) the test thread
  // slept through a whole low pair's steps and the high request again found a free slot. Such a
  // round proves nothing about preemption, so it runs again; an engine that never preempts
  // fails every round. Every round checks every output.
  constexpr int kRounds = 4;
  bool preempted = false;
  for (int round = 0; round < kRounds && !preempted; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const int64_t preempted_before = eng->metrics().preemptions;
    RequestOptions low;
    low.slo_class = kLow;
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < kN; ++i) {
      auto r = eng->submit_group(prompt(i), p_low, low);
      ASSERT_TRUE(r.ok()) << r.error();
      streams.push_back(r.value()[0]);
    }
    // Wait until the low requests are decoding, then send the high one.
    StreamDelta first;
    ASSERT_TRUE(streams[0]->next(first, std::chrono::seconds(60)));
    RequestOptions high;
    high.slo_class = kHigh;
    auto h = eng->submit_group(prompt(100), p, high);
    ASSERT_TRUE(h.ok());
    EXPECT_EQ(testing::drain(*h.value()[0]).tokens, high_alone);
    for (int i = 0; i < kN; ++i) {
      testing::Completion c = testing::drain(*streams[i]);
      if (i == 0) c.tokens.insert(c.tokens.begin(), first.tokens.begin(), first.tokens.end());
      EXPECT_EQ(c.tokens, alone[i].tokens) << "low request " << i;
    }
    preempted = eng->metrics().preemptions > preempted_before;
  }
  EXPECT_TRUE(preempted) << "the high request preempted no low one in " << kRounds << " rounds";
  eng->shutdown();
}

}  // namespace
}  // namespace pdserve::engine
