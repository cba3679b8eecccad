// The whole model on every SIMD path (kernels/cpu_features.h force_isa): the logits of
// prompts prefilled in one batch (GEMM orders, ragged tails) and of teacher-forced decode
// steps, f16 KV cache, are bit-identical on scalar, AVX2 and AVX-512 — every weight type
// of ../shared/models (F16, BF16, Q8_0, Q4_0, Q4_K_M, Q5_K_M; llama and qwen2). Paths the
// CPU lacks are skipped (and reported).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "kernels/cpu_features.h"
#include "model/model.h"
#include "model/quantize.h"
#include "support/reference.h"
#include "support/sequence_runner.h"

namespace pdserve {
namespace {

using kernels::Isa;

constexpr int kDecodeSteps = 3;

/// Every logit of two reference prompts (the 2nd and last case) and kDecodeSteps
/// teacher-forced steps after each, on path `isa`.
std::vector<float> run_logits(model::Model& m, const std::vector<testing::ReferenceCase>& cases, Isa isa) {
  EXPECT_EQ(kernels::force_isa(isa), isa);
  std::vector<float> all;
  for (const testing::ReferenceCase* c : {&cases[1], &cases.back()}) {
    testing::SequenceRunner r(m, kernels::KvDtype::F16, 16, 64);
    const int prompt_len = static_cast<int>(c->prompt_tokens.size());
    std::vector<float> logits = r.feed(c->prompt_tokens, 0, prompt_len);
    for (int step = 0;; ++step) {
      all.insert(all.end(), logits.begin(), logits.end());
      if (step == kDecodeSteps || step >= static_cast<int>(c->tokens.size())) break;
      logits = r.feed({c->tokens[step]}, prompt_len + step, prompt_len);
    }
  }
  return all;
}

void check_paths(const std::string& model_path, const std::string& ref_path) {
  auto loaded = model::Model::load(model_path);
  ASSERT_TRUE(loaded.ok()) << loaded.error();
  const auto cases = testing::load_reference(ref_path);
  ASSERT_GE(cases.size(), 2u);
  const std::vector<float> want = run_logits(*loaded.value(), cases, Isa::kScalar);
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512Vnni}) {
    if (!kernels::isa_available(isa)) {
      std::printf("[ %s ] %s: not on this CPU\n", std::filesystem::path(model_path).filename().c_str(), kernels::isa_name(isa));
      continue;
    }
    const std::vector<float> got = run_logits(*loaded.value(), cases, isa);
    ASSERT_EQ(got.size(), want.size());
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i) bad += std::memcmp(&got[i], &want[i], sizeof(float)) != 0;
    EXPECT_EQ(bad, 0u) << model_path << ": " << kernels::isa_name(isa) << " differs from scalar in " << bad << " of " << got.size()
                       << " logits";
  }
}

class ModelIsaEquivalence : public ::testing::Test {
 protected:
  void TearDown() override {  // back to PDSERVE_ISA's cap
    const char* env = std::getenv("PDSERVE_ISA");
    const auto cap = env ? kernels::parse_isa(env) : std::nullopt;
    kernels::force_isa(cap.value_or(Isa::kAuto));
  }
};

const std::string kModels = "../shared/models/";
const std::string kRefs = "../shared/reference/";

TEST_F(ModelIsaEquivalence, Stories260K) { check_paths(kModels + "stories260K.gguf", kRefs + "stories260K.json"); }
TEST_F(ModelIsaEquivalence, LlamaF16) { check_paths(kModels + "synth-llama-small-f16.gguf", kRefs + "synth-llama-small-f16.json"); }
TEST_F(ModelIsaEquivalence, LlamaBf16) {
  const std::string out =
      (std::filesystem::temp_directory_path() / ("pdserve-test-isa-synth-llama-small-bf16-" + std::to_string(getpid()) + ".gguf")).string();
  ASSERT_TRUE(model::quantize_file(kModels + "synth-llama-small-f16.gguf", out, "BF16").ok());
  check_paths(out, kRefs + "synth-llama-small-bf16.json");
  std::filesystem::remove(out);
}
TEST_F(ModelIsaEquivalence, LlamaQ8_0) { check_paths(kModels + "synth-llama-small-q8_0.gguf", kRefs + "synth-llama-small-q8_0.json"); }
TEST_F(ModelIsaEquivalence, LlamaQ4_0) { check_paths(kModels + "synth-llama-small-q4_0.gguf", kRefs + "synth-llama-small-q4_0.json"); }
TEST_F(ModelIsaEquivalence, LlamaQ4_K_M) {
  check_paths(kModels + "synth-llama-small-q4_k_m.gguf", kRefs + "synth-llama-small-q4_k_m.json");
}
// No reference of its own: the llama prompts (same tokenizer).
TEST_F(ModelIsaEquivalence, LlamaQ5_K_M) {
  check_paths(kModels + "synth-llama-small-q5_k_m.gguf", kRefs + "synth-llama-small-q4_k_m.json");
}
TEST_F(ModelIsaEquivalence, Qwen2Q8_0) { check_paths(kModels + "synth-qwen2-small-q8_0.gguf", kRefs + "synth-qwen2-small-q8_0.json"); }

}  // namespace
}  // namespace pdserve
