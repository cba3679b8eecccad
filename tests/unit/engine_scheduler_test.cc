// Scheduler against a real KvCacheManager, without a model: admission under the token
// budget and max_seqs, decodes before prefill chunks, chunked prefill, preemption when the
// pool runs out, the priority policy, prefix-cache hits at admission, and that every
// block comes back (free + cached == total) when sequences end.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <numeric>

#include "engine/scheduler.h"
#include "gguf/gguf.h"
#include "kv/kv_cache_manager.h"
#include "tokenizer/tokenizer.h"

namespace pdserve::engine {
namespace {

constexpr int kBs = 4;

class SchedulerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // A vocabulary file only (Sequence keeps a detokenizer); no model is loaded.
    auto f = gguf::GgufFile::open("../shared/tokenizer/ggml-vocab-llama-spm.gguf");
    ASSERT_TRUE(f.ok()) << f.error();
    auto t = tokenizer::Tokenizer::from_gguf(*f.value());
    ASSERT_TRUE(t.ok()) << t.error();
    tok_ = t.value().release();
  }

  void make(int num_blocks, SchedulerConfig cfg, bool prefix_cache = true) {
    kv::KvCacheShape shape;
    shape.n_layers = 1;
    shape.n_kv_heads = 1;
    shape.head_dim = 2;
    shape.block_size = kBs;
    shape.num_blocks = num_blocks;
    kv_ = std::make_unique<kv::KvCacheManager>(shape, prefix_cache, kv::EvictionPolicy::kLru);
    sched_ = std::make_unique<Scheduler>(cfg, *kv_);
  }

  /// Adds a sequence with `len` prompt tokens starting at id `first`, arriving at `t`.
  Sequence* add(int64_t id, int len, double t, int priority = 0, int first = 100) {
    std::vector<int32_t> prompt(len);
    std::iota(prompt.begin(), prompt.end(), first);
    auto s = std::make_unique<Sequence>(id, prompt, SamplingParams{}, nullptr, *tok_, 0, /*max_len=*/1 << 20);
    s->arrival_time = t;
    s->priority = priority;
    s->role_prompt_len = len;
    Sequence* raw = s.get();
    sched_->add(std::move(s));
    return raw;
  }

  /// What the engine does after a forward pass: advance, cache, sample (token 7).
  void run(const std::vector<ScheduledSeq>& plan) {
    for (const ScheduledSeq& p : plan) {
      p.seq->num_computed += p.n_tokens;
      sched_->on_computed(*p.seq);
      if (p.needs_logits) p.seq->tokens.push_back(7);
    }
  }

  int tokens_of(const std::vector<ScheduledSeq>& plan, const Sequence* s) {
    for (const auto& p : plan)
      if (p.seq == s) return p.n_tokens;
    return 0;
  }

  void expect_all_blocks_back() {
    const kv::KvUsage u = kv_->usage();
    EXPECT_EQ(u.used, 0);
    EXPECT_EQ(u.free + u.cached, u.total);
  }

  static tokenizer::Tokenizer* tok_;
  std::unique_ptr<kv::KvCacheManager> kv_;
  std::unique_ptr<Scheduler> sched_;
};

tokenizer::Tokenizer* SchedulerTest::tok_ = nullptr;

TEST_F(SchedulerTest, AdmitsUnderTheTokenBudgetAndChunksTheRest) {
  SchedulerConfig cfg;
  cfg.max_batched_tokens = 32;
  make(64, cfg);
  Sequence* a = add(1, 20, 1.0, 0, 100);  // distinct prompts: no prefix-cache hits
  Sequence* b = add(2, 20, 2.0, 0, 200);
  Sequence* c = add(3, 20, 3.0, 0, 300);
  auto plan = sched_->schedule();
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(tokens_of(plan, a), 20);
  EXPECT_TRUE(plan[0].needs_logits);
  EXPECT_EQ(tokens_of(plan, b), 12);  // a chunk of what the budget leaves
  EXPECT_FALSE(plan[1].needs_logits);
  EXPECT_EQ(tokens_of(plan, c), 0);
  EXPECT_EQ(sched_->num_running(), 2u);
  EXPECT_EQ(sched_->num_waiting(), 1u);
  // Only the slots for scheduled tokens are taken: 5 blocks for a, 3 for b's 12 tokens.
  EXPECT_EQ(kv_->usage().used, 8);
  run(plan);

  // Next step: a's decode first, then b's remaining 8 prompt tokens, then c's chunk.
  plan = sched_->schedule();
  ASSERT_EQ(plan.size(), 3u);
  EXPECT_EQ(plan[0].seq, a);
  EXPECT_EQ(plan[0].n_tokens, 1);
  EXPECT_EQ(plan[1].seq, b);
  EXPECT_EQ(plan[1].n_tokens, 8);
  EXPECT_EQ(plan[2].seq, c);
  EXPECT_EQ(plan[2].n_tokens, 20);  // all of c: 23 tokens of budget were left
  run(plan);
  for (Sequence* s : {a, b, c}) sched_->finish(s);
  expect_all_blocks_back();
}

TEST_F(SchedulerTest, MaxSeqsAndLongPrefillThresholdLimitAStep) {
  SchedulerConfig cfg;
  cfg.max_batched_tokens = 100;
  cfg.max_seqs = 2;
  cfg.long_prefill_threshold = 6;
  make(64, cfg);
  Sequence* a = add(1, 10, 1.0);
  Sequence* b = add(2, 3, 2.0);
  add(3, 3, 3.0);
  auto plan = sched_->schedule();
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(tokens_of(plan, a), 6);
  EXPECT_EQ(tokens_of(plan, b), 3);
  EXPECT_EQ(sched_->num_waiting(), 1u);
}

TEST_F(SchedulerTest, PreemptsTheLatestArrivalWhenBlocksRunOutAndRecomputesIt) {
  SchedulerConfig cfg;
  cfg.max_batched_tokens = 64;
  make(4, cfg, /*prefix_cache=*/false);
  Sequence* a = add(1, 8, 1.0);  // 2 blocks each: the pool is full after admission
  Sequence* b = add(2, 8, 2.0);
  auto plan = sched_->schedule();
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(kv_->usage().free, 0);
  run(plan);
  // Both need a third block for their first decode: b (later arrival) is preempted.
  plan = sched_->schedule();
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].seq, a);
  EXPECT_EQ(sched_->num_preemptions(), 1);
  EXPECT_EQ(b->num_preemptions, 1);
  EXPECT_EQ(b->num_computed, 0);
  EXPECT_TRUE(b->kv.block_table.blocks.empty());
  EXPECT_EQ(sched_->num_waiting(), 1u);
  run(plan);
  sched_->finish(a);
  // b is readmitted and recomputes its prompt plus the token it had sampled.
  plan = sched_->schedule();
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].seq, b);
  EXPECT_EQ(plan[0].n_tokens, 9);
  sched_->finish(b);
  expect_all_blocks_back();
}

TEST_F(SchedulerTest, AdmissionNeverTakesBlocksItCannotUse) {
  SchedulerConfig cfg;
  make(4, cfg);
  Sequence* a = add(1, 12, 1.0);  // 3 blocks
  auto plan = sched_->schedule();
  run(plan);
  add(2, 8, 2.0, 0, 500);  // needs 2 blocks, one is free: not admitted, holds nothing
  plan = sched_->schedule();
  ASSERT_EQ(plan.size(), 1u);  // only a's decode (into its 4th block)
  EXPECT_EQ(plan[0].seq, a);
  EXPECT_EQ(sched_->num_waiting(), 1u);
  EXPECT_EQ(kv_->usage().used, 4);
  sched_->finish(a);
}

TEST_F(SchedulerTest, PriorityPolicyAdmitsLowerValuesFirst) {
  SchedulerConfig cfg;
  cfg.max_batched_tokens = 8;
  cfg.policy = SchedulingPolicy::kPriority;
  make(64, cfg);
  add(1, 8, 1.0, /*priority=*/5);
  Sequence* urgent = add(2, 8, 2.0, /*priority=*/-1);
  auto plan = sched_->schedule();
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].seq, urgent);

  SchedulerConfig fcfs = cfg;
  fcfs.policy = SchedulingPolicy::kFcfs;
  make(64, fcfs);
  Sequence* first = add(1, 8, 1.0, 5);
  add(2, 8, 2.0, -1);
  plan = sched_->schedule();
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].seq, first);
}

TEST_F(SchedulerTest, ReusesCachedPromptBlocksAtAdmission) {
  SchedulerConfig cfg;
  make(16, cfg);
  Sequence* a = add(1, 10, 1.0);
  run(sched_->schedule());
  sched_->finish(a);
  EXPECT_EQ(kv_->usage().cached, 2);  // the two full prompt blocks
  Sequence* b = add(2, 10, 2.0);
  auto plan = sched_->schedule();
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(b->cached_tokens, 8);
  EXPECT_EQ(plan[0].n_tokens, 2);
  EXPECT_EQ(sched_->prefix_queries(), 20);
  EXPECT_EQ(sched_->prefix_hits(), 8);
  // A prompt cached in full (a's first two blocks) still computes its last token, and
  // only that one: its last block is a private copy of the cached one.
  Sequence* c = add(3, 8, 3.0);
  plan = sched_->schedule();
  EXPECT_EQ(c->cached_tokens, 7);
  EXPECT_EQ(tokens_of(plan, c), 1);
  const int32_t cached_second = b->kv.block_table.blocks[1];  // b holds a's cached block 1
  EXPECT_NE(c->kv.block_table.blocks[1], cached_second);
  run(plan);
  // Once full, the copy is swapped for the cached block (the duplicate goes back).
  EXPECT_EQ(c->kv.block_table.blocks[1], cached_second);
  sched_->finish(b);
  sched_->finish(c);
  expect_all_blocks_back();
  EXPECT_EQ(kv_->num_evictable_blocks(), kv_->usage().cached);
}

TEST_F(SchedulerTest, AFullyCachedPromptGetsItsFirstTokenInTheNextStepWhileOthersDecode) {
  // A budget of exactly the running decodes plus one token, and a long-prefill threshold:
  // neither may charge the cached tokens. Before token-granular matching the new prompt
  // recomputed its whole last block (4 tokens) and needed 4 steps for its first token.
  constexpr int kDecoders = 4;
  SchedulerConfig cfg;
  cfg.max_batched_tokens = kDecoders + 1;
  cfg.long_prefill_threshold = 2;
  make(64, cfg);
  Sequence* warm = add(1, 12, 1.0);  // prompt 100..111: three full blocks get cached
  while (warm->num_generated() == 0) run(sched_->schedule());
  sched_->finish(warm);
  std::vector<Sequence*> decoders;
  for (int i = 0; i < kDecoders; ++i) decoders.push_back(add(2 + i, 3, 2.0 + i, 0, 500 + 10 * i));
  auto decoding = [&] {
    return std::all_of(decoders.begin(), decoders.end(), [](Sequence* d) { return d->num_generated() > 0; });
  };
  while (!decoding()) run(sched_->schedule());

  Sequence* again = add(9, 12, 9.0);  // warm's prompt again
  const auto plan = sched_->schedule();
  ASSERT_EQ(plan.size(), static_cast<size_t>(kDecoders + 1));
  for (Sequence* d : decoders) EXPECT_EQ(tokens_of(plan, d), 1);
  EXPECT_EQ(again->cached_tokens, 11);
  EXPECT_EQ(tokens_of(plan, again), 1);
  EXPECT_TRUE(plan.back().seq == again && plan.back().needs_logits);
  run(plan);
  EXPECT_EQ(again->num_generated(), 1);  // its first token after one step
  EXPECT_EQ(sched_->prefix_hits(), 11);
  for (Sequence* d : decoders) sched_->finish(d);
  sched_->finish(again);
  expect_all_blocks_back();
}

TEST_F(SchedulerTest, APromptDivergingInsideABlockSharesItsTokensUpToTheDifference) {
  SchedulerConfig cfg;
  make(16, cfg);
  Sequence* a = add(1, 12, 1.0);  // prompt 100..111: three full blocks get cached
  run(sched_->schedule());
  const int32_t a_second = a->kv.block_table.blocks[1];  // holds 104..107
  // Mark a's cached block 1 so its copy can be told apart from fresh storage.
  for (size_t i = 0; i < kv_->block_bytes(); ++i) {
    kv_->block_k(0, a_second)[i] = static_cast<uint8_t>(i + 1);
    kv_->block_v(0, a_second)[i] = static_cast<uint8_t>(2 * i + 1);
  }
  sched_->finish(a);
  // 100..105 then 906..911: one whole block and two tokens of the next are shared.
  Sequence* b = add(2, 12, 2.0);
  for (int i = 6; i < 12; ++i) b->tokens[i] = 900 + i;
  auto plan = sched_->schedule();
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(b->cached_tokens, 6);
  EXPECT_EQ(plan[0].n_tokens, 6);
  const int32_t copy = b->kv.block_table.blocks[1];
  EXPECT_NE(copy, a_second);
  for (size_t i = 0; i < kv_->block_bytes(); ++i) {
    ASSERT_EQ(kv_->block_k(0, copy)[i], static_cast<uint8_t>(i + 1)) << i;
    ASSERT_EQ(kv_->block_v(0, copy)[i], static_cast<uint8_t>(2 * i + 1)) << i;
  }
  run(plan);
  // b's own block 1 (104, 105, 906, 907) is cached beside a's, which stays as it was.
  EXPECT_EQ(b->kv.block_table.blocks[1], copy);
  EXPECT_EQ(b->kv.num_cached_blocks, 3);
  sched_->finish(b);
  EXPECT_EQ(kv_->usage().cached, 5);  // a's three, b's last two
  expect_all_blocks_back();
}

TEST_F(SchedulerTest, GeneratedTokensNeverMatchCachedPromptBlocks) {
  SchedulerConfig cfg;
  make(16, cfg);
  Sequence* w = add(1, 12, 1.0);  // prompt 100..111: three full blocks get cached
  run(sched_->schedule());
  sched_->finish(w);
  // A sequence whose prompt is 100..103 and whose generated tokens are 104..111 (as after
  // a preemption): only its prompt block may come from the cache.
  Sequence* y = add(2, 4, 2.0);
  for (int32_t t = 104; t < 112; ++t) y->tokens.push_back(t);
  auto plan = sched_->schedule();
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(y->num_computed, 4);
  EXPECT_EQ(plan[0].n_tokens, 8);
  sched_->finish(y);
  expect_all_blocks_back();
}

TEST_F(SchedulerTest, ForkSharesFullBlocksAndCopiesThePartialOne) {
  SchedulerConfig cfg;
  make(16, cfg);
  Sequence* a = add(1, 10, 1.0);
  run(sched_->schedule());
  kv::KvSeq child;
  ASSERT_TRUE(kv_->fork(a->kv, 10, child));
  ASSERT_EQ(child.num_blocks(), 3);
  EXPECT_EQ(child.block_table.blocks[0], a->kv.block_table.blocks[0]);
  EXPECT_EQ(child.block_table.blocks[1], a->kv.block_table.blocks[1]);
  EXPECT_NE(child.block_table.blocks[2], a->kv.block_table.blocks[2]);
  EXPECT_EQ(kv_->usage().used, 4);
  sched_->finish(a);
  EXPECT_EQ(kv_->num_protected_blocks(), 2);  // the child still holds the cached prefix
  kv_->free(child);
  expect_all_blocks_back();
}

}  // namespace
}  // namespace pdserve::engine

namespace pdserve::engine {
namespace {

TEST_F(SchedulerTest, SaltedChurnKeepsEveryCachedBlockEvictable) {
  SchedulerConfig cfg;
  cfg.max_batched_tokens = 2048;
  make(64, cfg);
  int64_t id = 1;
  for (int wave = 0; wave < 20; ++wave) {
    std::vector<Sequence*> seqs;
    for (int i = 0; i < 100; ++i) {
      Sequence* s = add(id, 11, static_cast<double>(id), 0, 100);
      s->cache_salt = "tenant-" + std::to_string(id);
      ++id;
      seqs.push_back(s);
    }
    // Run until every sequence has its one token, finishing each as it gets it.
    while (!seqs.empty()) {
      auto plan = sched_->schedule();
      ASSERT_FALSE(plan.empty());
      run(plan);
      for (const auto& p : plan)
        if (p.needs_logits) {
          sched_->finish(p.seq);
          seqs.erase(std::find(seqs.begin(), seqs.end(), p.seq));
        }
      ASSERT_EQ(kv_->num_evictable_blocks(), kv_->usage().cached) << "wave " << wave;
    }
    expect_all_blocks_back();
  }
  // One sequence can still grow, step by step, to the whole pool.
  Sequence* big = add(id, 11, static_cast<double>(id), 0, 900);
  while (big->tokens.size() < 64 * kBs) {
    auto plan = sched_->schedule();
    ASSERT_EQ(plan.size(), 1u) << big->tokens.size() << " tokens, " << kv_->usage().free << " free, "
                               << kv_->usage().cached << " cached, " << kv_->num_evictable_blocks() << " evictable";
    run(plan);
  }
  EXPECT_EQ(sched_->num_preemptions(), 0);
  sched_->finish(big);
}

}  // namespace
}  // namespace pdserve::engine
