// The bf16 / q8_0 / q4_0 KV dtypes through the engine (synth-llama-small-q8_0: head_dim 32, so q8_0 / q4_0
// fit): a greedy request gives the same tokens alone, batched with the others, from a warm
// prefix cache (blocks stored in the dtype and reused), as copy-on-write choices (n > 1,
// the shared partial block copied), and preempted and recomputed under a tiny pool; every
// block comes back. The pool's bytes follow the dtype, so one --kv-cache-mb holds more
// blocks of a smaller type. A head_dim the type cannot hold is refused at start.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kv/kv_cache.h"
#include "support/engine_runner.h"
#include "support/pool_free.h"
#include "support/reference.h"

namespace pdserve {
namespace {

using kernels::KvDtype;
using testing::Completion;
using testing::drain;
using testing::submit;

constexpr const char* kModel = "../shared/models/synth-llama-small-q8_0.gguf";

engine::SamplingParams greedy(int max_tokens) {
  engine::SamplingParams p;
  p.temperature = 0.f;
  p.max_tokens = max_tokens;
  return p;
}

std::vector<std::vector<int32_t>> prompts() {
  std::vector<std::vector<int32_t>> out;
  for (const auto& c : testing::load_reference("tests/data/synth-llama-small-f16-kv-q8_0.json")) out.push_back(c.prompt_tokens);
  // Two more sharing a 16-token prefix with the longest (prefix-cache hits mid-prompt).
  std::vector<int32_t> longest = out[4];
  while (longest.size() < 22) longest.insert(longest.end(), out[1].begin(), out[1].end());
  out.push_back(std::vector<int32_t>(longest.begin(), longest.begin() + 19));
  std::vector<int32_t> b(longest.begin(), longest.begin() + 16);
  b.push_back(out[0][1]);
  out.push_back(b);
  return out;
}

engine::EngineConfig config(KvDtype dt, int64_t blocks, bool prefix_cache = true) {
  engine::EngineConfig cfg;
  cfg.model_path = kModel;
  cfg.kv_dtype = dt;
  cfg.block_size = 4;
  cfg.num_kv_blocks = blocks;
  cfg.prefix_cache = prefix_cache;
  cfg.ctx_size = 256;
  return cfg;
}

class KvDtypeEngine : public ::testing::TestWithParam<KvDtype> {};

TEST_P(KvDtypeEngine, AloneBatchedCachedForkedAndPreemptedAreIdentical) {
  const KvDtype dt = GetParam();
  const auto ps = prompts();
  constexpr int kTokens = 8;
  // Alone: a fresh engine without a prefix cache per request.
  std::vector<std::vector<int32_t>> alone;
  {
    auto e = testing::make_engine(config(dt, 64, /*prefix_cache=*/false));
    ASSERT_TRUE(e);
    for (const auto& p : ps) alone.push_back(drain(*submit(*e, p, greedy(kTokens))).tokens);
    EXPECT_TRUE(testing::wait_pool_free(*e));
  }
  for (const auto& t : alone) ASSERT_EQ(t.size(), size_t{kTokens});
  auto e = testing::make_engine(config(dt, 256));
  ASSERT_TRUE(e);
  // Batched, twice: the second round reads the first round's blocks from the prefix cache.
  for (int round = 0; round < 2; ++round) {
    std::vector<std::shared_ptr<engine::RequestStream>> streams;
    for (const auto& p : ps) streams.push_back(submit(*e, p, greedy(kTokens)));
    for (size_t i = 0; i < ps.size(); ++i)
      EXPECT_EQ(drain(*streams[i]).tokens, alone[i]) << kv::kv_dtype_name(dt) << " round " << round << " prompt " << i;
  }
  EXPECT_GT(e->metrics().prefix_cache_hits, 0);
  // n = 3 greedy choices share the prompt's blocks (a partial last block is copied).
  engine::RequestOptions opts;
  opts.n = 3;
  auto group = e->submit_group(ps[5], greedy(kTokens), opts);
  ASSERT_TRUE(group.ok());
  for (auto& s : group.value()) EXPECT_EQ(drain(*s).tokens, alone[5]) << kv::kv_dtype_name(dt) << " choice";
  EXPECT_TRUE(testing::wait_pool_free(*e));
  EXPECT_EQ(e->stats().kv_blocks_used, 0);

  // A pool of 12 blocks (48 tokens): one request fits, all at once do not — preemption.
  auto tiny = testing::make_engine(config(dt, 12));
  ASSERT_TRUE(tiny);
  std::vector<std::shared_ptr<engine::RequestStream>> streams;
  for (const auto& p : ps) streams.push_back(submit(*tiny, p, greedy(kTokens)));
  for (size_t i = 0; i < ps.size(); ++i)
    EXPECT_EQ(drain(*streams[i]).tokens, alone[i]) << kv::kv_dtype_name(dt) << " tiny pool, prompt " << i;
  EXPECT_GT(tiny->metrics().preemptions, 0);
  EXPECT_TRUE(testing::wait_pool_free(*tiny));
  EXPECT_EQ(tiny->stats().kv_blocks_free + tiny->stats().kv_blocks_cached, 12);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, KvDtypeEngine,
                         // f16 and f32: the same properties on stories260K in engine_test / engine_prefix_cache_test
                         ::testing::Values(KvDtype::BF16, KvDtype::Q8_0, KvDtype::Q4_0),
                         [](const auto& info) { return std::string(kv::kv_dtype_name(info.param)); });

// --kv-cache-mb is bytes: 1 MiB holds 1 MiB / bytes_per_block blocks of each dtype, reported
// in /health's terms (EngineStats) — q8_0 ~1.9x and q4_0 ~3.6x the blocks of f16.
TEST(KvDtypeEngineSizing, OneBudgetHoldsMoreBlocksOfSmallerTypes) {
  int64_t f16_blocks = 0;
  for (KvDtype dt : {KvDtype::F16, KvDtype::Q8_0, KvDtype::Q4_0, KvDtype::BF16, KvDtype::F32}) {
    engine::EngineConfig cfg = config(dt, 0);
    cfg.kv_cache_mb = 1;
    auto e = testing::make_engine(cfg);
    ASSERT_TRUE(e);
    const engine::EngineStats s = e->stats();
    // 4 layers x 2 KV heads x 4 tokens, K and V: row bytes 64 (f16/bf16), 128 (f32), 34, 18.
    const int64_t row = dt == KvDtype::F32 ? 128 : dt == KvDtype::Q8_0 ? 34 : dt == KvDtype::Q4_0 ? 18 : 64;
    EXPECT_EQ(s.kv_block_bytes, 2 * 4 * 2 * 4 * row) << kv::kv_dtype_name(dt);
    EXPECT_EQ(s.kv_blocks_total, (int64_t{1} << 20) / s.kv_block_bytes) << kv::kv_dtype_name(dt);
    EXPECT_EQ(s.kv_dtype, kv::kv_dtype_name(dt));
    if (dt == KvDtype::F16) f16_blocks = s.kv_blocks_total;
    if (dt == KvDtype::Q8_0) {
      EXPECT_NEAR(double(s.kv_blocks_total) / f16_blocks, 64.0 / 34, 0.01);
    }
    if (dt == KvDtype::Q4_0) {
      EXPECT_NEAR(double(s.kv_blocks_total) / f16_blocks, 64.0 / 18, 0.01);
    }
  }
}

TEST(KvDtypeEngineSizing, HeadDimThatDoesNotFitIsRefused) {
  for (KvDtype dt : {KvDtype::Q8_0, KvDtype::Q4_0}) {
    engine::EngineConfig cfg;
    cfg.model_path = "../shared/models/stories260K.gguf";  // head_dim 8
    cfg.kv_dtype = dt;
    auto e = engine::Engine::create(cfg);
    ASSERT_FALSE(e.ok());
    EXPECT_EQ(e.error(), std::string("--kv-dtype ") + kv::kv_dtype_name(dt) +
                             " needs a head dimension that is a multiple of 32; this model's head_dim is 8");
  }
  engine::EngineConfig cfg;
  cfg.model_path = "../shared/models/stories260K.gguf";
  cfg.kv_dtype = KvDtype::BF16;  // any head_dim
  EXPECT_TRUE(engine::Engine::create(cfg).ok());
}

}  // namespace
}  // namespace pdserve
