// The radix prefix cache on a sliding-window architecture: gemma3 (`pdserve synth --shape
// gemma-3-1b`, 7 of its blocks — layers 0-4 and 6 local, 5 global — window 8, so prompts of
// 12-16 tokens reach past it). Greedy outputs are identical with the cache off, cold, warm
// (prefix blocks reused: the local layers then read cached keys only inside their window)
// and all at once with prefill chunked to 8 tokens per step.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "model/synth.h"
#include "support/engine_runner.h"
#include "support/pool_free.h"

namespace pdserve {
namespace {

using testing::Completion;
using testing::drain;
using testing::make_engine;
using testing::submit;

constexpr int kBs = 4;

/// The gemma3 synth file of this process (removed at exit).
class Gemma3File : public ::testing::Environment {
 public:
  static std::string path() {
    return (std::filesystem::temp_directory_path() / ("pdserve-test-pc-gemma3-" + std::to_string(getpid()) + ".gguf")).string();
  }
  void SetUp() override {
    auto s = model::builtin_shape("gemma-3-1b");
    ASSERT_TRUE(s.ok());
    s.value().n_layer = 7;
    s.value().sliding_window = 8;
    model::SynthOptions opt;
    opt.vocab_from = "../shared/tokenizer/ggml-vocab-llama-spm.gguf";
    auto r = model::synth_model(s.value(), opt, path());
    ASSERT_TRUE(r.ok()) << r.error();
  }
  void TearDown() override { std::filesystem::remove(path()); }
};
const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new Gemma3File);

engine::EngineConfig config(bool prefix_cache) {
  engine::EngineConfig c;
  c.model_path = Gemma3File::path();
  c.block_size = kBs;
  c.ctx_size = 256;
  c.prefix_cache = prefix_cache;
  return c;
}

std::vector<Completion> run_all(engine::Engine& e, const std::vector<std::vector<int32_t>>& prompts, bool at_once) {
  engine::SamplingParams p;
  p.temperature = 0.f;
  p.max_tokens = 10;
  std::vector<Completion> out;
  if (!at_once) {
    for (const auto& q : prompts) out.push_back(drain(*submit(e, q, p)));
    return out;
  }
  std::vector<std::shared_ptr<engine::RequestStream>> streams;
  for (const auto& q : prompts) streams.push_back(submit(e, q, p));
  for (auto& s : streams) out.push_back(drain(*s));
  return out;
}

TEST(PrefixCacheSlidingWindow, Gemma3OutputsIdenticalOffColdWarmAndChunked) {
  auto off = make_engine(config(false));
  ASSERT_TRUE(off);
  const auto base = off->tokenizer().encode(
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the park", true);
  ASSERT_GE(base.size(), 16u);
  // Prefixes of 2·kBs−1, 2·kBs+1 and 3·kBs tokens (all beyond the window of 8), then 3 tokens of their own.
  std::vector<std::vector<int32_t>> prompts;
  for (int shared : {2 * kBs - 1, 2 * kBs + 1, 3 * kBs})
    for (int i = 0; i < 3; ++i) {
      std::vector<int32_t> q(base.begin(), base.begin() + shared);
      for (int j = 0; j < 3; ++j) q.push_back(base[shared + ((i * 3 + j) % 4)]);
      prompts.push_back(q);
    }
  const std::vector<Completion> expect = run_all(*off, prompts, false);

  auto on = make_engine(config(true));
  ASSERT_TRUE(on);
  const std::vector<Completion> cold = run_all(*on, prompts, false);
  const int64_t hits_after_cold = on->metrics().prefix_cache_hits;
  const std::vector<Completion> warm = run_all(*on, prompts, false);
  EXPECT_GT(on->metrics().prefix_cache_hits, hits_after_cold);
  engine::EngineConfig chunked = config(true);
  chunked.max_batched_tokens = 8;
  auto fresh = make_engine(chunked);
  ASSERT_TRUE(fresh);
  const std::vector<Completion> burst = run_all(*fresh, prompts, true);
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_EQ(expect[i].tokens.size(), 10u) << "prompt " << i;
    EXPECT_EQ(cold[i].tokens, expect[i].tokens) << "cold, prompt " << i;
    EXPECT_EQ(warm[i].tokens, expect[i].tokens) << "warm, prompt " << i;
    EXPECT_EQ(burst[i].tokens, expect[i].tokens) << "burst, prompt " << i;
  }
  EXPECT_TRUE(testing::wait_pool_free(*on));
  const auto st = on->stats();
  EXPECT_EQ(st.kv_blocks_used, 0);
  EXPECT_GT(st.kv_blocks_cached, 0);
}

}  // namespace
}  // namespace pdserve
