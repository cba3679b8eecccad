// model::Model's workspace: reserve() sizes it once and forward() reuses it (nothing is
// reallocated while batches fit); a batch larger than the reservation grows it; outputs
// are bit-identical whatever the workspace held before and however large it is.
// Model::load rejects a head dimension the kernels' stack buffers cannot hold.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "model/model.h"
#include "model/synth.h"
#include "support/sequence_runner.h"

namespace pdserve {
namespace {

const char* kModel = "../shared/models/stories260K.gguf";

/// The last-token logits of `toks` fed as a prompt at position 0 (overwriting whatever
/// the runner's sequence held).
std::vector<float> prompt_logits(testing::SequenceRunner& r, const std::vector<int32_t>& toks) {
  return r.feed(toks, 0, static_cast<int>(toks.size()));
}

std::vector<int32_t> tokens(int n) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(1 + (i * 37) % 500);
  return t;
}

TEST(ModelWorkspace, ReservedOnceReusedEveryStepGrownWhenABatchIsLarger) {
  auto loaded = model::Model::load(kModel);
  ASSERT_TRUE(loaded.ok()) << loaded.error();
  model::Model& m = *loaded.value();
  m.reserve(8, 2);
  EXPECT_EQ(m.reserved_tokens(), 8);
  EXPECT_EQ(m.reserved_logits_rows(), 2);
  testing::SequenceRunner r(m, kernels::KvDtype::F16, 16, 8);
  const std::vector<float> small = prompt_logits(r, tokens(5));
  prompt_logits(r, tokens(8));
  EXPECT_EQ(m.reserved_tokens(), 8) << "a batch within the reservation reuses the workspace";
  const std::vector<float> large = prompt_logits(r, tokens(20));  // above the reservation: grows
  EXPECT_EQ(m.reserved_tokens(), 20);
  EXPECT_EQ(m.reserved_logits_rows(), 2);
  // After the large batch the workspace holds its values; a small batch is unchanged.
  EXPECT_EQ(prompt_logits(r, tokens(5)), small);

  // A model reserved large from the start gives the same bits.
  auto other = model::Model::load(kModel);
  ASSERT_TRUE(other.ok()) << other.error();
  other.value()->reserve(64, 4);
  testing::SequenceRunner r2(*other.value(), kernels::KvDtype::F16, 16, 8);
  EXPECT_EQ(prompt_logits(r2, tokens(20)), large);
  EXPECT_EQ(prompt_logits(r2, tokens(5)), small);
}

TEST(ModelWorkspace, LoadRejectsAHeadDimensionAboveTheKernelsLimit) {
  model::ShapeSpec s;
  s.name = "wide-head";
  s.n_embd = 2 * kernels::kMaxHeadDim;
  s.n_layer = 1;
  s.n_head = 1;  // head_dim = n_embd
  s.n_head_kv = 1;
  s.n_ff = 64;
  s.n_vocab = 32;
  const std::string path = "/tmp/pdserve_workspace_test_" + std::to_string(getpid()) + ".gguf";
  auto w = model::synth_model(s, {}, path);
  ASSERT_TRUE(w.ok()) << w.error();
  auto m = model::Model::load(path);
  std::remove(path.c_str());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().find("head dimension 1024"), std::string::npos) << m.error();
}

}  // namespace
}  // namespace pdserve
