// Speculative decoding (engine/spec_proposer.h): the n-gram lookup, the adaptive k, the
// KV rollback, that a verification chunk gets the logits of single decode steps bit for
// bit, and that every proposer leaves the engine's outputs — tokens, text, logprobs,
// finish reasons — exactly those of plain decoding, alone and in batches of 1 to 32, with
// greedy and seeded sampling, stops, max_tokens, n > 1, grammars, prefix caching and
// preemption.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <numeric>
#include <random>

#include "engine/spec_adaptive.h"
#include "engine/spec_cost.h"
#include "engine/spec_ngram.h"
#include "kv/kv_cache_manager.h"
#include "model/model.h"
#include "support/engine_runner.h"
#include "support/pool_free.h"
#include "support/reference.h"

namespace pdserve {
namespace {

using testing::Completion;
using testing::drain;
using testing::make_engine;

constexpr const char* kStories = "../shared/models/stories260K.gguf";
constexpr const char* kSynth = "../shared/models/synth-llama-small-q8_0.gguf";

TEST(SpecNgram, ProposesWhatFollowedTheLatestLongestMatch) {
  // ... 1 2 3 9 ... 1 2 3 7 8 ... 2 3 | suffix "2 3": latest earlier match is at 7's left.
  const std::vector<int32_t> t = {5, 1, 2, 3, 9, 4, 1, 2, 3, 7, 8, 6, 2, 3};
  EXPECT_EQ(engine::ngram_lookup(t, 1, 4, 3), (std::vector<int32_t>{7, 8, 6}));
  EXPECT_EQ(engine::ngram_lookup(t, 1, 4, 1), (std::vector<int32_t>{7}));
  // A longer suffix wins over a more recent shorter one: "1 2 3" ... "x 3".
  const std::vector<int32_t> u = {1, 2, 3, 4, 0, 3, 5, 1, 2, 3};
  EXPECT_EQ(engine::ngram_lookup(u, 1, 3, 2), (std::vector<int32_t>{4, 0}));
  EXPECT_EQ(engine::ngram_lookup(u, 1, 1, 2), (std::vector<int32_t>{5, 1}));  // only n = 1: the latest "3"
  // The proposal stops at the end of the tokens; no earlier match ⇒ nothing.
  EXPECT_EQ(engine::ngram_lookup({4, 4}, 1, 2, 5), (std::vector<int32_t>{4}));
  EXPECT_TRUE(engine::ngram_lookup({1, 2, 3}, 1, 3, 4).empty());
  EXPECT_TRUE(engine::ngram_lookup({1, 2, 1, 2}, 3, 3, 4).empty());
  EXPECT_TRUE(engine::ngram_lookup({1, 1}, 1, 1, 0).empty());
}

TEST(SpecAdaptive, BacksOffToIdleStepsAndRecovers) {
  engine::SpecState st;
  EXPECT_EQ(engine::spec_next_k(st, 4, true), 4);
  engine::spec_update(st, 4, 4, 2);
  EXPECT_EQ(engine::spec_next_k(st, 4, true), 3);
  engine::spec_update(st, 4, 3, 0);  // first miss: k = 1
  EXPECT_EQ(engine::spec_next_k(st, 4, true), 1);
  engine::spec_update(st, 4, 1, 0);  // second miss: 4 idle steps
  int idle = 0;
  while (engine::spec_next_k(st, 4, true) == 0) ++idle;
  EXPECT_EQ(idle, 4);
  engine::spec_update(st, 4, 1, 1);  // accepted: grows again
  EXPECT_EQ(engine::spec_next_k(st, 4, true), 2);
  for (int i = 0; i < 5; ++i) engine::spec_update(st, 4, engine::spec_next_k(st, 4, true), 4);
  EXPECT_EQ(engine::spec_next_k(st, 4, true), 4);
  engine::SpecState fixed;
  engine::spec_update(fixed, 4, 4, 0);
  engine::spec_update(fixed, 4, 4, 0);
  EXPECT_EQ(engine::spec_next_k(fixed, 4, false), 4);  // not adaptive: always k_max
}

TEST(SpecCost, FitsStepTimeAgainstRowsAndPricesADraftRow) {
  // Steps of 4 and 20 rows taking 10 ms + 0.5 ms per row: a = 10 ms, b = 0.5 ms.
  engine::SpecCostModel m;
  EXPECT_EQ(m.threshold(1), 0);  // no fit yet: no gating
  for (int i = 0; i < 40; ++i) {
    const int rows = i % 2 ? 4 : 20;
    m.observe_step(rows, 0.010 + 0.0005 * rows);
  }
  EXPECT_NEAR(m.step_seconds(), 0.010, 1e-9);
  EXPECT_NEAR(m.row_seconds(), 0.0005, 1e-9);
  // Per token with B sequences: (a + b·B) / B; a row pays above b / that.
  EXPECT_NEAR(m.threshold(1), 0.0005 / 0.0105, 1e-9);
  EXPECT_NEAR(m.threshold(32), 0.0005 / ((0.010 + 0.016) / 32), 1e-9);
  m.observe_step(4, 1.0);  // a preempted step: ignored
  EXPECT_NEAR(m.step_seconds(), 0.010, 1e-9);
  // A proposer at 1 ms per drafted token makes every row cost 1.5 ms.
  m.observe_proposer(4, 0.004);
  EXPECT_NEAR(m.threshold(1), 0.0015 / 0.0105, 1e-9);
  // Steps that all have the same rows say nothing about a row's cost: no fit.
  engine::SpecCostModel steady;
  for (int i = 0; i < 100; ++i) steady.observe_step(8, 0.02);
  EXPECT_EQ(steady.threshold(1), 0);
}

TEST(SpecCost, PlainStepsSpreadTheRowsForTheFit) {
  engine::SpecCostModel m;
  int plain = 0;
  for (int i = 0; i < 16; ++i) plain += m.plain_step();
  EXPECT_EQ(plain, 4);  // every 4th before the first fit
}

TEST(SpecAdaptive, CostGateCutsKToRowsThatPayAndProbes) {
  EXPECT_EQ(engine::spec_cost_k(0.9, 0.5, 8), 6);  // 0.9^6 = 0.53 > 0.5 > 0.9^7
  EXPECT_EQ(engine::spec_cost_k(0.5, 0.6, 4), 0);
  EXPECT_EQ(engine::spec_cost_k(0.5, 0, 4), 4);
  engine::SpecState st;
  // The first proposal: the rows the prior acceptance 1/2 pays for, at least one.
  for (const auto& [threshold, k] : {std::pair{0.05, 4}, {0.2, 2}, {0.45, 1}, {0.99, 1}}) {
    engine::SpecState first;
    EXPECT_EQ(engine::spec_next_k(first, 4, true, threshold), k) << threshold;
  }
  engine::SpecState costly_first;  // a draft model's first proposal: k (its prompt is paid anyway)
  EXPECT_EQ(engine::spec_next_k(costly_first, 4, true, 0.99, false), 4);
  EXPECT_EQ(engine::spec_next_k(st, 4, true, 0.99), 1);
  engine::spec_update(st, 4, 4, 4);                       // acceptance (4.5 / 5) = 0.9
  EXPECT_EQ(engine::spec_next_k(st, 4, true, 0.5), 4);    // 0.9^4 = 0.66 > 0.5
  EXPECT_EQ(engine::spec_next_k(st, 4, true, 0.85), 1);   // only 0.9 > 0.85
  engine::spec_update(st, 4, 1, 0);                       // acceptance 3.7 / 5.2 = 0.71
  // Closed gate: 2 idle steps, then a 1-token probe; closed again: 4 idle steps.
  EXPECT_EQ(engine::spec_next_k(st, 4, true, 0.8), 0);
  EXPECT_EQ(engine::spec_next_k(st, 4, true, 0.8), 0);
  EXPECT_EQ(engine::spec_next_k(st, 4, true, 0.8), 0);
  EXPECT_EQ(engine::spec_next_k(st, 4, true, 0.8), 1);
  engine::spec_update(st, 4, 1, 0);  // second miss in a row: 4 idle steps, then the probe
  int idle = 0;
  while (engine::spec_next_k(st, 4, true, 0.8) == 0 && idle < 100) ++idle;
  EXPECT_EQ(idle, 4);
  engine::spec_update(st, 4, 1, 1);  // accepted, but 3.55 / 5.49 = 0.65 < 0.8: closed again
  idle = 0;
  while (engine::spec_next_k(st, 4, true, 0.8) == 0 && idle < 100) ++idle;
  EXPECT_EQ(idle, 5);  // the closing step + 4 idle steps (second closing in a row), then the probe
  // A row that no acceptance pays for (threshold >= 1): no proposal, no probe.
  engine::SpecState slow;
  engine::spec_update(slow, 4, 4, 4);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(engine::spec_next_k(slow, 4, true, 1.2), 0);
  EXPECT_EQ(engine::spec_next_k(slow, 4, false, 1.2), 4);  // not adaptive: no gate
}

TEST(SpecAdaptive, UnpayableRowsGetOneProbePerSequenceAndClosedGatesIdleUpTo256Steps) {
  // threshold >= 1: a new sequence probes with one token (not k_max), then never again.
  engine::SpecState fresh;
  EXPECT_EQ(engine::spec_next_k(fresh, 4, true, 1.2), 1);
  engine::spec_update(fresh, 4, 1, 1);
  for (int i = 0; i < 300; ++i) EXPECT_EQ(engine::spec_next_k(fresh, 4, true, 1.2), 0);
  // A proposer whose first proposal is expensive (a draft model's prompt) is not probed.
  engine::SpecState costly;
  for (int i = 0; i < 300; ++i) EXPECT_EQ(engine::spec_next_k(costly, 4, true, 1.2, false), 0);
  EXPECT_EQ(engine::spec_next_k(costly, 4, true, 0.5, false), 4);  // rows that can pay: measured as before
  // A closed gate (acceptance 0.25 < 0.8) idles 2, 4, ..., 256 steps between 1-token probes.
  engine::SpecState low;
  engine::spec_update(low, 4, 1, 0);
  std::vector<int> gaps;
  for (int zeros = 0, step = 0; step < 3000 && gaps.size() < 10; ++step) {
    const int k = engine::spec_next_k(low, 4, true, 0.8);
    if (k == 0) {
      ++zeros;
      continue;
    }
    EXPECT_EQ(k, 1);
    gaps.push_back(zeros);
    zeros = 0;
  }
  // Each gap: the closing step + its idle steps.
  EXPECT_EQ(gaps, (std::vector<int>{3, 5, 9, 17, 33, 65, 129, 257, 257, 257}));
}

TEST(SpecRollback, TruncateReturnsTailBlocksButNeverCachedOnes) {
  kv::KvCacheShape shape;
  shape.n_layers = 1;
  shape.n_kv_heads = 1;
  shape.head_dim = 8;
  shape.block_size = 4;
  shape.num_blocks = 8;
  kv::KvCacheManager kv(shape, /*prefix_caching=*/true, kv::EvictionPolicy::kLru);
  kv::KvSeq s;
  const std::vector<int32_t> toks = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  EXPECT_EQ(kv.match_prefix(s, "", toks.data(), 9), 0);
  ASSERT_TRUE(kv.allocate_slots(s, 10));  // 3 blocks
  kv.cache_full_blocks(s, toks.data(), 8);  // 2 cached
  ASSERT_TRUE(kv.allocate_slots(s, 10 + 9));  // 5 blocks: 9 draft positions
  EXPECT_EQ(kv.usage().free, 3);
  kv.truncate(s, 11);  // 11 tokens ⇒ 3 blocks
  EXPECT_EQ(s.num_blocks(), 3);
  EXPECT_EQ(kv.usage().free, 5);
  kv.truncate(s, 1);  // never below the radix cache's blocks
  EXPECT_EQ(s.num_blocks(), 2);
  kv.free(s);
  EXPECT_EQ(kv.usage().used, 0);
}

/// Logits of `prompt` then `gen` decoded: either one token per forward (plain decoding),
/// or the prompt and then all of `gen` in one forward with a logits row per token (a
/// verification chunk). Returns [gen.size()][n_vocab].
std::vector<float> decode_logits(model::Model& m, const std::vector<int32_t>& prompt, const std::vector<int32_t>& gen,
                                 bool chunk) {
  kv::KvCacheShape shape;
  shape.n_layers = m.config().n_layer;
  shape.n_kv_heads = m.config().n_head_kv;
  shape.head_dim = m.config().head_dim;
  shape.block_size = 16;
  shape.num_blocks = 16;
  kv::KvCacheManager kv(shape, false, kv::EvictionPolicy::kLru);
  kv::KvSeq s;
  const int n_vocab = m.config().n_vocab, plen = static_cast<int>(prompt.size());
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), gen.begin(), gen.end());
  EXPECT_TRUE(kv.allocate_slots(s, static_cast<int>(all.size())));
  std::vector<float> out;
  auto run = [&](int from, int to, bool logits_all) {  // positions [from, to)
    model::Batch b;
    b.block_tables.push_back(s.block_table.blocks.data());
    for (int p = from; p < to; ++p) {
      b.tokens.push_back(all[p]);
      b.positions.push_back(p);
      b.slot_mapping.push_back(s.block_table.slot(p, shape.block_size));
      b.seq_ids.push_back(0);
      b.gemm_order.push_back(kernels::gemm_order_flag(p, plen));
      if (logits_all || p == to - 1) b.logits_rows.push_back(p - from);
    }
    const float* l = m.forward(b, kv.layers());
    return std::vector<float>(l, l + b.logits_rows.size() * n_vocab);
  };
  run(0, plen - 1, false);  // all but the last prompt token
  if (chunk) return run(plen - 1, static_cast<int>(all.size()) - 1, true);
  for (int p = plen - 1; p + 1 < static_cast<int>(all.size()); ++p) {
    auto l = run(p, p + 1, false);
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

TEST(SpecVerification, AChunkOfRowsGetsTheLogitsOfSingleDecodeSteps) {
  for (const char* path : {kStories, kSynth, "../shared/models/synth-llama-small-f16.gguf",
                           "../shared/models/synth-qwen2-small-q8_0.gguf"}) {
    auto m = model::Model::load(path);
    ASSERT_TRUE(m.ok()) << m.error();
    std::mt19937 rng(3);
    std::vector<int32_t> prompt(13), gen(9);  // gen[0] = the last prompt token's successor
    for (auto& t : prompt) t = static_cast<int32_t>(rng() % m.value()->config().n_vocab);
    for (auto& t : gen) t = static_cast<int32_t>(rng() % m.value()->config().n_vocab);
    const auto steps = decode_logits(*m.value(), prompt, gen, false);
    const auto chunk = decode_logits(*m.value(), prompt, gen, true);
    ASSERT_EQ(steps.size(), chunk.size());
    EXPECT_EQ(std::memcmp(steps.data(), chunk.data(), steps.size() * sizeof(float)), 0) << path;
  }
}

// ---- Engine: speculation on == off --------------------------------------------------

struct Request {
  std::vector<int32_t> prompt;
  engine::SamplingParams params;
  engine::RequestOptions opts;
};

/// Every choice's completion, in request then choice order.
using Outputs = std::vector<Completion>;

std::vector<std::shared_ptr<engine::RequestStream>> submit_req(engine::Engine& e, const Request& r) {
  auto s = e.submit_group(r.prompt, r.params, r.opts);
  EXPECT_TRUE(s.ok()) << s.error();
  return s.ok() ? s.value() : std::vector<std::shared_ptr<engine::RequestStream>>{};
}

/// Runs `reqs` in groups of `batch` submitted together (1: one at a time).
Outputs run_all(engine::Engine& e, const std::vector<Request>& reqs, size_t batch) {
  Outputs out;
  for (size_t i = 0; i < reqs.size(); i += batch) {
    std::vector<std::shared_ptr<engine::RequestStream>> streams;
    for (size_t j = i; j < std::min(reqs.size(), i + batch); ++j)
      for (auto& s : submit_req(e, reqs[j])) streams.push_back(s);
    for (auto& s : streams) out.push_back(drain(*s));
  }
  return out;
}

void expect_same(const Outputs& want, const Outputs& got, const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(want[i].tokens, got[i].tokens) << what << ", output " << i;
    EXPECT_EQ(want[i].text, got[i].text) << what << ", output " << i;
    EXPECT_EQ(want[i].finish, got[i].finish) << what << ", output " << i;
    EXPECT_EQ(want[i].completion_tokens, got[i].completion_tokens) << what << ", output " << i;
    ASSERT_EQ(want[i].logprobs.size(), got[i].logprobs.size()) << what << ", output " << i;
    for (size_t j = 0; j < want[i].logprobs.size(); ++j) {
      EXPECT_EQ(want[i].logprobs[j].token, got[i].logprobs[j].token) << what;
      EXPECT_EQ(want[i].logprobs[j].logprob, got[i].logprobs[j].logprob) << what << ", output " << i << " token " << j;
      EXPECT_EQ(want[i].logprobs[j].top, got[i].logprobs[j].top) << what;
    }
  }
}

/// 32 requests: greedy and seeded sampling (top-k, top-p), stop strings, short and long
/// max_tokens, logprobs, n = 2, a grammar, prompts with repeated passages (so n-gram lookup has
/// something to copy) and shared prefixes (prefix cache hits).
std::vector<Request> workload(const std::string& model_path, uint32_t seed) {
  auto m = model::Model::load(model_path);
  EXPECT_TRUE(m.ok());
  const int n_vocab = m.ok() ? m.value()->config().n_vocab : 2;
  std::vector<std::vector<int32_t>> prompts;
  if (model_path == kStories)
    for (const auto& c : testing::load_reference("../shared/reference/stories260K.json")) prompts.push_back(c.prompt_tokens);
  std::mt19937 rng(seed);
  std::vector<int32_t> passage(24);
  for (auto& t : passage) t = static_cast<int32_t>(1 + rng() % (n_vocab - 1));
  for (int i = 0; i < 4; ++i) {  // passage, passage prefix: "repeat it"
    std::vector<int32_t> p = {1};
    p.insert(p.end(), passage.begin(), passage.end());
    p.insert(p.end(), passage.begin(), passage.begin() + 3 + i);
    prompts.push_back(p);
  }
  std::vector<Request> reqs;
  for (int i = 0; i < 32; ++i) {
    Request r;
    r.prompt = prompts[rng() % prompts.size()];
    engine::SamplingParams& p = r.params;
    p.temperature = i % 2 ? 0.f : (rng() % 2 ? 0.7f : 1.0f);
    if (p.temperature > 0) {
      p.seed = rng();
      if (rng() % 2) p.top_k = 1 + static_cast<int>(rng() % 40);
      if (rng() % 2) p.top_p = 0.9f;
    }
    const int len = model_path == kStories ? 40 : 16;  // the synth model is slower
    p.max_tokens = i % 5 == 0 ? 1 + static_cast<int>(rng() % 4) : len / 2 + static_cast<int>(rng() % len);
    if (i % 7 == 3) p.stop = {model_path == kStories ? "." : "e"};
    if (i % 4 == 1) p.top_logprobs = static_cast<int>(rng() % 3);
    if (i % 6 == 2) p.ignore_eos = true;
    if (i % 8 == 5) r.opts.n = 2;
    if (i % 9 == 4) p.grammar = "root ::= [a-zA-Z ,]+ \".\"";  // structured output: a mask per row
    reqs.push_back(r);
  }
  return reqs;
}

engine::EngineConfig config(const std::string& model, engine::SpecMethod method, int k = 4) {
  engine::EngineConfig c;
  c.model_path = model;
  c.spec.method = method;
  c.spec.k = k;
  c.spec.draft_layers = 2;
  c.num_kv_blocks = 1024;
  return c;
}

/// Plain decoding's outputs of workload(model), run one request at a time (computed once per model).
const Outputs& baseline(const std::string& model) {
  static std::map<std::string, Outputs> done;
  auto it = done.find(model);
  if (it != done.end()) return it->second;
  auto off = make_engine(config(model, engine::SpecMethod::kOff));
  EXPECT_TRUE(off);
  if (!off) return done[model];
  const auto reqs = workload(model, 11);
  Outputs want = run_all(*off, reqs, 1);
  expect_same(want, run_all(*off, reqs, 32), model + ": off, batch 32 vs alone");  // the baseline's own invariance
  return done[model] = std::move(want);
}

/// `on_cfg`'s engine gives baseline(model)'s outputs alone and in batches of 8 and 32.
/// `expect_accepts`: some proposals pass and some fail (both paths ran); false for n-gram
/// lookup on random weights, whose output rarely repeats a token of its context.
void expect_unchanged(const std::string& model, engine::EngineConfig on_cfg, const std::string& name,
                      bool expect_accepts = true) {
  const auto reqs = workload(model, 11);
  const Outputs& want = baseline(model);
  auto on = make_engine(on_cfg);
  ASSERT_TRUE(on);
  for (size_t batch : {1, 8, 32}) {
    expect_same(want, run_all(*on, reqs, batch), name + ": on, batch " + std::to_string(batch));
    EXPECT_TRUE(testing::wait_pool_free(*on)) << name;
  }
  // The proposals were verified, some accepted and some rejected (both paths ran).
  const auto m = on->metrics();
  if (expect_accepts) {
    EXPECT_GT(m.spec_accepted_tokens, 0) << name;
    EXPECT_LT(m.spec_accepted_tokens, m.spec_draft_tokens) << name;
  }
  if (expect_accepts) {
    ASSERT_FALSE(m.spec_accepted_per_pos.empty()) << name;
  }
  EXPECT_EQ(std::accumulate(m.spec_accepted_per_pos.begin(), m.spec_accepted_per_pos.end(), int64_t{0}),
            m.spec_accepted_tokens);
}

TEST(SpecEngine, NgramChangesNoOutputOnStories) {
  expect_unchanged(kStories, config(kStories, engine::SpecMethod::kNgram), "ngram stories260K");
}

TEST(SpecEngine, NgramChangesNoOutputOnSynth) {
  // Random weights rarely repeat a token of their context: few proposals, if any.
  expect_unchanged(kSynth, config(kSynth, engine::SpecMethod::kNgram), "ngram synth", false);
}

TEST(SpecEngine, FixedLargeKWithTinyPoolPreemptsAndStaysExact) {
  // k = 8 without backoff, 2-token blocks and a pool that forces preemption: drafts
  // compete for blocks, sequences recompute; outputs still those of plain decoding.
  auto cfg = config(kStories, engine::SpecMethod::kNgram, 8);
  cfg.spec.adaptive = false;
  cfg.block_size = 2;
  cfg.num_kv_blocks = 120;
  cfg.max_batched_tokens = 64;
  expect_unchanged(kStories, cfg, "ngram k=8 tiny pool");
}

TEST(SpecEngine, NoPrefixCacheAndChunkedBudget) {
  auto cfg = config(kStories, engine::SpecMethod::kNgram, 3);
  cfg.prefix_cache = false;
  cfg.max_batched_tokens = 7;  // drafts compete with prefill chunks for the budget
  expect_unchanged(kStories, cfg, "ngram no prefix cache, budget 7");
}

TEST(SpecEngine, ChoicesForkFromAPromptWhoseLastTokenRunsWithADraft) {
  // A budget of 8 and a 17-token prompt: its last chunk is its last token alone, which the
  // engine runs like a decode row, with a draft behind it. Choice 0 must fork the other
  // choices from that row's logits. Before, they forked a step later (each dropped its first
  // token and went on from choice 0's) or, with a draft model, ended as aborted.
  const auto refs = testing::load_reference("../shared/reference/stories260K.json");
  ASSERT_FALSE(refs.empty());
  std::vector<int32_t> prompt = {1};
  while (prompt.size() < 17) prompt.push_back(refs[0].prompt_tokens[1 + (prompt.size() - 1) % 4]);  // repeats: n-gram proposals
  std::vector<Request> reqs(2);
  for (Request& r : reqs) {
    r.prompt = prompt;
    r.params.max_tokens = 6;
    r.params.top_logprobs = 1;
  }
  reqs[0].opts.n = 2;
  reqs[0].params.temperature = 0.f;  // greedy
  reqs[1].opts.n = 3;
  reqs[1].params.temperature = 0.8f;
  reqs[1].params.seed = 5;
  auto off_cfg = config(kStories, engine::SpecMethod::kOff);
  off_cfg.max_batched_tokens = 8;
  auto off = make_engine(off_cfg);
  ASSERT_TRUE(off);
  const Outputs want = run_all(*off, reqs, 1);
  ASSERT_EQ(want.size(), 5u);
  EXPECT_EQ(want[0].tokens, want[1].tokens);  // greedy choices agree
  for (engine::SpecMethod method : {engine::SpecMethod::kNgram, engine::SpecMethod::kDraft}) {
    auto cfg = config(kStories, method);
    cfg.spec.adaptive = false;
    cfg.spec.draft_model = kStories;
    cfg.max_batched_tokens = 8;
    auto on = make_engine(cfg);
    ASSERT_TRUE(on);
    expect_same(want, run_all(*on, reqs, 1), method == engine::SpecMethod::kNgram ? "ngram" : "draft");
    EXPECT_GT(on->metrics().spec_draft_tokens, 0);
    EXPECT_TRUE(testing::wait_pool_free(*on));
  }
}

TEST(SpecEngine, LayerSkipChangesNoOutputOnStories) {
  expect_unchanged(kStories, config(kStories, engine::SpecMethod::kLayerSkip), "layerskip stories260K");
}

TEST(SpecEngine, LayerSkipChangesNoOutputOnSynth) {
  expect_unchanged(kSynth, config(kSynth, engine::SpecMethod::kLayerSkip, 3), "layerskip synth");
}

TEST(SpecEngine, DraftModelChangesNoOutputOnStories) {
  auto cfg = config(kStories, engine::SpecMethod::kDraft);
  cfg.spec.draft_model = kStories;  // itself: greedy proposals all pass, sampled ones not
  expect_unchanged(kStories, cfg, "draft stories260K");
}

TEST(SpecEngine, DraftModelChangesNoOutputOnSynth) {
  auto cfg = config(kSynth, engine::SpecMethod::kDraft, 3);
  cfg.spec.draft_model = "../shared/models/synth-llama-small-q4_0.gguf";  // same vocabulary, coarser weights
  expect_unchanged(kSynth, cfg, "draft synth");
}

TEST(SpecEngine, ADraftModelWithAnotherVocabularyIsRefused) {
  auto cfg = config(kStories, engine::SpecMethod::kDraft);
  cfg.spec.draft_model = kSynth;
  auto e = engine::Engine::create(cfg);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().find("vocabulary"), std::string::npos) << e.error();
  EXPECT_EQ(e.error().find('\n'), std::string::npos) << e.error();
}

}  // namespace
}  // namespace pdserve
