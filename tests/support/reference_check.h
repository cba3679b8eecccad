// Test helper: a model against a reference engine's greedy run (support/reference.h format,
// ../shared/README.md): teacher-forced log-prob errors per step and free-running greedy
// agreement, with the near-tie rule (compare greedy tokens only up to the first step whose
// reference top-1/top-2 gap is under 0.05).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "support/reference.h"
#include "support/sequence_runner.h"
#include "support/vocab_vectors.h"

namespace pdserve::testing {

inline constexpr double kNearTieGap = 0.05;

/// One teacher-forced step: the largest |our log-prob − reference log-prob| over the
/// reference's top-5 ids, and whether our argmax is the reference's token.
struct RefStep {
  double err = 0;
  bool argmax_ok = true;
  bool near_tie = false;  // the reference's top-1/top-2 gap is under kNearTieGap
};

/// Loads `ref_path` and cuts each case at the first token whose reported bytes are not its
/// piece in `model_path`'s tokenizer: llama-server holds back a token that ends in an
/// incomplete UTF-8 sequence and reports it merged into the next one, so from there on
/// the reference's steps are not the model's.
inline std::vector<ReferenceCase> load_reference_for(const std::string& model_path, const std::string& ref_path) {
  auto cases = load_reference(ref_path);
  const auto tok = load_tokenizer(model_path);
  EXPECT_TRUE(tok);
  if (!tok) return {};
  for (auto& c : cases) {
    size_t n = 0;
    while (n < c.tokens.size() && n < c.token_bytes.size() && tok->token_to_piece(c.tokens[n]) == c.token_bytes[n]) ++n;
    if (n == c.tokens.size()) continue;
    c.tokens.resize(n);
    c.top_logprobs.resize(n);
  }
  return cases;
}

/// One sequence with an f16 KV cache, as the reference engine ran.
inline SequenceRunner reference_runner(model::Model& m) { return SequenceRunner(m, kernels::KvDtype::F16, 16, 256); }

/// Teacher-forced on the reference's tokens: one RefStep per reference step.
inline std::vector<RefStep> teacher_forced_steps(model::Model& m, const ReferenceCase& c) {
  const int n_vocab = m.config().n_vocab;
  std::vector<float> lp(n_vocab);
  std::vector<RefStep> out;
  SequenceRunner r = reference_runner(m);
  const int prompt_len = static_cast<int>(c.prompt_tokens.size());
  std::vector<float> logits = r.feed(c.prompt_tokens, 0, prompt_len);
  int pos = prompt_len;
  for (size_t step = 0; step < c.top_logprobs.size(); ++step) {
    kernels::log_softmax(logits.data(), lp.data(), n_vocab);
    const auto& ref = c.top_logprobs[step];
    RefStep s;
    for (auto [id, ref_lp] : ref) s.err = std::max(s.err, static_cast<double>(std::fabs(lp[id] - ref_lp)));
    s.near_tie = ref.size() >= 2 && ref[0].second - ref[1].second < kNearTieGap;
    if (step < c.tokens.size())
      s.argmax_ok = std::max_element(logits.begin(), logits.end()) - logits.begin() == c.tokens[step];
    out.push_back(s);
    if (step >= c.tokens.size()) break;
    logits = r.feed({c.tokens[step]}, pos++, prompt_len);
  }
  return out;
}

/// Free-running greedy decoding from the prompt for up to `n` steps: how many of its
/// tokens equal the reference's, counted up to the first that does not.
inline size_t greedy_steps_equal(model::Model& m, const ReferenceCase& c, size_t n) {
  SequenceRunner r = reference_runner(m);
  const int prompt_len = static_cast<int>(c.prompt_tokens.size());
  std::vector<float> logits = r.feed(c.prompt_tokens, 0, prompt_len);
  int pos = prompt_len;
  for (size_t step = 0; step < n && step < c.tokens.size(); ++step) {
    const int32_t t = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    if (t != c.tokens[step]) return step;
    logits = r.feed({t}, pos++, prompt_len);
  }
  return std::min(n, c.tokens.size());
}

/// Steps before the first near-tie (or the first index in `stop`, whichever is earlier).
inline size_t steps_before_near_tie(const std::vector<RefStep>& steps, size_t tokens, size_t stop = SIZE_MAX) {
  size_t n = 0;
  while (n < tokens && n < steps.size() && n < stop && !steps[n].near_tie) ++n;
  return n;
}

}  // namespace pdserve::testing
