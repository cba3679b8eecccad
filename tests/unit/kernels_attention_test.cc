// The SIMD f16-cache paged attention kernels (attention_simd.inc) against the scalar
// reference (attention.cc paged_attention_f16_scalar): the same bits, on random caches with
// shuffled block tables, GQA, head_dims with and without a d % 64 / d % 16 tail, block sizes
// above and below the kernel's score chunk, and contexts of 1..2000 keys; and the grouped
// entry point (paged_attention_group, all query heads of a KV head in one call) against the
// heads one at a time, on every path.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "base/fp16.h"
#include "kernels/attention.h"

namespace pdserve::kernels {
namespace {

struct RandomCache {
  std::vector<uint16_t> k, v;
  std::vector<int32_t> table;
  KvLayerView view;
};

// A cache of [num_blocks][block_size][n_kv_heads][head_dim] f16 K ~ N(0, k_sd) and
// V ~ N(0, v_sd), holding max_keys keys in a shuffled set of blocks (plus unused ones).
RandomCache make_cache(int head_dim, int n_kv_heads, int block_size, int max_keys, float k_sd, float v_sd,
                       std::mt19937& rng) {
  RandomCache c;
  const int used = (max_keys + block_size - 1) / block_size;
  const int num_blocks = used + 3;
  const size_t n = size_t(num_blocks) * block_size * n_kv_heads * head_dim;
  std::normal_distribution<float> kd(0.f, k_sd), vd(0.f, v_sd);
  c.k.resize(n);
  c.v.resize(n);
  for (size_t i = 0; i < n; ++i) {
    c.k[i] = fp32_to_fp16(kd(rng));
    c.v[i] = fp32_to_fp16(vd(rng));
  }
  std::vector<int32_t> perm(num_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  c.table.assign(perm.begin(), perm.begin() + used);
  c.view.k = c.k.data();
  c.view.v = c.v.data();
  c.view.dtype = KvDtype::F16;
  c.view.block_size = block_size;
  c.view.n_kv_heads = n_kv_heads;
  c.view.head_dim = head_dim;
  return c;
}

std::string first_diff(const std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0)
      return "index " + std::to_string(i) + ": " + std::to_string(a[i]) + " vs " + std::to_string(b[i]);
  return "none";
}

class AttentionSimdTest : public ::testing::TestWithParam<Isa> {};

// Every query head of a GQA layer (group query heads per KV head), every context length in
// `lens`: the SIMD path's output is memcmp-equal to the scalar reference's.
void check_layer(Isa isa, int head_dim, int n_kv_heads, int group, int block_size, const std::vector<int>& lens,
                 float q_sd, float k_sd, float v_sd, uint32_t seed) {
  std::mt19937 rng(seed);
  const int max_keys = *std::max_element(lens.begin(), lens.end());
  RandomCache c = make_cache(head_dim, n_kv_heads, block_size, max_keys, k_sd, v_sd, rng);
  const int n_head = n_kv_heads * group;
  std::normal_distribution<float> qd(0.f, q_sd);
  std::vector<float> q(size_t(n_head) * head_dim);
  const float scale = 1.f / std::sqrt(float(head_dim));
  std::vector<float> ref(head_dim), got(head_dim);
  int nonzero = 0;
  for (int n_keys : lens) {
    for (float& x : q) x = qd(rng);
    for (int h = 0; h < n_head; ++h) {
      const float* qh = &q[size_t(h) * head_dim];
      paged_attention_head(qh, c.view, h / group, c.table.data(), n_keys, scale, ref.data(), Isa::kScalar);
      std::fill(got.begin(), got.end(), -1.f);
      paged_attention_head(qh, c.view, h / group, c.table.data(), n_keys, scale, got.data(), isa);
      ASSERT_EQ(std::memcmp(ref.data(), got.data(), sizeof(float) * head_dim), 0)
          << isa_name(isa) << " head_dim " << head_dim << " block " << block_size << " n_keys " << n_keys << " head "
          << h << " first diff " << first_diff(ref, got);
      for (float x : ref) nonzero += x != 0.f;
    }
  }
  EXPECT_GT(nonzero, 0);  // the comparison is not vacuous
}

const std::vector<int> kLens = {1,  2,  3,   15,  16,  17,  31,  32,  33,  63,  64,   65,   100,
                                127, 255, 256, 257, 511, 512, 513, 777, 1024, 1500, 1999, 2000};

TEST_P(AttentionSimdTest, MatchesScalarBitForBit) {
  const Isa isa = GetParam();
  if (!attention_has_simd(isa)) GTEST_SKIP() << "CPU lacks " << isa_name(isa);
  uint32_t seed = 1;
  for (int head_dim : {8, 32, 40, 64, 80, 96, 128, 192, 256})
    for (int block_size : {16, 7, 64}) {
      SCOPED_TRACE("head_dim " + std::to_string(head_dim) + " block " + std::to_string(block_size));
      check_layer(isa, head_dim, /*n_kv_heads=*/2, /*group=*/block_size == 16 ? 4 : 2, block_size, kLens, 1.f, 1.f,
                  1.f, seed++);
    }
}

// Peaked and flat score distributions (exp underflow to 0 and subnormal weights, the
// running max moving often or never) and tiny / large V (f16 subnormal and large
// accumulators).
TEST_P(AttentionSimdTest, MatchesScalarAtExtremeScales) {
  const Isa isa = GetParam();
  if (!attention_has_simd(isa)) GTEST_SKIP() << "CPU lacks " << isa_name(isa);
  const std::vector<int> lens = {1, 5, 16, 100, 333, 1000, 2000};
  uint32_t seed = 100;
  for (int head_dim : {32, 64, 128})
    for (auto [q_sd, k_sd, v_sd] : {std::tuple{8.f, 4.f, 1.f}, std::tuple{0.01f, 0.01f, 1.f},
                                    std::tuple{1.f, 1.f, 1e-5f}, std::tuple{2.f, 2.f, 300.f}}) {
      SCOPED_TRACE("head_dim " + std::to_string(head_dim) + " q_sd " + std::to_string(q_sd) + " v_sd " +
                   std::to_string(v_sd));
      check_layer(isa, head_dim, /*n_kv_heads=*/1, /*group=*/3, /*block_size=*/16, lens, q_sd, k_sd, v_sd, seed++);
    }
}

INSTANTIATE_TEST_SUITE_P(Isas, AttentionSimdTest, ::testing::Values(Isa::kAvx2, Isa::kAvx512Vnni, Isa::kAuto),
                         [](const auto& info) { return std::string(isa_name(info.param)); });

// paged_attention_group against paged_attention_head: for every KV head of a layer, the
// group's n_q = group query heads in one call give, row by row, memcmp-equal results to the
// heads one at a time on the same path, and to the scalar reference. Contexts: every length
// 1..kDenseLens (all the chunk and block boundaries there) and kLens up to 2000.
constexpr int kDenseLens = 130;
void check_group(Isa isa, int head_dim, int n_kv_heads, int group, int block_size, const std::vector<int>& lens,
                 float q_sd, float k_sd, float v_sd, uint32_t seed) {
  std::mt19937 rng(seed);
  const int max_keys = *std::max_element(lens.begin(), lens.end());
  RandomCache c = make_cache(head_dim, n_kv_heads, block_size, max_keys, k_sd, v_sd, rng);
  const size_t row = size_t(group) * head_dim;  // one KV head's query heads
  std::normal_distribution<float> qd(0.f, q_sd);
  std::vector<float> q(row * n_kv_heads), ref(row), scalar(row), got(row);
  const float scale = 1.f / std::sqrt(float(head_dim));
  int nonzero = 0;
  for (int n_keys : lens) {
    for (float& x : q) x = qd(rng);
    for (int kvh = 0; kvh < n_kv_heads; ++kvh) {
      const float* qg = &q[kvh * row];
      for (int h = 0; h < group; ++h) {
        paged_attention_head(qg + size_t(h) * head_dim, c.view, kvh, c.table.data(), n_keys, scale,
                             &ref[size_t(h) * head_dim], isa);
        paged_attention_head(qg + size_t(h) * head_dim, c.view, kvh, c.table.data(), n_keys, scale,
                             &scalar[size_t(h) * head_dim], Isa::kScalar);
      }
      std::fill(got.begin(), got.end(), -1.f);
      paged_attention_group(qg, group, c.view, kvh, c.table.data(), n_keys, scale, got.data(), isa);
      ASSERT_EQ(std::memcmp(ref.data(), got.data(), sizeof(float) * row), 0)
          << isa_name(isa) << " head_dim " << head_dim << " group " << group << " block " << block_size << " n_keys "
          << n_keys << " kv head " << kvh << " first diff " << first_diff(ref, got);
      ASSERT_EQ(std::memcmp(scalar.data(), got.data(), sizeof(float) * row), 0)
          << isa_name(isa) << " vs scalar: head_dim " << head_dim << " group " << group << " block " << block_size
          << " n_keys " << n_keys << " kv head " << kvh << " first diff " << first_diff(scalar, got);
      for (float x : ref) nonzero += x != 0.f;
    }
  }
  EXPECT_GT(nonzero, 0);  // the comparison is not vacuous
}

std::vector<int> group_lens() {
  std::vector<int> lens(kDenseLens);
  std::iota(lens.begin(), lens.end(), 1);
  for (int n : kLens)
    if (n > kDenseLens) lens.push_back(n);
  return lens;
}

class AttentionGroupTest : public ::testing::TestWithParam<Isa> {};

TEST_P(AttentionGroupTest, GroupMatchesPerHeadBitForBit) {
  const Isa isa = GetParam();
  if (isa != Isa::kScalar && !attention_has_simd(isa)) GTEST_SKIP() << "CPU lacks " << isa_name(isa);
  const std::vector<int> lens = group_lens();
  uint32_t seed = 1000;
  for (int head_dim : {32, 64, 128})
    for (int group : {1, 2, 4, 7, 8}) {
      SCOPED_TRACE("head_dim " + std::to_string(head_dim) + " group " + std::to_string(group));
      check_group(isa, head_dim, /*n_kv_heads=*/2, group, /*block_size=*/16, lens, 1.f, 1.f, 1.f, seed++);
    }
}

// The other group sizes (3, 5, 6; 12 and 16 run as two groups), head_dims with a d % 64 or
// d % 16 tail or none known at compile time (192), and block sizes below and above the
// kernels' key chunks.
TEST_P(AttentionGroupTest, GroupMatchesPerHeadOtherShapes) {
  const Isa isa = GetParam();
  if (isa != Isa::kScalar && !attention_has_simd(isa)) GTEST_SKIP() << "CPU lacks " << isa_name(isa);
  const std::vector<int> lens = {1, 2, 15, 16, 17, 31, 32, 33, 64, 65, 100, 257, 513, 1000};
  uint32_t seed = 2000;
  for (int head_dim : {8, 16, 40, 80, 96, 192, 256})
    for (int group : {2, 3, 5, 6, 8}) {
      SCOPED_TRACE("head_dim " + std::to_string(head_dim) + " group " + std::to_string(group));
      check_group(isa, head_dim, /*n_kv_heads=*/2, group, /*block_size=*/group % 2 ? 7 : 64, lens, 1.f, 1.f, 1.f,
                  seed++);
    }
  for (int head_dim : {64, 128})
    for (int group : {3, 5, 6, 12, 16}) {
      SCOPED_TRACE("head_dim " + std::to_string(head_dim) + " group " + std::to_string(group));
      check_group(isa, head_dim, /*n_kv_heads=*/1, group, /*block_size=*/7, lens, 1.f, 1.f, 1.f, seed++);
    }
}

// Peaked and flat score distributions and tiny / large V (as MatchesScalarAtExtremeScales).
TEST_P(AttentionGroupTest, GroupMatchesPerHeadAtExtremeScales) {
  const Isa isa = GetParam();
  if (isa != Isa::kScalar && !attention_has_simd(isa)) GTEST_SKIP() << "CPU lacks " << isa_name(isa);
  const std::vector<int> lens = {1, 5, 16, 100, 333, 1000, 2000};
  uint32_t seed = 3000;
  for (int head_dim : {32, 64, 128})
    for (auto [q_sd, k_sd, v_sd] : {std::tuple{8.f, 4.f, 1.f}, std::tuple{0.01f, 0.01f, 1.f},
                                    std::tuple{1.f, 1.f, 1e-5f}, std::tuple{2.f, 2.f, 300.f}}) {
      SCOPED_TRACE("head_dim " + std::to_string(head_dim) + " q_sd " + std::to_string(q_sd) + " v_sd " +
                   std::to_string(v_sd));
      check_group(isa, head_dim, /*n_kv_heads=*/1, /*group=*/8, /*block_size=*/16, lens, q_sd, k_sd, v_sd, seed++);
      // A group of 3: the softmax lanes past the group masked.
      check_group(isa, head_dim, /*n_kv_heads=*/1, /*group=*/3, /*block_size=*/16, {1, 33, 333}, q_sd, k_sd, v_sd, seed++);
    }
}

INSTANTIATE_TEST_SUITE_P(Isas, AttentionGroupTest,
                         ::testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvx512Vnni, Isa::kAuto),
                         [](const auto& info) { return std::string(isa_name(info.param)); });

// An f32 cache: the group call is the f32 path head by head.
TEST(AttentionTest, GroupF32CacheMatchesPerHead) {
  std::mt19937 rng(5);
  const int d = 64, group = 4, n = 300;
  RandomCache c = make_cache(d, 1, 16, n, 1.f, 1.f, rng);
  std::vector<float> k32(c.k.size()), v32(c.v.size());
  for (size_t i = 0; i < c.k.size(); ++i) {
    k32[i] = fp16_to_fp32(c.k[i]);
    v32[i] = fp16_to_fp32(c.v[i]);
  }
  c.view.k = k32.data();
  c.view.v = v32.data();
  c.view.dtype = KvDtype::F32;
  std::vector<float> q(size_t(group) * d), ref(q.size()), got(q.size());
  std::normal_distribution<float> qd(0.f, 1.f);
  for (float& x : q) x = qd(rng);
  for (int h = 0; h < group; ++h)
    paged_attention_head(&q[size_t(h) * d], c.view, 0, c.table.data(), n, 0.125f, &ref[size_t(h) * d]);
  paged_attention_group(q.data(), group, c.view, 0, c.table.data(), n, 0.125f, got.data());
  EXPECT_EQ(std::memcmp(ref.data(), got.data(), sizeof(float) * q.size()), 0) << first_diff(ref, got);
}

// The default (kAuto) path and the scalar reference also agree for a head through the
// public entry point with no isa argument, which is what the model calls.
TEST(AttentionTest, DefaultPathMatchesScalar) {
  std::mt19937 rng(7);
  RandomCache c = make_cache(64, 2, 16, 300, 1.f, 1.f, rng);
  std::vector<float> q(64), ref(64), got(64);
  std::normal_distribution<float> qd(0.f, 1.f);
  for (float& x : q) x = qd(rng);
  paged_attention_f16_scalar(q.data(), c.view, 1, c.table.data(), 300, 0.125f, ref.data());
  paged_attention_head(q.data(), c.view, 1, c.table.data(), 300, 0.125f, got.data());
  EXPECT_EQ(std::memcmp(ref.data(), got.data(), sizeof(float) * 64), 0) << first_diff(ref, got);
}

// A softmax-weighted mean of V computed in double: the reference (and so every path) is
// attention up to its f16 rounding.
TEST(AttentionTest, ScalarIsAttention) {
  std::mt19937 rng(11);
  const int d = 64, n = 200;
  RandomCache c = make_cache(d, 1, 16, n, 1.f, 1.f, rng);
  std::vector<float> q(d), out(d);
  std::normal_distribution<float> qd(0.f, 1.f);
  for (float& x : q) x = qd(rng);
  const float scale = 0.125f;
  paged_attention_head(q.data(), c.view, 0, c.table.data(), n, scale, out.data(), Isa::kScalar);
  std::vector<double> s(n), o(d, 0.0);
  double mx = -INFINITY, z = 0.0;
  auto at = [&](const std::vector<uint16_t>& pool, int p, int i) {
    return fp16_to_fp32(pool[(size_t(c.table[p / 16]) * 16 + p % 16) * d + i]);
  };
  for (int p = 0; p < n; ++p) {
    double dot = 0;
    for (int i = 0; i < d; ++i) dot += double(q[i]) * at(c.k, p, i);
    s[p] = dot * scale;
    mx = std::max(mx, s[p]);
  }
  for (int p = 0; p < n; ++p) {
    const double w = std::exp(s[p] - mx);
    z += w;
    for (int i = 0; i < d; ++i) o[i] += w * at(c.v, p, i);
  }
  for (int i = 0; i < d; ++i) EXPECT_NEAR(out[i], o[i] / z, 2e-2) << i;
}


// Gemma's options: a sliding window (keys [first_key, n) only) and logit soft-capping
// (s = cap · tanh(q·k · scale / cap)) against the same double-precision attention, for the
// one-head and grouped entry points (2 query heads on one KV head: bit-identical per head).
TEST(AttentionTest, WindowAndSoftcapAreAttention) {
  std::mt19937 rng(13);
  const int d = 64, n = 90, first = 37;
  const float scale = 0.125f, cap = 2.0f;  // a small cap, so that tanh bends the scores
  RandomCache c = make_cache(d, 1, 16, n, 1.f, 1.f, rng);
  std::vector<float> q(2 * d), out(d), grp(2 * d);
  std::normal_distribution<float> qd(0.f, 1.f);
  for (float& x : q) x = qd(rng);
  paged_attention_head(q.data(), c.view, 0, c.table.data(), n, scale, out.data(), Isa::kAuto, first, cap);
  paged_attention_group(q.data(), 2, c.view, 0, c.table.data(), n, scale, grp.data(), Isa::kAuto, first, cap);
  EXPECT_EQ(std::memcmp(out.data(), grp.data(), sizeof(float) * d), 0);
  auto at = [&](const std::vector<uint16_t>& pool, int p, int i) {
    return fp16_to_fp32(pool[(size_t(c.table[p / 16]) * 16 + p % 16) * d + i]);
  };
  std::vector<double> s(n), o(d, 0.0);
  double mx = -INFINITY, z = 0.0;
  for (int p = first; p < n; ++p) {
    double dot = 0;
    for (int i = 0; i < d; ++i) dot += double(q[i]) * at(c.k, p, i);
    s[p] = cap * std::tanh(dot * scale / cap);
    mx = std::max(mx, s[p]);
  }
  for (int p = first; p < n; ++p) {
    const double w = std::exp(s[p] - mx);
    z += w;
    for (int i = 0; i < d; ++i) o[i] += w * at(c.v, p, i);
  }
  for (int i = 0; i < d; ++i) EXPECT_NEAR(out[i], o[i] / z, 2e-2) << i;
  // Without the options the result is another one (the test can fail).
  std::vector<float> plain(d);
  paged_attention_head(q.data(), c.view, 0, c.table.data(), n, scale, plain.data());
  double diff = 0;
  for (int i = 0; i < d; ++i) diff = std::max(diff, std::fabs(double(plain[i]) - o[i] / z));
  EXPECT_GT(diff, 0.05);
}

}  // namespace
}  // namespace pdserve::kernels
