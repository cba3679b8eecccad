// The model alone (no engine): greedy decoding of stories260K through a paged KV cache
// must reproduce the reference engine's tokens exactly and its top-5 log-probabilities
// within 1e-3, with the prompt prefilled in one batch and token by token (f16 KV, as the
// reference ran); an f32 KV cache must stay close (see its test for the tolerance).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "support/reference.h"
#include "support/sequence_runner.h"

namespace pdserve {
namespace {

/// The model and one sequence over it (small blocks: every case crosses many block
/// boundaries).
struct Runner {
  std::unique_ptr<model::Model> m;
  std::unique_ptr<testing::SequenceRunner> seq;

  Runner(const std::string& path, kernels::KvDtype dtype) {
    auto r = model::Model::load(path);
    EXPECT_TRUE(r.ok()) << r.error();
    m = std::move(r.value());
    seq = std::make_unique<testing::SequenceRunner>(*m, dtype, /*block_size=*/4, /*num_blocks=*/64);
  }
  std::vector<float> feed(const std::vector<int32_t>& toks, int pos, int prompt_len) { return seq->feed(toks, pos, prompt_len); }
};

/// How closely a run must follow the reference.
struct Tolerance {
  double logprob;      // |our log-prob − reference| for each of the reference's top-5 tokens
  double argmax_gap;   // assert our argmax == reference token only where the reference's
                       // top-1 − top-2 log-prob gap exceeds this (0: at every step)
};

/// Greedy run of one reference case with teacher forcing (the reference's token is fed
/// back at every step). Returns the largest log-prob error seen; appends every step's
/// logits to `trace` when given.
double check_case(Runner& r, const testing::ReferenceCase& c, bool prefill_whole, Tolerance tol,
                  std::vector<std::vector<float>>* trace = nullptr) {
  std::vector<float> logits;
  int pos = 0;
  const int prompt_len = static_cast<int>(c.prompt_tokens.size());
  if (prefill_whole) {
    logits = r.feed(c.prompt_tokens, 0, prompt_len);
    pos = prompt_len;
  } else {
    for (int32_t t : c.prompt_tokens) logits = r.feed({t}, pos++, prompt_len);
  }
  const int n_vocab = r.m->config().n_vocab;
  std::vector<float> lp(n_vocab);
  double max_err = 0.0;
  for (size_t step = 0; step < c.top_logprobs.size(); ++step) {
    if (trace) trace->push_back(logits);
    kernels::log_softmax(logits.data(), lp.data(), n_vocab);
    const auto& ref = c.top_logprobs[step];
    for (auto [id, ref_lp] : ref) {
      max_err = std::max(max_err, static_cast<double>(std::fabs(lp[id] - ref_lp)));
      EXPECT_NEAR(lp[id], ref_lp, tol.logprob) << "prompt '" << c.prompt << "' step " << step << " token " << id;
    }
    const int32_t argmax = std::max_element(logits.begin(), logits.end()) - logits.begin();
    if (step >= c.tokens.size()) break;
    const bool decisive = ref.size() < 2 || ref[0].second - ref[1].second > tol.argmax_gap;
    if (decisive) {
      EXPECT_EQ(argmax, c.tokens[step]) << "prompt '" << c.prompt << "' step " << step;
    }
    logits = r.feed({c.tokens[step]}, pos++, prompt_len);
  }
  return max_err;
}

// f16 KV, as the reference ran: exact greedy tokens and top-5 log-probs within 1e-3 (in
// practice ~1e-6, the JSON's print precision), whether the prompt is prefilled in one
// batch or token by token — and the two modes give bit-identical logits, since prompt
// tokens take the same matmul order however they are batched (Batch::gemm_order).
TEST(ModelReference, Stories260KGreedyMatchesReference) {
  const auto cases = testing::load_reference("../shared/reference/stories260K.json");
  ASSERT_FALSE(cases.empty());
  for (const auto& c : cases) {
    std::vector<std::vector<float>> whole_trace, split_trace;
    Runner whole("../shared/models/stories260K.gguf", kernels::KvDtype::F16);
    const double e_whole = check_case(whole, c, true, {1e-3, 0.0}, &whole_trace);
    Runner split("../shared/models/stories260K.gguf", kernels::KvDtype::F16);
    const double e_split = check_case(split, c, false, {1e-3, 0.0}, &split_trace);
    ASSERT_EQ(whole_trace.size(), split_trace.size());
    for (size_t i = 0; i < whole_trace.size(); ++i)
      ASSERT_EQ(whole_trace[i], split_trace[i]) << "prompt '" << c.prompt << "' step " << i << ": whole vs token-by-token prefill";
    std::printf("[ f16 KV ] '%s': max |logprob err| whole %.3g, token-by-token %.3g\n", c.prompt.c_str(), e_whole, e_split);
  }
}

// An f32 KV cache against a reference that ran with an f16 KV cache: K and V rounded to
// f16 (relative error up to 2^-11) change every attention score and output, so the
// log-probs cannot agree to 1e-3 by construction (measured max ~0.02). We check them to a
// looser 0.05 and demand the reference's greedy token only where its top-1/top-2 gap
// exceeds 0.05 — elsewhere (e.g. 'One day, a bird' step 32, gap 0.001) the f16 rounding
// alone can flip the argmax. Teacher forcing keeps later steps comparable.
TEST(ModelReference, Stories260KF32KvCacheCloseToF16Reference) {
  const auto cases = testing::load_reference("../shared/reference/stories260K.json");
  ASSERT_FALSE(cases.empty());
  for (const auto& c : cases) {
    Runner r("../shared/models/stories260K.gguf", kernels::KvDtype::F32);
    const double e = check_case(r, c, true, {0.05, 0.05});
    std::printf("[ f32 KV ] '%s': max |logprob err| %.3g\n", c.prompt.c_str(), e);
  }
}

}  // namespace
}  // namespace pdserve
