// The SIMD quantised matmul paths against the scalar path, bit for bit, at the edges of
// their tiles: row counts that are not multiples of the row tiles (4, 8, 16) or the
// row chunks (16, 64), token counts around the token tiles (pairs, 3 pairs, 4 pairs, 16
// tokens), an odd number of 32-blocks per row (a padded activation pair), runs of
// tokens with different reduction orders, several thread counts, and weights made of
// random bytes (every quant value and scale, Q8_0's −128 and Q6_K's negative scales)
// against activations that all quantise to ±127.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/fp16.h"
#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "kernels/parallel.h"
#include "kernels/quants.h"
#include "kernels/weight_layout.h"

namespace pdserve {
namespace {

using gguf::GgmlType;

const GgmlType kTypes[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0,
                           GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};
const kernels::Isa kIsas[] = {kernels::Isa::kAvx2, kernels::Isa::kAvx512Vnni};

bool is_k(GgmlType t) { return t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K; }

/// Offsets of the f16 scale fields in a block (set to finite values in raw-byte weights).
std::vector<int> f16_fields(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_1: case GgmlType::Q5_1: case GgmlType::Q4_K: case GgmlType::Q5_K: return {0, 2};
    case GgmlType::Q6_K: return {208};
    default: return {0};
  }
}

struct Weights {
  std::vector<uint8_t> bytes;
  kernels::WeightView view;
};

/// rows × cols of type t: quantised from random floats, or random bytes with finite scales.
Weights make_weights(GgmlType t, int64_t rows, int64_t cols, bool raw, std::mt19937& rng) {
  Weights w;
  const int64_t rb = gguf::row_bytes(t, cols);
  w.bytes.resize(rb * rows);
  if (raw) {
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> scale(-0.02f, 0.02f);
    for (auto& b : w.bytes) b = static_cast<uint8_t>(byte(rng));
    const int64_t block = gguf::row_bytes(t, is_k(t) ? 256 : 32);
    for (int64_t off = 0; off < static_cast<int64_t>(w.bytes.size()); off += block)
      for (int f : f16_fields(t)) {
        const uint16_t h = fp32_to_fp16(scale(rng));
        std::memcpy(&w.bytes[off + f], &h, 2);
      }
  } else {
    std::normal_distribution<float> g(0.f, 1.f);
    std::vector<float> f(rows * cols);
    for (float& v : f) v = g(rng);
    kernels::quantize(t, f.data(), w.bytes.data(), rows * cols);
  }
  w.view = {w.bytes.data(), t, rows, cols, rb};
  return w;
}

/// Activations: normal values, or ±1 (every value quantises to ±127).
std::vector<float> make_x(int n, int64_t cols, bool saturated, std::mt19937& rng) {
  std::vector<float> x(n * cols);
  std::normal_distribution<float> g(0.f, 1.f);
  std::bernoulli_distribution coin(0.5);
  for (float& v : x) v = saturated ? (coin(rng) ? 1.f : -1.f) : g(rng);
  return x;
}

/// Flags: all 0 (decode), all 1 (prompt GEMM), mixed runs of 0 / 1 / 2, (3) those mixed
/// runs with kGemmTiledBatch on runs of two tokens (the K-quants' tiled order), or (4) all
/// 1 | kGemmTiledBatch (a prompt's micro-batch of >= 8 tokens).
std::vector<uint8_t> make_flags(int n, int pattern) {
  std::vector<uint8_t> f(n);
  for (int k = 0; k < n; ++k)
    f[k] = pattern == 0   ? 0
           : pattern == 1 ? 1
           : pattern == 4 ? static_cast<uint8_t>(1 | kernels::kGemmTiledBatch)
                          : static_cast<uint8_t>((k / 3 + k % 2) % 3);
  if (pattern == 3)
    for (int k = 0; k < n; ++k) f[k] = static_cast<uint8_t>(f[k] | ((k / 2) % 2 ? kernels::kGemmTiledBatch : 0));
  return f;
}

/// Every available SIMD path gives the scalar path's bits.
void expect_simd_same_as_scalar(const Weights& w, const std::vector<float>& x, int n, const std::vector<uint8_t>& flags,
                                const std::string& what) {
  std::vector<float> ys(n * w.view.rows);
  kernels::matmul(w.view, x.data(), n, ys.data(), flags.data(), kernels::Isa::kScalar);
  for (kernels::Isa isa : kIsas) {
    if (!kernels::isa_available(isa)) continue;
    std::vector<float> yi(n * w.view.rows, -1.f);
    kernels::matmul(w.view, x.data(), n, yi.data(), flags.data(), isa);
    int bad = 0;
    for (size_t i = 0; i < ys.size() && bad < 3; ++i)
      if (std::memcmp(&ys[i], &yi[i], 4) != 0) {
        ADD_FAILURE() << kernels::isa_name(isa) << " " << what << ": token " << i / w.view.rows << " row " << i % w.view.rows
                      << " scalar " << ys[i] << " simd " << yi[i];
        ++bad;
      }
  }
}

TEST(KernelsQgemmTiles, EverySimdPathEqualsScalarAtTileEdges) {
  std::mt19937 rng(17);
  for (GgmlType t : kTypes) {
    const std::vector<int64_t> cols_list = is_k(t) ? std::vector<int64_t>{256, 768} : std::vector<int64_t>{800, 512};
    for (int64_t cols : cols_list)
      for (int64_t rows : {1, 17, 40, 130}) {
        const Weights w = make_weights(t, rows, cols, rows == 40, rng);
        for (int n : {1, 2, 3, 16, 17, 33})
          for (int pattern : {1, 2, 3}) {
            if (n == 1 && pattern == 2) continue;
            const std::vector<float> x = make_x(n, cols, n == 17, rng);
            expect_simd_same_as_scalar(w, x, n, make_flags(n, n == 1 ? 0 : pattern),
                                       gguf::type_name(t) + " rows " + std::to_string(rows) + " cols " + std::to_string(cols) + " tokens " +
                                           std::to_string(n) + " flags " + std::to_string(pattern));
          }
      }
  }
}

// Raw random weight bytes against saturated activations, every token count of a tile.
TEST(KernelsQgemmTiles, ExtremeValuesEqualScalar) {
  std::mt19937 rng(23);
  for (GgmlType t : kTypes) {
    const int64_t cols = is_k(t) ? 512 : 224, rows = 48;
    const Weights w = make_weights(t, rows, cols, true, rng);
    for (int n = 1; n <= 18; ++n) {
      const std::vector<float> x = make_x(n, cols, true, rng);
      for (int pattern : {2, 3})
        expect_simd_same_as_scalar(w, x, n, make_flags(n, pattern), gguf::type_name(t) + " tokens " + std::to_string(n));
    }
  }
}

// Results do not depend on how many threads split the rows and tokens.
TEST(KernelsQgemmTiles, ThreadCountDoesNotChangeResults) {
  std::mt19937 rng(29);
  const int saved = kernels::compute_threads();
  for (GgmlType t : kTypes) {
    const Weights w = make_weights(t, 272, 512, false, rng);
    for (int n : {1, 9, 35}) {
      const std::vector<float> x = make_x(n, 512, false, rng);
      const std::vector<uint8_t> flags = make_flags(n, 2);
      std::vector<float> ref(n * 272), y(n * 272);
      kernels::set_compute_threads(1);
      kernels::matmul(w.view, x.data(), n, ref.data(), flags.data());
      for (int threads : {2, 3}) {
        kernels::set_compute_threads(threads);
        kernels::matmul(w.view, x.data(), n, y.data(), flags.data());
        EXPECT_EQ(0, std::memcmp(ref.data(), y.data(), ref.size() * 4)) << gguf::type_name(t) << " tokens " << n << " threads " << threads;
      }
    }
  }
  kernels::set_compute_threads(saved);
}

// Q4_0, Q8_0, Q4_K, Q5_K and Q6_K rewritten into 16-row tiles (the layout Model::load gives the private copy
// on an AVX-512 VNNI CPU): every path (the tile kernels; scalar and AVX2 through the row
// conversion), alone and fused with a row-layout matrix, gives the bits of the scalar
// path on the file's layout; rows and dequantised rows come back byte for byte.
TEST(KernelsQgemmTiles, Tiles16GiveTheRowLayoutsBits) {
  std::mt19937 rng(31);
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K})
  for (int64_t cols : is_k(t) ? std::vector<int64_t>{256, 768} : std::vector<int64_t>{32, 224, 512})
    for (int64_t rows : {16, 48, 144}) {
      const Weights w = make_weights(t, rows, cols, rows == 48, rng);
      Weights tiled = w;
      tiled.view.data = tiled.bytes.data();
      ASSERT_TRUE(kernels::can_tile16(tiled.view));
      kernels::tile16_in_place(tiled.view);
      ASSERT_EQ(tiled.view.layout, kernels::WeightLayout::kTiles16);
      ASSERT_NE(0, std::memcmp(w.bytes.data(), tiled.bytes.data(), w.bytes.size())) << "the layout did not change";
      std::vector<uint8_t> back(w.bytes.size());
      kernels::untile16_rows(tiled.view, 0, rows, back.data());
      EXPECT_EQ(back, w.bytes) << gguf::type_name(t) << " rows " << rows << " cols " << cols;
      std::vector<float> d0(cols), d1(cols);
      for (int64_t r : {int64_t{0}, rows / 2 + 1, rows - 1}) {
        kernels::dequantize_row(w.view, r, d0.data());
        kernels::dequantize_row(tiled.view, r, d1.data());
        EXPECT_EQ(0, std::memcmp(d0.data(), d1.data(), cols * 4)) << "dequantised row " << r;
      }
      for (int n : {1, 2, 5, 16, 17, 35})
        for (int pattern : {0, 1, 2, 3}) {  // 3: micro-batches of >= 8 tokens (Q5_K's kTiled order)
          const std::vector<float> x = make_x(n, cols, n == 17, rng);
          const std::vector<uint8_t> flags = make_flags(n, pattern);
          std::vector<float> want(n * rows);
          kernels::matmul(w.view, x.data(), n, want.data(), flags.data(), kernels::Isa::kScalar);
          for (kernels::Isa isa : {kernels::Isa::kScalar, kernels::Isa::kAvx2, kernels::Isa::kAvx512Vnni}) {
            if (!kernels::isa_available(isa)) continue;
            const std::string what = gguf::type_name(t) + " " + kernels::isa_name(isa) + " rows " + std::to_string(rows) + " cols " +
                                     std::to_string(cols) + " tokens " + std::to_string(n) + " flags " + std::to_string(pattern);
            std::vector<float> got(n * rows, -1.f);
            kernels::matmul(tiled.view, x.data(), n, got.data(), flags.data(), isa);
            EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * 4)) << what;
            // Fused with a row-layout matrix of the same type (they share packed activations).
            std::vector<float> y_tiled(n * rows, -1.f), y_rows(n * rows, -1.f);
            const kernels::MatmulJob jobs[2] = {{&tiled.view, y_tiled.data()}, {&w.view, y_rows.data()}};
            kernels::matmul_multi(jobs, 2, x.data(), n, flags.data(), isa);
            EXPECT_EQ(0, std::memcmp(want.data(), y_tiled.data(), want.size() * 4)) << "fused tiled " << what;
            EXPECT_EQ(0, std::memcmp(want.data(), y_rows.data(), want.size() * 4)) << "fused rows " << what;
          }
        }
    }
}

// On a CPU with AMX-INT8 the Q4_K (both repacked orders), Q4_0, Q5_K (tiled order) and Q6_K
// matmuls of 16-token groups run on tiles (qgemm_avx512_amx.cc): with AMX on and off, every token count around the 16-token groups and the 4-group passes,
// row ranges of one and several 16-row tiles, 1 and 2 threads, raw and quantised weights,
// normal and saturated activations give the scalar path's bits.
TEST(KernelsQgemmTiles, AmxGivesTheScalarBits) {
  if (!kernels::amx_available()) GTEST_SKIP() << "no AMX-INT8 on this CPU (or Linux did not grant the tile state)";
  std::mt19937 rng(37);
  const int saved = kernels::compute_threads();
  for (GgmlType type : {GgmlType::Q4_K, GgmlType::Q4_0, GgmlType::Q5_K, GgmlType::Q6_K})
  for (int64_t cols : {256, 1280})
    for (int64_t rows : {16, 80, 272}) {
      const bool raw = rows == 80;
      Weights w = make_weights(type, rows, cols, raw, rng);
      kernels::tile16_in_place(w.view);
      ASSERT_EQ(w.view.layout, kernels::WeightLayout::kTiles16);
      for (int n : {15, 16, 17, 31, 32, 48, 63, 64, 65, 80, 130}) {
        const std::vector<float> x = make_x(n, cols, n % 2 == 1, rng);
        for (int pattern : {0, 1, 2, 4}) {  // decode (GEMV order), prompt (GEMM), mixed runs, prompt micro-batch (Q5_K: tiled)
          const std::vector<uint8_t> flags = make_flags(n, pattern);
          std::vector<float> want(n * rows);
          kernels::matmul(w.view, x.data(), n, want.data(), flags.data(), kernels::Isa::kScalar);
          for (int threads : {1, 2}) {
            kernels::set_compute_threads(threads);
            for (bool amx : {true, false}) {
              ASSERT_EQ(amx, kernels::force_amx(amx));
              std::vector<float> got(n * rows, -1.f);
              kernels::matmul(w.view, x.data(), n, got.data(), flags.data(), kernels::Isa::kAvx512Vnni);
              EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * 4))
                  << gguf::type_name(type) << (amx ? " amx" : " vnni") << " rows " << rows << " cols " << cols << " tokens " << n << " flags " << pattern
                  << " threads " << threads;
            }
          }
        }
      }
    }
  kernels::force_amx(true);
  kernels::set_compute_threads(saved);
}

// The Q5_K and Q6_K row kernels (qgemm_avx512_krows.inc) come in forms a CPU picks from: built
// with GFNI or without, and the chunk-pair pack by VPERMT2W or by a shift and a blend. Every
// form (each one this CPU can run), with AMX on and off (Q5_K's tiled order), decode,
// prompt and mixed flags, both layouts (Q5_K), 1 and 2 threads, raw and quantised weights:
// the scalar path's bits.
TEST(KernelsQgemmTiles, KQuantRowKernelFormsGiveTheScalarBits) {
  if (!kernels::isa_available(kernels::Isa::kAvx512Vnni)) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  std::mt19937 rng(41);
  const int saved = kernels::compute_threads();
  const bool saved_perm = kernels::prefer_vpermt2w(), saved_gfni = kernels::gfni_enabled(), saved_amx = kernels::amx_enabled();
  const bool has_gfni = kernels::force_gfni(true);
  int forms_run = 0;
  for (GgmlType type : {GgmlType::Q5_K, GgmlType::Q6_K})
    for (bool tiles : {true, false}) {
      if (type == GgmlType::Q6_K && !tiles) continue;  // Q6_K's row kernels read tiles only
      for (int64_t rows : {16, 48}) {
        const int64_t cols = rows == 16 ? 256 : 768;
        Weights w = make_weights(type, rows, cols, rows == 48, rng);
        if (tiles) kernels::tile16_in_place(w.view);
        for (int n : {1, 3, 8, 9, 17}) {
          const std::vector<float> x = make_x(n, cols, n == 9, rng);
          for (int pattern : {0, 1, 3, 4}) {
            const std::vector<uint8_t> flags = make_flags(n, pattern);
            std::vector<float> want(n * rows);
            kernels::matmul(w.view, x.data(), n, want.data(), flags.data(), kernels::Isa::kScalar);
            for (int threads : {1, 2})
              for (bool gfni : {false, true})
                for (bool perm : {false, true})
                  for (bool amx : {false, true}) {
                    if (gfni && !has_gfni) continue;
                    kernels::set_compute_threads(threads);
                    kernels::force_gfni(gfni);
                    kernels::force_vpermt2w(perm);
                    kernels::force_amx(amx);
                    std::vector<float> got(n * rows, -1.f);
                    kernels::matmul(w.view, x.data(), n, got.data(), flags.data(), kernels::Isa::kAvx512Vnni);
                    ++forms_run;
                    EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * 4))
                        << gguf::type_name(type) << (tiles ? " tiles16" : " rows") << (gfni ? " gfni" : "") << (perm ? " vpermt2w" : " blend")
                        << (amx ? " amx" : "") << " rows " << rows << " tokens " << n << " flags " << pattern << " threads " << threads;
                  }
          }
        }
      }
    }
  EXPECT_GT(forms_run, 0);
  kernels::force_gfni(saved_gfni);
  kernels::force_vpermt2w(saved_perm);
  kernels::force_amx(saved_amx);
  kernels::set_compute_threads(saved);
}

}  // namespace
}  // namespace pdserve
