// A decode worker must not trust a prefill worker's first token: one outside the
// vocabulary (a buggy or malicious peer) would index past the token embeddings on the next
// decode step. The engine treats such a transfer as failed and recomputes the prompt
// locally, so the output equals that of an engine without remote prefill.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "support/engine_runner.h"
#include "support/pool_free.h"

namespace pdserve {
namespace {

using testing::drain;
using testing::make_engine;
using testing::submit;

/// Reports every transfer as complete at once, with `token` as the first token and no KV
/// written.
class LyingKvSource final : public engine::KvSource {
 public:
  explicit LyingKvSource(int32_t token) : token_(token) {}
  bool available(const engine::SamplingParams&) override { return true; }
  void start(engine::RemotePrefillTask task, engine::KvBlockAccess&,
             std::function<void(engine::RemotePrefillResult)> done) override {
    engine::RemotePrefillResult r;
    r.seq_id = task.seq_id;
    r.ok = true;
    r.first.token = token_;
    done(std::move(r));
  }
  void cancel(int64_t) override {}

 private:
  int32_t token_;
};

engine::SamplingParams greedy(int max_tokens) {
  engine::SamplingParams p;
  p.temperature = 0.f;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

const std::vector<int32_t> kPrompt = {1, 403, 407, 261, 378};  // "Once upon a time" in stories260K

TEST(EngineRemoteFirstToken, OutOfVocabularyFirstTokenIsRecomputedLocally) {
  engine::EngineConfig plain_cfg;
  plain_cfg.threads = 1;
  auto plain = make_engine(plain_cfg);
  ASSERT_TRUE(plain);
  const testing::Completion want = drain(*submit(*plain, kPrompt, greedy(8)));
  ASSERT_EQ(want.tokens.size(), 8u);

  for (int32_t bad : {-1, 512, 1 << 30}) {  // stories260K has 512 tokens
    engine::EngineConfig cfg;
    cfg.threads = 1;
    cfg.kv_source = std::make_shared<LyingKvSource>(bad);
    cfg.remote_prefill_threshold = 0;  // every prompt's KV comes from the source
    auto e = make_engine(cfg);
    ASSERT_TRUE(e);
    const testing::Completion got = drain(*submit(*e, kPrompt, greedy(8)));
    EXPECT_EQ(got.finish, engine::FinishReason::Length) << "first token " << bad;
    EXPECT_EQ(got.tokens, want.tokens) << "first token " << bad;
    EXPECT_TRUE(testing::wait_pool_free(*e));
  }
}

}  // namespace
}  // namespace pdserve
