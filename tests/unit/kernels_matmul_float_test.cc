// The AVX-512 register tiles of the float-type weights (F32, F16, BF16) against the
// one-row, one-token reference of each order, bit for bit: row counts around the row
// tiles (3, 4, 6, 8, 12) and chunks (48), token counts around the token tiles (2, 3, 6),
// cols with and without leftovers after the 64-value chunks and with and without the
// tinyBLAS order (k % 16, k % 32), mixed flags; and the vectorised activation roundings
// against the scalar conversions on special values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/fp16.h"
#include "kernels/matmul.h"
#include "kernels/matmul_float.h"

namespace pdserve {
namespace {

using gguf::GgmlType;

struct Weights {
  std::vector<uint8_t> bytes;
  kernels::WeightView view;
};

Weights make_weights(GgmlType t, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> g(0.f, 1.f);
  const int64_t es = t == GgmlType::F32 ? 4 : 2;
  Weights w;
  w.bytes.resize(rows * cols * es);
  for (int64_t i = 0; i < rows * cols; ++i) {
    const float v = g(rng);
    if (t == GgmlType::F32) std::memcpy(&w.bytes[i * 4], &v, 4);
    const uint16_t h = t == GgmlType::F16 ? fp32_to_fp16(v) : fp32_to_bf16(v);
    if (t != GgmlType::F32) std::memcpy(&w.bytes[i * 2], &h, 2);
  }
  w.view = {w.bytes.data(), t, rows, cols, cols * es};
  return w;
}

TEST(KernelsMatmulFloat, TilesEqualReferenceBitForBit) {
  std::mt19937 rng(31);
  std::normal_distribution<float> g(0.f, 1.f);
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16})
    for (int64_t cols : {7, 48, 64, 96, 172, 256, 1000})
      for (int64_t rows : {1, 5, 13, 50, 97}) {
        const Weights w = make_weights(t, rows, cols, rng);
        for (int n : {1, 2, 3, 4, 5, 6, 7, 13}) {
          std::vector<float> x(n * cols);
          for (float& v : x) v = g(rng);
          std::vector<uint8_t> flags(n);
          for (int k = 0; k < n; ++k) flags[k] = static_cast<uint8_t>((k * 5 + n + rows) % 3);
          std::vector<float> y(n * rows);
          kernels::matmul(w.view, x.data(), n, y.data(), flags.data());
          // The activations as the reference takes them.
          std::vector<float> xr(x);
          std::vector<uint16_t> xb(x.size());
          for (size_t i = 0; i < x.size(); ++i) {
            if (t == GgmlType::F16) xr[i] = fp16_to_fp32(fp32_to_fp16(x[i]));
            xb[i] = fp32_to_bf16(x[i]);
          }
          int bad = 0;
          for (int k = 0; k < n && bad < 3; ++k)
            for (int64_t r = 0; r < rows && bad < 3; ++r) {
              const float ref = kernels::dot_float_reference(w.view, r, xr.data() + k * cols, xb.data() + k * cols, flags[k]);
              if (std::memcmp(&ref, &y[k * rows + r], 4) != 0) {
                ADD_FAILURE() << gguf::type_name(t) << " rows " << rows << " cols " << cols << " tokens " << n << ": token " << k << " (flag "
                              << int(flags[k]) << ") row " << r << " reference " << ref << " got " << y[k * rows + r];
                ++bad;
              }
            }
        }
      }
}

TEST(KernelsMatmulFloat, VectorRoundingEqualsScalar) {
  std::vector<float> x = {0.f, -0.f, 1.f, -1.f, 65504.f, 65520.f, 1e9f, -1e9f, 6.1e-5f, 5.96e-8f, 2.98e-8f, 1e-40f, -1e-45f,
                          std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(), 1.00048828125f,
                          1.00146484375f, 3.3895314e38f, 1.0039062f, 1.0117188f};
  uint32_t snan = 0x7f800001;
  float f;
  std::memcpy(&f, &snan, 4);
  x.push_back(f);
  std::mt19937 rng(37);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 4000; ++i) {
    const uint32_t b = bits(rng);
    std::memcpy(&f, &b, 4);
    x.push_back(f);
  }
  std::vector<float> r(x.size());
  std::vector<uint16_t> b(x.size());
  kernels::round_to_f16(x.data(), r.data(), static_cast<int64_t>(x.size()));
  kernels::convert_to_bf16(x.data(), b.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    const float rs = fp16_to_fp32(fp32_to_fp16(x[i]));
    EXPECT_EQ(0, std::memcmp(&rs, &r[i], 4)) << "f16 of " << x[i] << " (index " << i << ")";
    EXPECT_EQ(fp32_to_bf16(x[i]), b[i]) << "bf16 of " << x[i] << " (index " << i << ")";
  }
}

}  // namespace
}  // namespace pdserve
