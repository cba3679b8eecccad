// The mixture-of-experts FFN (model/moe.h): llama.cpp's routing (softmax over the experts,
// top-k, weights renormalised over the chosen) and the grouped-by-expert batch, which must
// give each token exactly the bits of its own experts run on its row alone.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "model/moe.h"
#include "model/synth.h"

namespace pdserve {
namespace {

TEST(MoeRoute, SoftmaxTopKRenormalised) {
  // Experts 1 and 3 tie for the top: the lower id comes first; then expert 2.
  std::vector<float> logits = {0.5f, 2.0f, 1.0f, 2.0f, -1.0f};
  int32_t sel[3];
  float w[3];
  model::moe_route(logits.data(), 5, 3, sel, w);
  EXPECT_EQ(sel[0], 1);
  EXPECT_EQ(sel[1], 3);
  EXPECT_EQ(sel[2], 2);
  double z = 0;
  for (float l : {0.5, 2.0, 1.0, 2.0, -1.0}) z += std::exp(l - 2.0);
  EXPECT_NEAR(logits[0], std::exp(0.5 - 2.0) / z, 1e-7);  // the probabilities, in place
  const double p1 = 1 / z, p2 = std::exp(-1.0) / z, sum = 2 * p1 + p2;
  EXPECT_NEAR(w[0], p1 / sum, 1e-7);  // renormalised over the three chosen
  EXPECT_NEAR(w[1], p1 / sum, 1e-7);
  EXPECT_NEAR(w[2], p2 / sum, 1e-7);
  EXPECT_NEAR(w[0] + w[1] + w[2], 1.0, 1e-6);
  // k = n_expert: every expert, weights = the softmax itself.
  std::vector<float> l2 = {0.f, 1.f};
  int32_t s2[2];
  float w2[2];
  model::moe_route(l2.data(), 2, 2, s2, w2);
  EXPECT_EQ(s2[0], 1);
  EXPECT_NEAR(w2[0], 1 / (1 + std::exp(-1.0)), 1e-7);
}

/// A one-block qwen3moe model of a small width, in `type`.
std::string tiny_moe(const std::string& type) {
  model::ShapeSpec s = model::builtin_shape("qwen3-30b-a3b").value();
  s.n_embd = 256; s.n_layer = 1; s.n_head = 4; s.n_head_kv = 2; s.head_dim = 64; s.n_ff = 512; s.n_ff_exp = 256;
  s.n_expert = 4; s.n_expert_used = 2; s.n_vocab = 64;
  const std::string path =
      (std::filesystem::temp_directory_path() / ("pdserve-test-moe-" + type + "-" + std::to_string(getpid()) + ".gguf")).string();
  model::SynthOptions opt;
  opt.type = type;
  EXPECT_TRUE(model::synth_model(s, opt, path).ok());
  return path;
}

/// Token t's FFN output computed alone, expert by expert, from the formula (no grouping).
std::vector<float> one_token(const model::ModelConfig& c, const model::LayerWeights& L, const float* xn) {
  const int E = c.n_embd, Fe = c.n_ff_exp, k = c.n_expert_used;
  std::vector<float> logits(c.n_expert), w(k), gate(Fe), up(Fe), y(E), out(E);
  std::vector<int32_t> sel(k);
  kernels::matmul(L.ffn_gate_inp, xn, 1, logits.data(), nullptr);
  model::moe_route(logits.data(), c.n_expert, k, sel.data(), w.data());
  for (int j = 0; j < k; ++j) {
    kernels::matmul(model::expert_slice(L.w_gate_exps, sel[j], Fe), xn, 1, gate.data(), nullptr);
    kernels::matmul(model::expert_slice(L.w_up_exps, sel[j], Fe), xn, 1, up.data(), nullptr);
    kernels::swiglu(gate.data(), up.data(), Fe);
    kernels::matmul(model::expert_slice(L.w_down_exps, sel[j], E), gate.data(), 1, y.data(), nullptr);
    for (int i = 0; i < E; ++i) {
      const float p = y[i] * w[j];
      out[i] = j == 0 ? p : out[i] + p;
    }
  }
  return out;
}

// Grouped by expert (one matmul per expert over its tokens) = each token alone, bit for
// bit, on every weight type; the batch routes to every expert and several tokens share one.
TEST(MoeFfn, GroupedBatchEqualsEachTokenAlone) {
  for (const char* type : {"F16", "Q8_0", "Q4_K_M", "Q4_0"}) {
    SCOPED_TRACE(type);
    const std::string path = tiny_moe(type);
    auto m = model::Model::load(path);
    ASSERT_TRUE(m.ok()) << m.error();
    const model::ModelConfig& c = m.value()->config();
    auto w = model::Weights::bind(m.value()->file(), c);
    ASSERT_TRUE(w.ok()) << w.error();
    const model::LayerWeights& L = w.value().layers[0];
    const int n = 24, E = c.n_embd;
    std::mt19937 rng(3);
    std::normal_distribution<float> d(0.f, 1.f);
    std::vector<float> xn(size_t(n) * E), out(size_t(n) * E);
    for (float& v : xn) v = d(rng);
    model::Workspace ws;
    ws.fit(c, n, 1);
    model::moe_ffn(c, L, xn.data(), n, ws, out.data());
    std::set<int> used;
    for (int i = 0; i < n * c.n_expert_used; ++i) used.insert(ws.moe_sel[i]);
    EXPECT_EQ(used.size(), static_cast<size_t>(c.n_expert));
    for (int t = 0; t < n; ++t) {
      const std::vector<float> alone = one_token(c, L, &xn[size_t(t) * E]);
      EXPECT_EQ(std::vector<float>(out.begin() + size_t(t) * E, out.begin() + size_t(t + 1) * E), alone) << "token " << t;
    }
    std::filesystem::remove(path);
  }
}

}  // namespace
}  // namespace pdserve
