// kernels::matmul_multi (Q/K/V and gate/up in one pass over shared activations): every
// output value is bit-identical to the same weight's own matmul(), for mixed weight types
// (shared and separate activation formats, repacked and vec_dot orders), prompt and decode
// tokens mixed in one batch, and the fallback (float weights, unequal column counts).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/matmul.h"
#include "gguf/ggml_types.h"
#include "kernels/quants.h"

namespace pdserve {
namespace {

using gguf::GgmlType;

// A random rows × cols weight matrix stored in `type` (kernels::quantize of uniform values).
struct Weight {
  std::vector<uint8_t> bytes;
  kernels::WeightView view;

  Weight(GgmlType type, int64_t rows, int64_t cols, std::mt19937& rng) {
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    std::vector<float> f(static_cast<size_t>(rows * cols));
    for (float& v : f) v = u(rng);
    const int64_t rb = gguf::row_bytes(type, cols);
    bytes.resize(static_cast<size_t>(rows * rb));
    for (int64_t r = 0; r < rows; ++r) kernels::quantize(type, f.data() + r * cols, bytes.data() + r * rb, cols);
    view.type = type;
    view.rows = rows;
    view.cols = cols;
    view.row_bytes = rb;
    view.data = bytes.data();
  }
};

// Runs the weights through matmul_multi and through one matmul() each; expects the same bits.
void expect_same_as_separate(const std::vector<const Weight*>& ws, int n_tokens, int64_t cols, int prompt_len, std::mt19937& rng,
                             const std::string& what) {
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> x(static_cast<size_t>(n_tokens * cols));
  for (float& v : x) v = g(rng);
  std::vector<uint8_t> order(n_tokens);
  for (int t = 0; t < n_tokens; ++t) order[t] = kernels::gemm_order_flag(t, prompt_len);
  std::vector<std::vector<float>> fused(ws.size()), alone(ws.size());
  std::vector<kernels::MatmulJob> jobs;
  for (size_t j = 0; j < ws.size(); ++j) {
    fused[j].assign(static_cast<size_t>(n_tokens * ws[j]->view.rows), -1.f);
    alone[j].assign(fused[j].size(), -2.f);
    jobs.push_back({&ws[j]->view, fused[j].data()});
  }
  kernels::matmul_multi(jobs.data(), static_cast<int>(jobs.size()), x.data(), n_tokens, order.data());
  for (size_t j = 0; j < ws.size(); ++j) {
    kernels::matmul(ws[j]->view, x.data(), n_tokens, alone[j].data(), order.data());
    EXPECT_EQ(0, std::memcmp(fused[j].data(), alone[j].data(), fused[j].size() * sizeof(float)))
        << what << ": weight " << j << " (" << ws[j]->view.rows << " rows), " << n_tokens << " tokens";
  }
}

TEST(KernelsMatmulMulti, EachOutputEqualsItsOwnMatmul) {
  std::mt19937 rng(7);
  const int64_t cols = 512;
  // Q4_K_M-like Q/K/V: Q4_K (repacked, rows % 8 == 0), Q4_K with rows % 8 != 0 (vec_dot),
  // Q6_K (vec_dot); they share the Q8_K activations.
  const Weight q(GgmlType::Q4_K, 96, cols, rng), k(GgmlType::Q4_K, 36, cols, rng), v(GgmlType::Q6_K, 32, cols, rng);
  // Legacy types share Q8_0 activations; mixed with a K-quant, two formats are quantised.
  const Weight a(GgmlType::Q4_0, 64, cols, rng), b(GgmlType::Q8_0, 48, cols, rng), c(GgmlType::Q5_K, 24, cols, rng);
  for (int n_tokens : {1, 3, 9, 21}) {
    const int prompt_len = n_tokens > 4 ? n_tokens - 2 : 0;  // prompt (GEMM and ragged-tail flags) + decode tokens
    expect_same_as_separate({&q, &k, &v}, n_tokens, cols, prompt_len, rng, "Q4_K/Q4_K/Q6_K");
    expect_same_as_separate({&a, &b, &c, &q}, n_tokens, cols, prompt_len, rng, "Q4_0/Q8_0/Q5_K/Q4_K");
    expect_same_as_separate({&v}, n_tokens, cols, prompt_len, rng, "one weight");
  }
}

TEST(KernelsMatmulMulti, FallsBackForFloatWeightsAndUnequalColumns) {
  std::mt19937 rng(11);
  const Weight q(GgmlType::Q4_K, 64, 512, rng), f(GgmlType::F16, 40, 512, rng);
  expect_same_as_separate({&q, &f}, 5, 512, 3, rng, "Q4_K + F16");
  const Weight narrow(GgmlType::Q8_0, 32, 256, rng), narrow2(GgmlType::Q4_0, 16, 256, rng);
  expect_same_as_separate({&narrow, &narrow2}, 4, 256, 0, rng, "Q8_0 + Q4_0, 256 columns");
}

}  // namespace
}  // namespace pdserve
