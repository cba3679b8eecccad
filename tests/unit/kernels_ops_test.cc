// kernels::swiglu on one token row, as ggml_vec_swiglu_f32: vectorised silu on 16-wide
// chunks from the row start, x/(1+expf(-x)) on the n % 16 tail. kernels::rms_norm as
// ggml_compute_forward_rms_norm_f32, and rms_norm_rows (eight rows' sums side by side) with
// each row's bits.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/ops.h"

namespace pdserve {
namespace {

// Values over 12 orders of magnitude, so that each row has its own scale and a value read
// from the wrong row or index shows. (The double sum's order rarely reaches the float
// result: rms_norm_rows keeps index order by construction, not because this would catch it.)
std::vector<float> wide_values(int n, std::mt19937& rng) {
  std::uniform_real_distribution<float> mant(-1.f, 1.f);
  std::uniform_int_distribution<int> ex(-20, 20);
  std::vector<float> v(n);
  for (float& x : v) x = std::ldexp(mant(rng), ex(rng));
  return v;
}

TEST(KernelsOps, RmsNormIsGgmlsFormula) {
  std::mt19937 rng(3);
  for (int n : {1, 5, 64, 2048}) {
    const std::vector<float> x = wide_values(n, rng), w = wide_values(n, rng);
    double sum = 0.0;  // squares rounded to float, summed in double in index order
    for (int i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
    const float scale = 1.0f / std::sqrt(static_cast<float>(sum / n) + 1e-5f);
    std::vector<float> y(n);
    kernels::rms_norm(y.data(), x.data(), w.data(), n, 1e-5f);
    for (int i = 0; i < n; ++i) EXPECT_EQ(y[i], x[i] * scale * w[i]) << "n " << n << " i " << i;
  }
}

TEST(KernelsOps, RmsNormRowsGivesEachRowsBits) {
  std::mt19937 rng(5);
  for (int n : {1, 7, 13, 64, 2048, 2051})
    for (int rows = 0; rows <= 19; ++rows) {
      const std::vector<float> x = wide_values(rows * n, rng), w = wide_values(n, rng);
      std::vector<float> want(static_cast<size_t>(rows) * n);
      for (int r = 0; r < rows; ++r) kernels::rms_norm(&want[size_t(r) * n], &x[size_t(r) * n], w.data(), n, 1e-6f);
      std::vector<float> got(want.size()), in_place = x;
      kernels::rms_norm_rows(got.data(), x.data(), w.data(), rows, n, 1e-6f);
      kernels::rms_norm_rows(in_place.data(), in_place.data(), w.data(), rows, n, 1e-6f);
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_EQ(got[i], want[i]) << "n " << n << " rows " << rows << " row " << i / n << " i " << i % n;
        ASSERT_EQ(in_place[i], want[i]) << "in place: n " << n << " rows " << rows << " row " << i / n;
      }
    }
}

// Rows whose float result depends on the order of the double sum: squares q0 = fl(x0²) in
// [1, 2) and 2^-24 at positions p, p + 1 (q0 + 2^-24 is a float midpoint, also once divided
// by n, a power of two; q0's last bit 0, so the midpoint rounds down) and 2^-54 (a quarter
// of the sum's last place) everywhere else. In index order the 2^-54s before p add up (3 or
// more tip the mean over the midpoint) and those after are lost, so a sum in another order
// gets another result for some p. x0 is one for which the mean's last bit reaches the output.
std::vector<float> order_rows(int rows, int n, float x0) {
  std::vector<float> x(size_t(rows) * n, std::ldexp(1.f, -27));
  for (int r = 0; r < rows; ++r) {
    const int p = (r * 5) % (n - 1);
    x[size_t(r) * n + p] = x0;
    x[size_t(r) * n + p + 1] = std::ldexp(1.f, -12);
  }
  return x;
}

TEST(KernelsOps, RmsNormRowsSumsInIndexOrder) {
  for (int n : {16, 64, 2048}) {
    const int rows = 24;
    const std::vector<float> w(n, 1.f);
    float x0 = 0.f;
    for (int k = 1; k < 1024 && x0 == 0.f; ++k) {
      // c in [1, 1.5) with bits all over its mantissa (c² a float with a perfect square
      // root gives the same scale either way).
      const float c = 1.f + std::ldexp(static_cast<float>((k * 2654435761u) % (1u << 22)), -23);
      const std::vector<float> two = order_rows(2, n, c);  // p = 0 (sum down) and p = 5 (up)
      std::vector<float> a(n), b(n);
      kernels::rms_norm(a.data(), two.data(), w.data(), n, 0.f);
      kernels::rms_norm(b.data(), two.data() + n, w.data(), n, 0.f);
      if (a[0] != b[5]) x0 = c;
    }
    ASSERT_NE(x0, 0.f) << "no row tells the orders apart";
    const std::vector<float> x = order_rows(rows, n, x0);
    std::vector<float> want(x.size()), got(x.size());
    for (int r = 0; r < rows; ++r) kernels::rms_norm(&want[size_t(r) * n], &x[size_t(r) * n], w.data(), n, 0.f);
    kernels::rms_norm_rows(got.data(), x.data(), w.data(), rows, n, 0.f);
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "n " << n << " row " << i / n << " i " << i % n;
  }
}

// The residual step's bits are those of the separate calls it stands for, in their order:
// p normed in place (post_w), x += p, out = rms_norm(x) · w; each part optional.
TEST(KernelsOps, ResidualRmsNormEqualsTheSeparateCalls) {
  std::mt19937 rng(11);
  for (int n : {5, 64, 2051})
    for (int rows : {1, 3, 8, 9, 17, 32})
      for (int parts = 0; parts < 8; ++parts) {
        const bool add = parts & 1, post = parts & 2, norm = parts & 4;
        const std::vector<float> x0 = wide_values(rows * n, rng), p0 = wide_values(rows * n, rng);
        const std::vector<float> post_w = wide_values(n, rng), w = wide_values(n, rng);
        std::vector<float> want_x = x0, want_p = p0, want_out(size_t(rows) * n, -1.f);
        if (add) {
          for (int r = 0; r < rows && post; ++r) kernels::rms_norm(&want_p[size_t(r) * n], &want_p[size_t(r) * n], post_w.data(), n, 1e-5f);
          kernels::add_inplace(want_x.data(), want_p.data(), rows * n);
        }
        if (norm)
          for (int r = 0; r < rows; ++r) kernels::rms_norm(&want_out[size_t(r) * n], &want_x[size_t(r) * n], w.data(), n, 1e-5f);
        std::vector<float> x = x0, p = p0, out(size_t(rows) * n, -1.f);
        kernels::residual_rms_norm(x.data(), add ? p.data() : nullptr, post ? post_w.data() : nullptr, norm ? out.data() : nullptr,
                                   w.data(), rows, n, 1e-5f);
        const std::string what = "n " + std::to_string(n) + " rows " + std::to_string(rows) + " parts " + std::to_string(parts);
        ASSERT_EQ(x, want_x) << what;
        ASSERT_EQ(p, want_p) << what;
        ASSERT_EQ(out, want_out) << what;
      }
}

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
