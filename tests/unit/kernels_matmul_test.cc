// kernels::matmul: batch invariance with per-token reduction orders (gemm_order), and
// accuracy of both orders (F32, and F16 / BF16 on activations rounded to their type) (ggml_vec_dot_f32 decode order, tinyBLAS prompt order)
// against a double-precision reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "base/fp16.h"
#include "kernels/matmul.h"

namespace pdserve {
namespace {

using gguf::GgmlType;

// A random weight matrix in `type`, plus its exact float values (after rounding to type).
struct TestWeights {
  std::vector<float> f32;       // storage for F32
  std::vector<uint16_t> half;   // storage for F16 / BF16
  std::vector<float> values;    // the represented values, for the reference
  kernels::WeightView view;

  TestWeights(GgmlType type, int64_t rows, int64_t cols, std::mt19937& rng) {
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    values.resize(rows * cols);
    for (float& v : values) v = u(rng);
    view.type = type;
    view.rows = rows;
    view.cols = cols;
    if (type == GgmlType::F32) {
      f32 = values;
      view.data = f32.data();
      view.row_bytes = cols * sizeof(float);
    } else {
      half.resize(values.size());
      for (size_t i = 0; i < values.size(); ++i) {
        half[i] = type == GgmlType::F16 ? fp32_to_fp16(values[i]) : fp32_to_bf16(values[i]);
        values[i] = type == GgmlType::F16 ? fp16_to_fp32(half[i]) : bf16_to_fp32(half[i]);
      }
      view.data = half.data();
      view.row_bytes = cols * sizeof(uint16_t);
    }
  }
};

std::vector<float> random_activations(int n_tokens, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> x(n_tokens * cols);
  for (float& v : x) v = g(rng);
  return x;
}

struct Shape {
  int64_t rows, cols;
};
// cols: multiples of 64 and of 16 only (tinyBLAS applies), 172 (stories260K ffn_down,
// k % 16 != 0: decode order for every token), and odd sizes with 16/8/scalar tails.
// rows 37 / 70 are not multiples of matmul's 16-row tile.
const Shape kShapes[] = {{37, 64}, {70, 48}, {37, 172}, {16, 256}, {33, 200}, {21, 1000}, {9, 7}};
const GgmlType kTypes[] = {GgmlType::F32, GgmlType::F16, GgmlType::BF16};
const char* wtype_name(GgmlType t) { return t == GgmlType::F32 ? "F32" : t == GgmlType::F16 ? "F16" : "BF16"; }

// One token alone (with its own flag) gives bit-identical outputs to the same token in a
// batch of 8 with mixed flags, and in a batch of 3 at a different index.
TEST(KernelsMatmul, TokenAloneEqualsTokenInMixedBatch) {
  std::mt19937 rng(1234);
  const uint8_t flags[8] = {1, 0, 1, 1, 0, 0, 1, 0};
  for (GgmlType type : kTypes) {
    for (const Shape& sh : kShapes) {
      SCOPED_TRACE(std::string(wtype_name(type)) + " rows " + std::to_string(sh.rows) + " cols " + std::to_string(sh.cols));
      TestWeights w(type, sh.rows, sh.cols, rng);
      const int n = 8;
      const std::vector<float> x = random_activations(n, sh.cols, rng);
      std::vector<float> y(n * sh.rows);
      kernels::matmul(w.view, x.data(), n, y.data(), flags);

      std::vector<float> y1(sh.rows);
      for (int t = 0; t < n; ++t) {
        kernels::matmul(w.view, x.data() + t * sh.cols, 1, y1.data(), &flags[t]);
        for (int64_t r = 0; r < sh.rows; ++r) EXPECT_EQ(y1[r], y[t * sh.rows + r]) << "token " << t << " row " << r;
      }
      // Token 3 (flag 1) and token 4 (flag 0) inside a batch of 3: [other, 3, 4].
      std::vector<float> x3(3 * sh.cols), y3(3 * sh.rows);
      const std::vector<float> other = random_activations(1, sh.cols, rng);
      std::copy(other.begin(), other.end(), x3.begin());
      std::copy_n(x.data() + 3 * sh.cols, 2 * sh.cols, x3.begin() + sh.cols);
      const uint8_t f3[3] = {0, flags[3], flags[4]};
      kernels::matmul(w.view, x3.data(), 3, y3.data(), f3);
      for (int k = 1; k < 3; ++k)
        for (int64_t r = 0; r < sh.rows; ++r) EXPECT_EQ(y3[k * sh.rows + r], y[(2 + k) * sh.rows + r]) << "token " << 2 + k << " row " << r;

      // nullptr means every token in decode order.
      std::vector<float> y0(n * sh.rows), yz(n * sh.rows);
      const uint8_t zeros[8] = {};
      kernels::matmul(w.view, x.data(), n, y0.data(), nullptr);
      kernels::matmul(w.view, x.data(), n, yz.data(), zeros);
      EXPECT_EQ(y0, yz);

      // The flag changes the order only where llama.cpp has a tinyBLAS kernel: F32 / F16
      // weights with cols % 16 == 0, BF16 with cols % 32 == 0.
      std::vector<float> yg(n * sh.rows);
      const uint8_t ones[8] = {1, 1, 1, 1, 1, 1, 1, 1};
      kernels::matmul(w.view, x.data(), n, yg.data(), ones);
      if (sh.cols % (type == GgmlType::BF16 ? 32 : 16) != 0) {
        EXPECT_EQ(y0, yg);
      } else if (sh.cols > 16) {
        int differ = 0;
        for (size_t i = 0; i < y0.size(); ++i) differ += y0[i] != yg[i];
        EXPECT_GT(differ, 0) << "tinyBLAS and ggml_vec_dot_f32 orders should differ somewhere on random data";
      }
    }
  }
}

// Both f32 orders (and the F16/BF16 paths) against the exact dot product of the stored
// values computed in double. Any summation order of k terms, each product exact or
// rounded once, is within γ_k·Σ|w·x| of the exact sum (γ_k = k·u/(1−k·u), u = 2⁻²⁴;
// Higham, Accuracy and Stability of Numerical Algorithms, §3.1). We assert that bound
// with k = cols + 1 (the +1 covers the rounded product), and report the worst observed
// relative error |y − exact| / Σ|w·x|, which is far smaller in practice.
TEST(KernelsMatmul, BothF32OrdersMatchDoubleReference) {
  std::mt19937 rng(99);
  const double u = std::ldexp(1.0, -24);
  for (GgmlType type : kTypes) {
    for (const Shape& sh : kShapes) {
      SCOPED_TRACE(std::string(wtype_name(type)) + " rows " + std::to_string(sh.rows) + " cols " + std::to_string(sh.cols));
      TestWeights w(type, sh.rows, sh.cols, rng);
      const int n = 4;
      const std::vector<float> x = random_activations(n, sh.cols, rng);
      const double k = static_cast<double>(sh.cols + 1);
      const double gamma = k * u / (1.0 - k * u);
      for (uint8_t flag : {uint8_t{0}, uint8_t{1}}) {
        const std::vector<uint8_t> flags(n, flag);
        std::vector<float> y(n * sh.rows);
        kernels::matmul(w.view, x.data(), n, y.data(), flags.data());
        double worst = 0.0;
        for (int t = 0; t < n; ++t)
          for (int64_t r = 0; r < sh.rows; ++r) {
            double exact = 0.0, mag = 0.0;
            for (int64_t i = 0; i < sh.cols; ++i) {
              // F16 / BF16 weights take activations rounded to their type (ggml's vec_dot_type).
              const float xi = x[t * sh.cols + i];
              const float xv = type == GgmlType::F16 ? fp16_to_fp32(fp32_to_fp16(xi)) : type == GgmlType::BF16 ? bf16_to_fp32(fp32_to_bf16(xi)) : xi;
              const double p = static_cast<double>(w.values[r * sh.cols + i]) * xv;
              exact += p;
              mag += std::fabs(p);
            }
            const double err = std::fabs(y[t * sh.rows + r] - exact);
            EXPECT_LE(err, gamma * mag) << "token " << t << " row " << r << " flag " << int(flag);
            worst = std::max(worst, err / mag);
          }
        std::printf("[ %-4s %4lldx%-4lld flag %d ] max |y - exact| / sum|w*x| = %.3g (bound %.3g)\n", wtype_name(type),
                    static_cast<long long>(sh.rows), static_cast<long long>(sh.cols), flag, worst, gamma);
      }
    }
  }
}

}  // namespace
}  // namespace pdserve
