// The Q8_0 / Q4_0 / BF16 KV caches (attention_quant.cc, attention_quant_simd.inc):
//  * row formats: Q8_0 rows carry the x86 activation quantiser's values (quantize_act_q8_0),
//    Q4_0 rows the reference quantiser's bytes (quantize(Q4_0)), sizes as GGUF's blocks;
//  * the scalar reference against the reference engine's formula rebuilt from the weight
//    kernels' independently checked pieces (vec_dot_legacy_scalar = ggml_vec_dot_*_q8_0's
//    order, dequantize = dequantize_row_*), key by key, bit for bit;
//  * the SIMD paths against the scalar reference, bit for bit (GQA groups, head_dims,
//    block sizes, contexts up to 1,500 keys, extreme scales), and grouped = per head;
//  * every dtype is attention: close to a softmax-weighted mean of the f32 K/V in double.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "base/fp16.h"
#include "kernels/attention.h"
#include "kernels/cpu_features.h"
#include "kernels/expf.h"
#include "kernels/quant_types.h"
#include "kernels/quants.h"

namespace pdserve::kernels {
namespace {

using gguf::GgmlType;

struct QuantCache {
  std::vector<float> kf, vf;       // the f32 values, [slot][head][d]
  std::vector<uint8_t> k, v;       // stored in dtype
  std::vector<int32_t> table;
  KvLayerView view;
};

QuantCache make_cache(KvDtype dtype, int head_dim, int n_kv_heads, int block_size, int max_keys, float k_sd,
                      float v_sd, std::mt19937& rng) {
  QuantCache c;
  const int used = (max_keys + block_size - 1) / block_size;
  const int num_blocks = used + 2;
  const int64_t slots = int64_t{num_blocks} * block_size;
  const int64_t n = slots * n_kv_heads * head_dim;
  std::normal_distribution<float> kd(0.f, k_sd), vd(0.f, v_sd);
  c.kf.resize(n);
  c.vf.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    c.kf[i] = kd(rng);
    c.vf[i] = vd(rng);
  }
  const int64_t row = kv_row_bytes(dtype, head_dim);
  c.k.resize(slots * n_kv_heads * row);
  c.v.resize(slots * n_kv_heads * row);
  c.view.k = c.k.data();
  c.view.v = c.v.data();
  c.view.dtype = dtype;
  c.view.block_size = block_size;
  c.view.n_kv_heads = n_kv_heads;
  c.view.head_dim = head_dim;
  for (int64_t s = 0; s < slots; ++s)
    kv_store(c.view, s, &c.kf[s * n_kv_heads * head_dim], &c.vf[s * n_kv_heads * head_dim]);
  std::vector<int32_t> perm(num_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  c.table.assign(perm.begin(), perm.begin() + used);
  return c;
}

const char* name(KvDtype d) {
  switch (d) {
    case KvDtype::BF16: return "bf16";
    case KvDtype::Q8_0: return "q8_0";
    case KvDtype::Q4_0: return "q4_0";
    default: return "f";
  }
}

TEST(KvQuantRows, SizesAndFit) {
  EXPECT_EQ(kv_row_bytes(KvDtype::F16, 64), 128);
  EXPECT_EQ(kv_row_bytes(KvDtype::BF16, 64), 128);
  EXPECT_EQ(kv_row_bytes(KvDtype::F32, 64), 256);
  EXPECT_EQ(kv_row_bytes(KvDtype::Q8_0, 64), 68);
  EXPECT_EQ(kv_row_bytes(KvDtype::Q4_0, 128), 72);
  EXPECT_TRUE(kv_dtype_fits(KvDtype::Q8_0, 96));
  EXPECT_FALSE(kv_dtype_fits(KvDtype::Q8_0, 8));
  EXPECT_FALSE(kv_dtype_fits(KvDtype::Q4_0, 48));
  EXPECT_TRUE(kv_dtype_fits(KvDtype::BF16, 8));
  EXPECT_TRUE(kv_dtype_fits(KvDtype::F16, 8));
}

// Q8_0 rows = ggml's x86 quantize_row_q8_0 (as the weight kernels' activation rows);
// Q4_0 rows = quantize_row_q4_0_ref (as llama-quantize's bytes); BF16 = RNE.
TEST(KvQuantRows, RowsAreGgmlsFromFloat) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.f, 2.f);
  const int d = 128;
  std::vector<float> x(d);
  for (int trial = 0; trial < 50; ++trial) {
    for (float& e : x) e = nd(rng);
    if (trial == 1) std::fill(x.begin(), x.begin() + 32, 0.f);  // an all-zero block
    if (trial == 2)
      for (int i = 0; i < d; ++i) x[i] = (i % 7 - 3) * 0.5f;  // exact .5 products: the rounding rule shows
    std::vector<BlockQ8_0> q8(d / 32);
    quantize_kv_row(KvDtype::Q8_0, x.data(), q8.data(), d);
    std::vector<ActPairQ8> act(act_row_bytes(GgmlType::Q8_0, d) / sizeof(ActPairQ8));  // 64-byte aligned records
    quantize_act_q8_0(x.data(), act.data(), d);
    const ActPairQ8* pairs = act.data();
    for (int b = 0; b < d / 32; ++b) {
      const ActPairQ8& p = pairs[b / 2];
      const int h = b % 2;
      EXPECT_EQ(fp16_to_fp32(q8[b].d), p.d[8 * h]) << b;
      for (int j = 0; j < 32; ++j) ASSERT_EQ(q8[b].qs[j], int(p.qu[32 * h + j]) - 128) << "block " << b << " value " << j;
    }
    std::vector<BlockQ4_0> a(d / 32), r(d / 32);
    quantize_kv_row(KvDtype::Q4_0, x.data(), a.data(), d);
    quantize(GgmlType::Q4_0, x.data(), r.data(), d);
    EXPECT_EQ(std::memcmp(a.data(), r.data(), sizeof(BlockQ4_0) * r.size()), 0);
    std::vector<uint16_t> bf(d);
    quantize_kv_row(KvDtype::BF16, x.data(), bf.data(), d);
    for (int i = 0; i < d; ++i) EXPECT_EQ(bf[i], fp32_to_bf16(x[i]));
  }
}

// The reference engine's loop (ggml_compute_forward_flash_attn_ext_f16_one_chunk, V not
// f16) written with the weight kernels' pieces: Q as quantize_act_q8_0 rows, scores by
// vec_dot_legacy_scalar, V rows by dequantize, f32 accumulator.
std::vector<float> engine_formula(const QuantCache& c, const float* q, int kv_head, int n_keys, float scale) {
  const int d = c.view.head_dim;
  const GgmlType t = c.view.dtype == KvDtype::Q8_0 ? GgmlType::Q8_0 : GgmlType::Q4_0;
  const int64_t row = kv_row_bytes(c.view.dtype, d);
  std::vector<ActPairQ8> act(act_row_bytes(GgmlType::Q8_0, d) / sizeof(ActPairQ8));
  quantize_act_q8_0(q, act.data(), d);
  std::vector<float> acc(d, 0.f), v32(d);
  float m = -INFINITY, l = 0.f;
  for (int p = 0; p < n_keys; ++p) {
    const int64_t slot = int64_t{c.table[p / c.view.block_size]} * c.view.block_size + p % c.view.block_size;
    const int64_t off = (slot * c.view.n_kv_heads + kv_head) * row;
    float s = vec_dot_legacy_scalar(t, c.k.data() + off, act.data(), d);
    s = s * scale;
    const float mold = m;
    float ms = 1.f, vs = 1.f;
    if (s > m) {
      m = s;
      ms = expf_glibc(mold - m);
      for (float& a : acc) a = a * ms;
    } else {
      vs = expf_glibc(s - m);
    }
    dequantize(t, c.v.data() + off, v32.data(), d);
    for (int i = 0; i < d; ++i) acc[i] = std::fma(v32[i], vs, acc[i]);
    l = std::fma(l, ms, vs);
  }
  const float inv = l == 0.f ? 0.f : 1.f / l;
  for (float& a : acc) a = a * inv;
  return acc;
}

TEST(KvQuantAttention, ScalarIsTheEngineFormula) {
  for (KvDtype dt : {KvDtype::Q8_0, KvDtype::Q4_0}) {
    for (int d : {32, 64, 128}) {
      std::mt19937 rng(d);
      QuantCache c = make_cache(dt, d, 2, 16, 300, 1.f, 1.f, rng);
      std::normal_distribution<float> qd(0.f, 1.f);
      std::vector<float> q(d), out(d);
      for (int n : {1, 2, 17, 300}) {
        for (float& x : q) x = qd(rng);
        const float scale = 1.f / std::sqrt(float(d));
        paged_attention_head(q.data(), c.view, 1, c.table.data(), n, scale, out.data(), Isa::kScalar);
        const std::vector<float> ref = engine_formula(c, q.data(), 1, n, scale);
        ASSERT_EQ(std::memcmp(ref.data(), out.data(), sizeof(float) * d), 0) << name(dt) << " d " << d << " n " << n;
      }
    }
  }
}

// Every path bit-identical to the scalar reference, every query head of a GQA layer.
void check_paths(Isa isa, KvDtype dt, int d, int n_kv, int group, int bs, const std::vector<int>& lens, float q_sd,
                 uint32_t seed) {
  std::mt19937 rng(seed);
  const int max_keys = *std::max_element(lens.begin(), lens.end());
  QuantCache c = make_cache(dt, d, n_kv, bs, max_keys, 1.f, 1.f, rng);
  const int n_head = n_kv * group;
  std::normal_distribution<float> qd(0.f, q_sd);
  std::vector<float> q(size_t(n_head) * d), ref(size_t(n_head) * d), one(d), grp(size_t(n_head) * d);
  const float scale = 1.f / std::sqrt(float(d));
  int nonzero = 0;
  for (int n : lens) {
    for (float& x : q) x = qd(rng);
    for (int h = 0; h < n_head; ++h) {
      paged_attention_head(&q[size_t(h) * d], c.view, h / group, c.table.data(), n, scale, &ref[size_t(h) * d],
                           Isa::kScalar);
      std::fill(one.begin(), one.end(), -1.f);
      paged_attention_head(&q[size_t(h) * d], c.view, h / group, c.table.data(), n, scale, one.data(), isa);
      ASSERT_EQ(std::memcmp(&ref[size_t(h) * d], one.data(), sizeof(float) * d), 0)
          << name(dt) << " " << isa_name(isa) << " d " << d << " n " << n << " head " << h;
    }
    std::fill(grp.begin(), grp.end(), -1.f);
    for (int g = 0; g < n_kv; ++g)
      paged_attention_group(&q[size_t(g) * group * d], group, c.view, g, c.table.data(), n, scale,
                            &grp[size_t(g) * group * d], isa);
    ASSERT_EQ(std::memcmp(ref.data(), grp.data(), sizeof(float) * ref.size()), 0)
        << name(dt) << " " << isa_name(isa) << " group " << group << " d " << d << " n " << n;
    for (float x : ref) nonzero += x != 0.f;
  }
  EXPECT_GT(nonzero, 0);
}

class KvQuantPaths : public ::testing::TestWithParam<Isa> {};

TEST_P(KvQuantPaths, MatchScalarBitForBit) {
  const Isa isa = GetParam();
  if (isa != Isa::kScalar && resolve_isa(isa) != isa && isa != Isa::kAuto) GTEST_SKIP() << "CPU lacks " << isa_name(isa);
  const std::vector<int> lens = {1, 2, 15, 16, 17, 33, 100, 257, 1500};
  uint32_t seed = 1;
  for (KvDtype dt : {KvDtype::Q8_0, KvDtype::Q4_0}) {
    check_paths(isa, dt, 64, 2, 4, 16, lens, 1.f, seed++);
    check_paths(isa, dt, 128, 1, 9, 7, {1, 40, 333}, 1.f, seed++);  // 9 heads: groups of 8 + 1
    check_paths(isa, dt, 32, 3, 1, 4, {1, 5, 64}, 1.f, seed++);
    check_paths(isa, dt, 96, 1, 3, 16, {1, 50}, 1.f, seed++);
    check_paths(isa, dt, 256, 1, 2, 16, {1, 70}, 1.f, seed++);
    check_paths(isa, dt, 64, 1, 6, 16, {1, 45}, 1.f, seed++);      // groups of 5, 6, 7
    check_paths(isa, dt, 64, 1, 5, 16, {17, 32}, 1.f, seed++);
    check_paths(isa, dt, 64, 1, 7, 16, {31, 48}, 30.f, seed++);
    check_paths(isa, dt, 64, 1, 2, 16, {1, 200}, 30.f, seed++);    // scores far apart: exp underflow
    check_paths(isa, dt, 64, 1, 2, 16, {1, 200}, 1e-3f, seed++);   // all scores ~equal
  }
  check_paths(isa, KvDtype::BF16, 8, 2, 3, 4, {1, 9, 100}, 1.f, seed++);  // BF16: scalar on every path
  check_paths(isa, KvDtype::BF16, 64, 1, 2, 16, {1, 100}, 1.f, seed++);
}

INSTANTIATE_TEST_SUITE_P(Isas, KvQuantPaths, ::testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvx512Vnni, Isa::kAuto),
                         [](const auto& info) { return std::string(isa_name(info.param)); });

// Each dtype's attention is close to the exact softmax-weighted mean of the f32 K/V (its
// error: the quantisation of K, V and Q).
TEST(KvQuantAttention, IsAttention) {
  const int d = 64, n = 200;
  for (auto [dt, tol] : {std::pair{KvDtype::BF16, 0.03}, {KvDtype::Q8_0, 0.03}, {KvDtype::Q4_0, 0.15}}) {
    std::mt19937 rng(5);
    QuantCache c = make_cache(dt, d, 1, 16, n, 1.f, 1.f, rng);
    std::vector<float> q(d), out(d);
    std::normal_distribution<float> qd(0.f, 1.f);
    for (float& x : q) x = qd(rng);
    const float scale = 0.125f;
    paged_attention_head(q.data(), c.view, 0, c.table.data(), n, scale, out.data());
    std::vector<double> s(n), o(d, 0.0);
    double mx = -INFINITY, z = 0.0;
    auto at = [&](const std::vector<float>& pool, int p, int i) {
      return pool[(size_t(c.table[p / 16]) * 16 + p % 16) * d + i];
    };
    for (int p = 0; p < n; ++p) {
      double dot = 0;
      for (int i = 0; i < d; ++i) dot += double(q[i]) * at(c.kf, p, i);
      s[p] = dot * scale;
      mx = std::max(mx, s[p]);
    }
    for (int p = 0; p < n; ++p) {
      const double w = std::exp(s[p] - mx);
      z += w;
      for (int i = 0; i < d; ++i) o[i] += w * at(c.vf, p, i);
    }
    double err = 0;
    for (int i = 0; i < d; ++i) err = std::max(err, std::fabs(out[i] - o[i] / z));
    EXPECT_LT(err, tol) << name(dt);
    EXPECT_GT(err, 0.0) << name(dt);  // quantised: not the exact values
  }
}

}  // namespace
}  // namespace pdserve::kernels
