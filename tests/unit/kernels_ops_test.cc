// kernels::swiglu on one token row, as ggml_vec_swiglu_f32: vectorised silu on 16-wide
// chunks from the row start, x/(1+expf(-x)) on the n % 16 tail.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/ops.h"

namespace pdserve {
namespace {

float scalar_swiglu(float g, float u) { return g / (1.0f + std::exp(-g)) * u; }

TEST(KernelsOps, SwigluRowMatchesSiluAndTailIsScalarExpf) {
  std::mt19937 rng(7);
  std::normal_distribution<float> d(0.f, 4.f);
  for (int n : {1, 15, 16, 17, 64, 172, 200}) {
    std::vector<float> g(n), u(n);
    for (int i = 0; i < n; ++i) g[i] = d(rng), u[i] = d(rng);
    std::vector<float> y = g;
    kernels::swiglu(y.data(), u.data(), n);
    for (int i = 0; i < n; ++i) {
      const double exact = static_cast<double>(g[i]) / (1.0 + std::exp(-static_cast<double>(g[i]))) * u[i];
      EXPECT_NEAR(y[i], exact, 1e-6 * std::fabs(exact) + 1e-30) << "n " << n << " i " << i;
      // The row's last n % 16 values go through expf exactly (ggml_silu_f32).
      if (i >= n / 16 * 16) {
        EXPECT_EQ(y[i], scalar_swiglu(g[i], u[i])) << "n " << n << " i " << i;
      }
    }
  }
}

TEST(KernelsOps, SwigluPerRowIsIndependentOfNeighbours) {
  // Rows of 172 (stories260K n_ff): each row's result depends only on that row.
  std::mt19937 rng(8);
  std::normal_distribution<float> d(0.f, 3.f);
  const int n_ff = 172, n_tok = 5;
  std::vector<float> g(n_ff * n_tok), u(g.size());
  for (size_t i = 0; i < g.size(); ++i) g[i] = d(rng), u[i] = d(rng);
  std::vector<float> batch = g;
  for (int t = 0; t < n_tok; ++t) kernels::swiglu(&batch[t * n_ff], &u[t * n_ff], n_ff);
  for (int t = 0; t < n_tok; ++t) {
    std::vector<float> row(g.begin() + t * n_ff, g.begin() + (t + 1) * n_ff);
    kernels::swiglu(row.data(), &u[t * n_ff], n_ff);
    for (int i = 0; i < n_ff; ++i) EXPECT_EQ(row[i], batch[t * n_ff + i]);
  }
}

}  // namespace
}  // namespace pdserve
