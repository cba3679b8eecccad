// expf with glibc's exact results, so that the attention softmax (llama.cpp's CPU flash
// attention calls libm expf once per key) is bit-identical on every path and every machine.
#pragma once

#include <cstdint>

namespace pdserve::kernels {

/// glibc's expf (sysdeps/ieee754/flt-32/e_expf.c, glibc ≥ 2.28; Szabolcs Nagy's
/// table-driven algorithm: x·32/ln2 = k + r, 2^(k/32) from a 32-entry table, a cubic in r,
/// evaluated in double) as glibc's x86-64 FMA build (__expf_fma, picked by IFUNC on CPUs
/// with FMA) computes it: the multiply-adds fused where that build fuses them, the special
/// cases (−inf → 0, NaN → NaN, overflow → +inf, x < −103.97 → 0, −103.97 ≤ x < −103.28 →
/// the smallest subnormal) as glibc returns them. Tests check it against the libm expf of
/// the machine, value by value.
float expf_glibc(float x);

/// The double-precision constants of expf_glibc, for the SIMD versions (attention_simd.inc).
struct ExpfConstants {
  static constexpr double kInvLn2N = 0x1.71547652b82fep+5;  // 32 / ln 2
  static constexpr double kShift = 0x1.8p+52;               // round-to-int shift
  static constexpr double kC0 = 0x1.c6af84b912394p-20;      // poly_scaled
  static constexpr double kC1 = 0x1.ebfce50fac4f3p-13;
  static constexpr double kC2 = 0x1.62e42ff0c52d6p-6;
  /// tab[i] = bits(2^(i/32)) − (i << 47)
  static const uint64_t kTab[32];
  /// First bits-of-|x| >> 20 value (that of 88.0f) that takes glibc's special-case branch.
  static constexpr uint32_t kSpecialTop = 0x42b;
};

}  // namespace pdserve::kernels
