// Quantised formats: reference quantisers round-trip within their step, the scalar dot
// equals the exact dot of the dequantised operands up to float accumulation error, and
// every SIMD path the CPU has reproduces the scalar path bit for bit (GEMV and GEMM).
#include <gtest/gtest.h>

#include <cstring>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/qgemm.h"
#include "kernels/quant_types.h"
#include "kernels/quants.h"

namespace pdserve {
namespace {

using gguf::GgmlType;

const GgmlType kTypes[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0,
                           GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q2_K, GgmlType::Q3_K,
                           GgmlType::IQ4_NL, GgmlType::IQ4_XS};
// The types with SIMD kernels (all of them; Q5_1 is in Q5_K_M files only as the fallback
// for rows that are not a multiple of 256).
const GgmlType kSimdTypes[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0,
                               GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q2_K, GgmlType::Q3_K,
                               GgmlType::IQ4_NL, GgmlType::IQ4_XS};

/// 64-byte aligned bytes (quantised activation rows must be aligned).
struct AlignedBytes {
  explicit AlignedBytes(size_t n) : p(static_cast<uint8_t*>(std::aligned_alloc(64, (n + 63) / 64 * 64))), size(n) {}
  ~AlignedBytes() { std::free(p); }
  uint8_t* data() { return p; }
  uint8_t* p;
  size_t size;
};

bool is_k(GgmlType t) {
  return t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K || t == GgmlType::Q2_K || t == GgmlType::Q3_K ||
         t == GgmlType::IQ4_XS;
}

std::vector<float> randn(int64_t n, std::mt19937& rng, float scale = 1.f) {
  std::normal_distribution<float> g(0.f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = g(rng);
  return v;
}

/// Values of a quantised activation row.
std::vector<float> dequantize_act(GgmlType wt, const uint8_t* act, int64_t n) {
  std::vector<float> out(n);
  if (is_k(wt)) {
    const auto* a = reinterpret_cast<const kernels::ActQ8K*>(act);
    for (int64_t i = 0; i < n; ++i) out[i] = a[i / 256].d * a[i / 256].qs[i % 256];
  } else {
    const auto* p = reinterpret_cast<const kernels::ActPairQ8*>(act);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t b = i / 32;
      out[i] = p[b / 2].d[8 * (b % 2)] * (int(p[b / 2].qu[32 * (b % 2) + i % 32]) - 128);
    }
  }
  return out;
}

// dequantize(quantize(x)) is within half a quantisation step per value (relative to the
// block's max |x|): Q8_0 1/127, Q4_0 1/8 (asymmetric range), others as their bit width
// (IQ4_NL / IQ4_XS: 4; their widest gap between levels is 24/127 of the range).
TEST(KernelsQuant, RoundTripWithinStep) {
  std::mt19937 rng(7);
  for (GgmlType t : kTypes) {
    SCOPED_TRACE(gguf::type_name(t));
    const int64_t n = 1024;
    const std::vector<float> x = randn(n, rng);
    std::vector<uint8_t> q(gguf::row_bytes(t, n));
    kernels::quantize(t, x.data(), q.data(), n);
    std::vector<float> y(n);
    kernels::dequantize(t, q.data(), y.data(), n);
    double max_err = 0, max_abs = 0;
    for (int64_t i = 0; i < n; ++i) {
      max_err = std::max(max_err, double(std::fabs(x[i] - y[i])));
      max_abs = std::max(max_abs, double(std::fabs(x[i])));
    }
    const double bits = t == GgmlType::Q8_0 ? 8 : t == GgmlType::Q6_K ? 6 : (t == GgmlType::Q5_0 || t == GgmlType::Q5_1 || t == GgmlType::Q5_K) ? 5
                        : t == GgmlType::Q3_K ? 3 : t == GgmlType::Q2_K ? 2 : 4;
    const double bound = max_abs * 2.0 / std::pow(2.0, bits - 1);  // one step of a symmetric grid, with slack for scale rounding
    EXPECT_LE(max_err, bound);
    std::printf("[ %-4s ] max |x - deq(q(x))| = %.4f (max |x| %.3f, bound %.4f)\n", gguf::type_name(t).c_str(), max_err, max_abs, bound);
  }
}

// The scalar dot against the double-precision dot of the dequantised weights and
// activations: only float rounding separates them (the integer parts are exact), bounded
// by γ_k Σ|w·a| with k = blocks + 8 (a generous count of roundings per output).
TEST(KernelsQuant, ScalarDotMatchesExactDotOfDequantisedOperands) {
  std::mt19937 rng(11);
  for (GgmlType t : kTypes) {
    SCOPED_TRACE(gguf::type_name(t));
    for (int64_t n : {256, 512, 2048, 96 * 32, 65 * 32}) {  // 65 blocks: IQ4_NL's odd tail
      if (n % 256 && is_k(t)) continue;
      const std::vector<float> wf = randn(n, rng), x = randn(n, rng);
      std::vector<uint8_t> wq(gguf::row_bytes(t, n));
      kernels::quantize(t, wf.data(), wq.data(), n);
      std::vector<float> wd(n);
      kernels::dequantize(t, wq.data(), wd.data(), n);
      AlignedBytes act(kernels::act_row_bytes(t, n));
      kernels::quantize_act(t, x.data(), act.data(), n);
      const std::vector<float> ad = dequantize_act(t, act.data(), n);
      double exact = 0, mag = 0;
      for (int64_t i = 0; i < n; ++i) { exact += double(wd[i]) * ad[i]; mag += std::fabs(double(wd[i]) * ad[i]); }
      const double k = n / 32.0 + 16;
      for (auto order : {kernels::QOrder::kVecDot, kernels::QOrder::kRepackGemv, kernels::QOrder::kRepackGemm, kernels::QOrder::kTiled}) {
        const float got = kernels::vec_dot_scalar(t, wq.data(), act.data(), n, order);
        EXPECT_LE(std::fabs(got - exact), k * std::ldexp(1.0, -23) * mag) << "n " << n << " got " << got << " exact " << exact;
      }
    }
  }
}

// One token alone equals the same token inside a batch of 8 (GEMV vs GEMM tiles), and both
// equal vec_dot_scalar bit for bit, on the automatically chosen path; rows 37 are not a
// multiple of the row tile.
TEST(KernelsQuant, MatmulTokenAloneEqualsTokenInBatchAndScalarDot) {
  std::mt19937 rng(3);
  for (GgmlType t : kTypes) {
    SCOPED_TRACE(gguf::type_name(t));
    const int64_t rows = 37, cols = 512;
    const std::vector<float> wf = randn(rows * cols, rng);
    std::vector<uint8_t> wq(gguf::row_bytes(t, cols) * rows);
    kernels::quantize(t, wf.data(), wq.data(), rows * cols);
    kernels::WeightView w{wq.data(), t, rows, cols, gguf::row_bytes(t, cols)};
    const int n = 8;
    const std::vector<float> x = randn(n * cols, rng);
    std::vector<float> y(n * rows), y1(rows);
    kernels::matmul(w, x.data(), n, y.data(), nullptr);
    AlignedBytes act(kernels::act_row_bytes(t, cols));
    for (int k = 0; k < n; ++k) {
      kernels::matmul(w, x.data() + k * cols, 1, y1.data(), nullptr);
      kernels::quantize_act(t, x.data() + k * cols, act.data(), cols);
      for (int64_t r = 0; r < rows; ++r) {
        ASSERT_EQ(y1[r], y[k * rows + r]) << "token " << k << " row " << r;
        ASSERT_EQ(y1[r], kernels::vec_dot_scalar(t, wq.data() + r * w.row_bytes, act.data(), cols)) << "token " << k << " row " << r;
      }
    }
  }
}

// The activation quantiser of the K-quants (AVX-512 when built for it) gives the scalar
// reference's values on random rows and on the edge cases of ggml's rule: the max's sign
// taken from the first value reaching |max| (also when its negation appears first or
// later), exact .5 ties (q = 45.5 etc.), the +127 clamp, an all-zero block.
TEST(KernelsQuant, Q8KActivationsEqualTheScalarPath) {
  std::mt19937 rng(13);
  std::vector<std::vector<float>> rows;
  for (int r = 0; r < 200; ++r) rows.push_back(randn(1024, rng, r % 2 ? 1.f : 1e-3f));
  std::vector<float> edge(1024, 0.f);  // block 0 all zero
  for (int i = 256; i < 1024; ++i) edge[i] = static_cast<float>((i * 37) % 255 - 127) / 2.f;  // k/2: exact ties
  edge[300] = -200.f;  // block 1: negative max first ...
  edge[400] = 200.f;   // ... its negation later
  edge[520] = 300.f;   // block 2: positive max first ...
  edge[530] = -300.f;  // ... its negation later
  edge[770] = -400.f;  // block 3: negative max first, its negation later in the same 16 values
  edge[781] = 400.f;
  rows.push_back(edge);
  // Blocks whose max is below 127/FLT_MAX: iscale = −127/max is −inf, so every product is
  // ±inf or NaN (0·inf) and every q is 0 in the scalar path (ggml's nearest_int, then the int8
  // store); the AVX-512 path's bsums once summed INT_MIN sixteen times (signed overflow).
  std::vector<float> tiny(512, 0.f);
  for (int i = 0; i < 256; ++i) tiny[i] = (i % 3 ? 1e-38f : -2e-38f);
  tiny[300] = 1e-40f;  // block 1: one denormal, the rest zero
  rows.push_back(tiny);
  for (const auto& x : rows) {
    const int64_t n = static_cast<int64_t>(x.size());
    AlignedBytes got(kernels::act_row_bytes(GgmlType::Q4_K, n)), want(kernels::act_row_bytes(GgmlType::Q4_K, n));
    kernels::quantize_act_q8_k(x.data(), got.data(), n);
    kernels::quantize_act_q8_k_scalar(x.data(), want.data(), n);
    for (int64_t b = 0; b < n / 256; ++b) {
      const auto& g = reinterpret_cast<const kernels::ActQ8K*>(got.data())[b];
      const auto& w = reinterpret_cast<const kernels::ActQ8K*>(want.data())[b];
      ASSERT_EQ(std::memcmp(g.qs, w.qs, sizeof(g.qs)), 0) << "block " << b;
      ASSERT_EQ(std::memcmp(g.bsums, w.bsums, sizeof(g.bsums)), 0) << "block " << b;
      ASSERT_EQ(std::memcmp(g.bsum32, w.bsum32, sizeof(g.bsum32)), 0) << "block " << b;
      ASSERT_EQ(g.d, w.d) << "block " << b;
    }
  }
}

// The Q8_0 activation quantiser (AVX-512 when built for it) gives the scalar path's bytes —
// every field of every ActPairQ8, the padded half of an odd block count included — on random
// rows, exact .5 ties (x·127/amax = k + 0.5), negative and positive maxima, an all-zero block.
TEST(KernelsQuant, Q80ActivationsEqualTheScalarPath) {
  std::mt19937 rng(17);
  std::vector<std::vector<float>> rows;
  for (int r = 0; r < 200; ++r) rows.push_back(randn(r % 3 ? 1024 : 1056, rng, r % 2 ? 1.f : 1e-3f));  // 1056: 33 blocks
  std::vector<float> edge(32 * 7, 0.f);  // block 0 all zero
  for (int i = 32; i < 32 * 7; ++i) edge[i] = static_cast<float>((i * 37) % 255 - 127) / 2.f;  // k/2 ...
  for (int b = 1; b < 7; ++b) edge[32 * b + b] = b % 2 ? -127.f : 127.f;  // ... with amax 127: exact ties
  rows.push_back(edge);
  for (const auto& x : rows) {
    const int64_t n = static_cast<int64_t>(x.size());
    const int64_t bytes = kernels::act_row_bytes(GgmlType::Q4_0, n);
    AlignedBytes got(bytes), want(bytes);
    std::memset(got.data(), 0xAB, bytes);
    std::memset(want.data(), 0xCD, bytes);
    kernels::quantize_act_q8_0(x.data(), got.data(), n);
    kernels::quantize_act_q8_0_scalar(x.data(), want.data(), n);
    for (int64_t p = 0; p < bytes / static_cast<int64_t>(sizeof(kernels::ActPairQ8)); ++p)
      ASSERT_EQ(std::memcmp(got.data() + p * sizeof(kernels::ActPairQ8), want.data() + p * sizeof(kernels::ActPairQ8),
                            sizeof(kernels::ActPairQ8)), 0) << "pair " << p << " of " << n << " values";
  }
}

// Each SIMD path, forced, against the scalar path: bit-identical outputs. Paths the CPU
// lacks are reported as skipped; types a path has no kernel for yet are noted.
void check_isa(kernels::Isa isa) {
  if (!kernels::isa_available(isa)) GTEST_SKIP() << kernels::isa_name(isa) << " not supported by this CPU";
  std::string missing;
  std::mt19937 rng(5);
  for (GgmlType t : kSimdTypes) {
    if (!kernels::has_quant_kernel(isa, t)) {
      missing += gguf::type_name(t) + " ";
      continue;
    }
    SCOPED_TRACE(gguf::type_name(t));
    // rows 37: ggml's vec_dot order; rows 40 (a multiple of 8): Q4_0 / Q4_K take the
    // repacked orders, picked per token by the flags (GEMM 1, GEMV 0 and 2).
    for (int64_t rows : {37, 40})
      for (int n : {1, 3, 8}) {
        const int64_t cols = t == GgmlType::IQ4_NL ? 800 : 768;  // IQ4_NL: an odd block count too
        const std::vector<float> wf = randn(rows * cols, rng);
        std::vector<uint8_t> wq(gguf::row_bytes(t, cols) * rows);
        kernels::quantize(t, wf.data(), wq.data(), rows * cols);
        kernels::WeightView w{wq.data(), t, rows, cols, gguf::row_bytes(t, cols)};
        const std::vector<float> x = randn(n * cols, rng);
        std::vector<uint8_t> flags(n);
        for (int k = 0; k < n; ++k) flags[k] = static_cast<uint8_t>((k * 7 + n) % 3 | (k % 2 ? kernels::kGemmTiledBatch : 0));
        std::vector<float> ys(n * rows), yi(n * rows);
        kernels::matmul(w, x.data(), n, ys.data(), flags.data(), kernels::Isa::kScalar);
        kernels::matmul(w, x.data(), n, yi.data(), flags.data(), isa);
        EXPECT_EQ(ys, yi) << "rows " << rows << " n_tokens " << n;
      }
  }
  // The types without a kernel of this path fall back to a lower one (checked by its own
  // test): noted, not a skip, since every type that has one was compared above.
  if (!missing.empty()) {
    testing::Test::RecordProperty("no_kernel_yet", missing);
    std::printf("note: %s has no kernel yet for %s(a lower path runs them)\n", kernels::isa_name(isa), missing.c_str());
  }
}

// The tiled order of every K-quant (quant_order picks it for Q4_K / Q5_K / Q2_K / Q3_K /
// IQ4_XS; Q6_K's is kept for the reference build that tiles it): the AVX2 kernel, called directly, equals
// vec_dot_scalar(kTiled) bit for bit, and kTiled is not the vec_dot order.
TEST(KernelsQuant, TiledOrderAvx2EqualsScalar) {
  if (!kernels::isa_available(kernels::Isa::kAvx2)) GTEST_SKIP() << "no AVX2";
  std::mt19937 rng(31);
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::IQ4_XS}) {
    SCOPED_TRACE(gguf::type_name(t));
    const int64_t rows = 21, cols = 1024;
    const int n = 6;
    const std::vector<float> wf = randn(rows * cols, rng), x = randn(n * cols, rng);
    std::vector<uint8_t> wq(gguf::row_bytes(t, cols) * rows);
    kernels::quantize(t, wf.data(), wq.data(), rows * cols);
    const kernels::WeightView w{wq.data(), t, rows, cols, gguf::row_bytes(t, cols)};
    const int64_t stride = kernels::act_row_bytes(t, cols);
    AlignedBytes act(stride * n);
    for (int k = 0; k < n; ++k) kernels::quantize_act(t, x.data() + k * cols, act.data() + k * stride, cols);
    const kernels::QKernel kern = kernels::qgemm_avx2(t, kernels::QOrder::kTiled);
    ASSERT_NE(kern.gemm, nullptr);
    std::vector<float> y(n * rows);
    kern.gemm(w, act.data(), stride, n, 0, rows, y.data(), rows, kernels::QOrder::kTiled);
    int differs_from_vec_dot = 0;
    for (int k = 0; k < n; ++k)
      for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* wr = wq.data() + r * w.row_bytes;
        const uint8_t* a = act.data() + k * stride;
        ASSERT_EQ(y[k * rows + r], kernels::vec_dot_scalar(t, wr, a, cols, kernels::QOrder::kTiled)) << "token " << k << " row " << r;
        differs_from_vec_dot += y[k * rows + r] != kernels::vec_dot_scalar(t, wr, a, cols, kernels::QOrder::kVecDot);
      }
    EXPECT_GT(differs_from_vec_dot, 0);
  }
}

TEST(KernelsQuant, Avx2PathEqualsScalarPath) { check_isa(kernels::Isa::kAvx2); }
TEST(KernelsQuant, Avx512VnniPathEqualsScalarPath) { check_isa(kernels::Isa::kAvx512Vnni); }

}  // namespace
}  // namespace pdserve
