// The model alone (no engine): greedy decoding of stories260K through a paged KV cache
// must reproduce the reference engine's tokens exactly and its top-5 log-probabilities
// within 1e-3, with the prompt prefilled in one batch and token by token.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "kernels/ops.h"
#include "kv/block_pool.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "support/reference.h"

namespace pdserve {
namespace {

struct Runner {
  std::unique_ptr<model::Model> m;
  std::unique_ptr<kv::KvCache> cache;
  kv::BlockPool pool{64};
  kv::BlockTable table;
  int block_size = 4;  // small blocks: every case crosses many block boundaries

  explicit Runner(const std::string& path, kernels::KvDtype dtype) {
    auto r = model::Model::load(path);
    EXPECT_TRUE(r.ok()) << r.error();
    m = std::move(r.value());
    kv::KvCacheShape s;
    s.n_layers = m->config().n_layer;
    s.n_kv_heads = m->config().n_head_kv;
    s.head_dim = m->config().head_dim;
    s.block_size = block_size;
    s.num_blocks = 64;
    s.dtype = dtype;
    cache = std::make_unique<kv::KvCache>(s);
  }

  /// Feeds tokens at positions [pos, pos+n), returns the logits of the last one.
  std::vector<float> feed(const std::vector<int32_t>& toks, int pos) {
    model::Batch b;
    const int need = (pos + static_cast<int>(toks.size()) + block_size - 1) / block_size;
    if (need > static_cast<int>(table.blocks.size())) pool.allocate(need - table.blocks.size(), table.blocks);
    b.block_tables.push_back(table.blocks.data());
    for (size_t i = 0; i < toks.size(); ++i) {
      b.tokens.push_back(toks[i]);
      b.positions.push_back(pos + i);
      b.slot_mapping.push_back(table.slot(pos + i, block_size));
      b.seq_ids.push_back(0);
    }
    b.logits_rows.push_back(static_cast<int>(toks.size()) - 1);
    std::vector<float> logits(m->config().n_vocab);
    m->forward(b, cache->layers(), logits.data());
    return logits;
  }
};

void check_case(Runner& r, const testing::ReferenceCase& c, bool prefill_whole) {
  std::vector<float> logits;
  int pos = 0;
  if (prefill_whole) {
    logits = r.feed(c.prompt_tokens, 0);
    pos = c.prompt_tokens.size();
  } else {
    for (int32_t t : c.prompt_tokens) logits = r.feed({t}, pos++);
  }
  const int n_vocab = r.m->config().n_vocab;
  std::vector<float> lp(n_vocab);
  for (size_t step = 0; step < c.top_logprobs.size(); ++step) {
    kernels::log_softmax(logits.data(), lp.data(), n_vocab);
    for (auto [id, ref_lp] : c.top_logprobs[step])
      EXPECT_NEAR(lp[id], ref_lp, 1e-3) << "prompt '" << c.prompt << "' step " << step << " token " << id;
    const int32_t argmax = std::max_element(logits.begin(), logits.end()) - logits.begin();
    if (step >= c.tokens.size()) break;
    ASSERT_EQ(argmax, c.tokens[step]) << "prompt '" << c.prompt << "' step " << step;
    logits = r.feed({c.tokens[step]}, pos++);
  }
}

TEST(ModelReference, Stories260KGreedyMatchesReference) {
  for (bool whole : {true, false}) {
    for (const auto& c : testing::load_reference("../shared/reference/stories260K.json")) {
      Runner r("../shared/models/stories260K.gguf", kernels::KvDtype::F16);
      check_case(r, c, whole);
    }
  }
}

TEST(ModelReference, Stories260KF32KvCacheMatchesReference) {
  for (const auto& c : testing::load_reference("../shared/reference/stories260K.json")) {
    Runner r("../shared/models/stories260K.gguf", kernels::KvDtype::F32);
    check_case(r, c, true);
  }
}

}  // namespace
}  // namespace pdserve
