// Quantised and half-precision models against the reference engine (llama.cpp) on the
// synth-* files in ../shared: teacher-forced on the reference tokens, our log-probs of the
// reference's top-5 ids agree within 0.02 (F16, BF16, Q8_0) or 0.08 (Q4_0, Q4_K_M, Q5_K_M) at
// every step, our argmax equals the reference's wherever its top-1/top-2 gap exceeds 0.05,
// and free-running greedy decoding reproduces the reference's tokens up to the first step
// whose gap is under 0.05. The BF16 model is made from the F16 file by our converter
// (model::quantize_file, each weight widened to f32 and rounded to bf16, RNE), as the
// reference's was. qwen2 runs on the reference's prompt_tokens (BPE tokenizer not needed).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <unistd.h>

#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "model/quantize.h"
#include "support/reference.h"
#include "support/sequence_runner.h"
#include "support/vocab_vectors.h"

namespace pdserve {
namespace {

/// One sequence over `m` with an f16 cache, as the reference ran.
testing::SequenceRunner make_runner(model::Model& m) { return testing::SequenceRunner(m, kernels::KvDtype::F16, 16, 128); }

int32_t argmax(const std::vector<float>& v) { return std::max_element(v.begin(), v.end()) - v.begin(); }

void check_model(const std::string& model_path, const std::string& ref_path, double tol) {
  auto loaded = model::Model::load(model_path);
  ASSERT_TRUE(loaded.ok()) << loaded.error();
  model::Model& m = *loaded.value();
  auto cases = testing::load_reference(ref_path);
  ASSERT_FALSE(cases.empty());
  // llama-server holds back a token whose bytes end in an incomplete UTF-8 sequence (an
  // SPM byte token such as <0xDA>) and reports it merged with the next one under the next
  // one's id: from such a step on, the reference's steps are not the model's steps, so a
  // case is compared up to the first token whose reported bytes are not its piece.
  const auto tok = testing::load_tokenizer(model_path);
  ASSERT_TRUE(tok);
  for (auto& c : cases) {
    size_t n = 0;
    while (n < c.tokens.size() && n < c.token_bytes.size() && tok->token_to_piece(c.tokens[n]) == c.token_bytes[n]) ++n;
    if (n == c.tokens.size()) continue;
    std::printf("[ %s ] '%s': reference step %zu merges tokens, compared up to it\n",
                std::filesystem::path(model_path).filename().c_str(), c.prompt.c_str(), n);
    c.tokens.resize(n);
    c.top_logprobs.resize(n);
  }
  const int n_vocab = m.config().n_vocab;
  std::vector<float> lp(n_vocab);
  for (const auto& c : cases) {
    const int prompt_len = static_cast<int>(c.prompt_tokens.size());
    // Teacher forcing.
    double max_err = 0.0;
    {
      testing::SequenceRunner r = make_runner(m);
      std::vector<float> logits = r.feed(c.prompt_tokens, 0, prompt_len);
      int pos = prompt_len;
      for (size_t step = 0; step < c.top_logprobs.size(); ++step) {
        kernels::log_softmax(logits.data(), lp.data(), n_vocab);
        const auto& ref = c.top_logprobs[step];
        for (auto [id, ref_lp] : ref) {
          max_err = std::max(max_err, static_cast<double>(std::fabs(lp[id] - ref_lp)));
          EXPECT_NEAR(lp[id], ref_lp, tol) << model_path << " prompt '" << c.prompt << "' step " << step << " token " << id;
        }
        if (std::getenv("PDS_TRACE")) {
          double e = 0;
          for (auto [id, ref_lp] : ref) e = std::max(e, double(std::fabs(lp[id] - ref_lp)));
          std::printf("step %zu err %.5f\n", step, e);
        }
        if (step >= c.tokens.size()) break;
        if (ref.size() < 2 || ref[0].second - ref[1].second > 0.05) {
          EXPECT_EQ(argmax(logits), c.tokens[step]) << model_path << " prompt '" << c.prompt << "' step " << step;
        }
        logits = r.feed({c.tokens[step]}, pos++, prompt_len);
      }
    }
    // Free-running greedy up to the first near-tie of the reference.
    size_t n_check = 0;
    while (n_check < c.tokens.size() && n_check < c.top_logprobs.size()) {
      const auto& ref = c.top_logprobs[n_check];
      if (ref.size() >= 2 && ref[0].second - ref[1].second < 0.05) break;
      ++n_check;
    }
    {
      testing::SequenceRunner r = make_runner(m);
      std::vector<float> logits = r.feed(c.prompt_tokens, 0, prompt_len);
      int pos = prompt_len;
      for (size_t step = 0; step < n_check; ++step) {
        const int32_t tok = argmax(logits);
        ASSERT_EQ(tok, c.tokens[step]) << model_path << " free-running, prompt '" << c.prompt << "' step " << step;
        logits = r.feed({tok}, pos++, prompt_len);
      }
    }
    std::printf("[ %s ] '%s': max |logprob err| %.4f, greedy equal for %zu/%zu steps\n",
                std::filesystem::path(model_path).filename().c_str(), c.prompt.c_str(), max_err, n_check, c.tokens.size());
  }
}

TEST(ModelQuantReference, LlamaF16) {
  check_model("../shared/models/synth-llama-small-f16.gguf", "../shared/reference/synth-llama-small-f16.json", 0.02);
}

TEST(ModelQuantReference, LlamaBf16FromOurConverter) {
  // Per process: ctest also runs this binary whole with PDSERVE_ISA set, concurrently.
  const std::string out =
      (std::filesystem::temp_directory_path() / ("pdserve-test-synth-llama-small-bf16-" + std::to_string(getpid()) + ".gguf")).string();
  ASSERT_TRUE(model::quantize_file("../shared/models/synth-llama-small-f16.gguf", out, "BF16").ok());
  check_model(out, "../shared/reference/synth-llama-small-bf16.json", 0.02);
  std::filesystem::remove(out);
}

TEST(ModelQuantReference, LlamaQ8_0) {
  check_model("../shared/models/synth-llama-small-q8_0.gguf", "../shared/reference/synth-llama-small-q8_0.json", 0.02);
}

// Q4_0: llama.cpp's x86 CPU backend repacks Q4_0 (q4_0_8x8); kernels/quants.h QOrder
// mirrors its GEMV/GEMM order, and our logits match the reference to its print precision.
TEST(ModelQuantReference, LlamaQ4_0) {
  check_model("../shared/models/synth-llama-small-q4_0.gguf", "../shared/reference/synth-llama-small-q4_0.json", 0.08);
}

// Q4_K_M (Q4_K repacked as q4_K_8x8 where rows % 8 == 0, plus Q6_K in ggml's vec_dot
// order with the −32 offset taken from the 16-value sums): matches to print precision.
TEST(ModelQuantReference, LlamaQ4_K_M) {
  check_model("../shared/models/synth-llama-small-q4_k_m.gguf", "../shared/reference/synth-llama-small-q4_k_m.json", 0.08);
}

// Q5_K_M (Q5_K plus Q6_K; reference: llama.cpp build 11669): prompts of >= 8 tokens go
// through that build's tiled K-quant matmul (kernels/quants.h QOrder::kTiled), shorter
// ones and decode steps through ggml's vec_dot order; matches to print precision.
TEST(ModelQuantReference, LlamaQ5_K_M) {
  check_model("../shared/models/synth-llama-small-q5_k_m.gguf", "../shared/reference/synth-llama-small-q5_k_m.json", 0.08);
}

// References from the haswell (AVX2) backend — the only one this machine runs; the others
// above came from AVX-512 builds. Its f16 attention and other float kernels sum in other
// orders than the AVX-512 ones our engine reproduces, and in these random-weight models a
// last-bit difference can flip a Q8_K activation rounding and move a log-prob by 0.1-0.5 at
// some steps (and, through the KV cache, at the steps after). Measured: the Q5_K_M file,
// which matches its AVX-512 reference at every step to 1e-5, agrees with a haswell
// reference within 0.08 at 85 % of the steps. So these cases check, per file: the prompt's
// logits (step 0, teacher-forced: the tiled order for prompts of >= 8 tokens, vec_dot for
// shorter ones — a wrong order shows here, e.g. vec_dot instead of tiled for Q3_K or IQ4_XS
// fails 2 of the 6) within 0.08 for at least 5 of the 6 prompts; at least 60 % of all
// teacher-forced steps within 0.08; and free-running greedy decoding equal to the
// reference's tokens up to the first near-tie or the first step teacher forcing missed.
void check_model_haswell(const std::string& model_path, const std::string& ref_path) {
  auto loaded = model::Model::load(model_path);
  ASSERT_TRUE(loaded.ok()) << loaded.error();
  model::Model& m = *loaded.value();
  auto cases = testing::load_reference(ref_path);
  ASSERT_EQ(cases.size(), 6u);
  const auto tok = testing::load_tokenizer(model_path);
  ASSERT_TRUE(tok);
  for (auto& c : cases) {  // steps after a merged byte token are not the model's (see check_model)
    size_t n = 0;
    while (n < c.tokens.size() && n < c.token_bytes.size() && tok->token_to_piece(c.tokens[n]) == c.token_bytes[n]) ++n;
    if (n == c.tokens.size()) continue;
    c.tokens.resize(n);
    c.top_logprobs.resize(n);
  }
  const int n_vocab = m.config().n_vocab;
  std::vector<float> lp(n_vocab);
  int prompts_ok = 0, steps = 0, steps_ok = 0;
  for (const auto& c : cases) {
    const int prompt_len = static_cast<int>(c.prompt_tokens.size());
    size_t first_miss = c.top_logprobs.size();
    {
      testing::SequenceRunner r = make_runner(m);
      std::vector<float> logits = r.feed(c.prompt_tokens, 0, prompt_len);
      int pos = prompt_len;
      for (size_t step = 0; step < c.top_logprobs.size(); ++step) {
        kernels::log_softmax(logits.data(), lp.data(), n_vocab);
        double err = 0;
        for (auto [id, ref_lp] : c.top_logprobs[step]) err = std::max(err, static_cast<double>(std::fabs(lp[id] - ref_lp)));
        ++steps;
        steps_ok += err <= 0.08;
        if (err > 0.08 && first_miss == c.top_logprobs.size()) first_miss = step;
        if (step == 0) prompts_ok += err <= 0.08;
        if (step >= c.tokens.size()) break;
        logits = r.feed({c.tokens[step]}, pos++, prompt_len);
      }
    }
    size_t n_check = 0;
    while (n_check < c.tokens.size() && n_check < first_miss) {
      const auto& ref = c.top_logprobs[n_check];
      if (ref.size() >= 2 && ref[0].second - ref[1].second < 0.05) break;
      ++n_check;
    }
    testing::SequenceRunner r = make_runner(m);
    std::vector<float> logits = r.feed(c.prompt_tokens, 0, prompt_len);
    int pos = prompt_len;
    for (size_t step = 0; step < n_check; ++step) {
      const int32_t t = argmax(logits);
      ASSERT_EQ(t, c.tokens[step]) << model_path << " free-running, prompt '" << c.prompt << "' step " << step;
      logits = r.feed({t}, pos++, prompt_len);
    }
    std::printf("[ %s ] '%s': teacher-forced within 0.08 up to step %zu of %zu, greedy equal for %zu steps\n",
                std::filesystem::path(model_path).filename().c_str(), c.prompt.c_str(), first_miss, c.top_logprobs.size(), n_check);
  }
  std::printf("[ %s ] prompts within 0.08: %d/6, steps within 0.08: %d/%d\n", std::filesystem::path(model_path).filename().c_str(),
              prompts_ok, steps_ok, steps);
  EXPECT_GE(prompts_ok, 5) << model_path;
  EXPECT_GE(steps_ok, 0.6 * steps) << model_path;
}

// The files are made by our quantizer, byte-identical to llama-quantize's (model_quantize_test).
void check_quantized(const std::string& type, const std::string& ref) {
  const std::string out = (std::filesystem::temp_directory_path() /
                           ("pdserve-test-ref-" + type + "-" + std::to_string(getpid()) + ".gguf")).string();
  ASSERT_TRUE(model::quantize_file("../shared/models/synth-llama-small-f16.gguf", out, type).ok());
  check_model_haswell(out, ref);
  std::filesystem::remove(out);
}
// The control: Q5_K_M, exact against its AVX-512 reference (LlamaQ5_K_M above).
TEST(ModelQuantReference, LlamaQ5_K_MHaswell) {
  check_model_haswell("../shared/models/synth-llama-small-q5_k_m.gguf", "tests/data/synth-llama-small-q5_k_m.json");
}
// Q3_K_M: Q3_K, Q4_K, Q5_K, Q6_K; Q2_K: Q2_K, Q3_K, Q4_K, Q6_K; Q3_K_S: Q3_K, Q6_K;
// IQ4_XS: with Q5_K attn_v and a Q6_K output. (IQ4_NL is not matched yet: against
// tests/data/synth-llama-small-iq4_nl.json its prompts of >= 8 tokens miss at step 0 — the
// reference's repacked iq4_nl_8x8 GEMM order is not the Q4_0 one assumed here — and only
// 55 % of the steps agree within 0.08.)
TEST(ModelQuantReference, LlamaQ3_K_M) { check_quantized("Q3_K_M", "tests/data/synth-llama-small-q3_k_m.json"); }
TEST(ModelQuantReference, LlamaQ2_K) { check_quantized("Q2_K", "tests/data/synth-llama-small-q2_k.json"); }
TEST(ModelQuantReference, LlamaQ3_K_S) { check_quantized("Q3_K_S", "tests/data/synth-llama-small-q3_k_s.json"); }
TEST(ModelQuantReference, LlamaIQ4_XS) { check_quantized("IQ4_XS", "tests/data/synth-llama-small-iq4_xs.json"); }

TEST(ModelQuantReference, Qwen2Q8_0) {
  check_model("../shared/models/synth-qwen2-small-q8_0.gguf", "../shared/reference/synth-qwen2-small-q8_0.json", 0.02);
}

}  // namespace
}  // namespace pdserve
