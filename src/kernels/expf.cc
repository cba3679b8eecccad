#include "kernels/expf.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace pdserve::kernels {

const uint64_t ExpfConstants::kTab[32] = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51, 0x3fef72b83c7d517b, 0x3fef54873168b9aa,
    0x3fef387a6e756238, 0x3fef1e9df51fdee1, 0x3fef06fe0a31b715, 0x3feef1a7373aa9cb, 0x3feedea64c123422, 0x3feece086061892d,
    0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429, 0x3feea47eb03a5585, 0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74,
    0x3feea11473eb0187, 0x3feea589994cce13, 0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d,
    0x3feee89f995ad3ad, 0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069, 0x3fef5818dcfba487, 0x3fef7c97337b9b5f,
    0x3fefa4afa2a490da, 0x3fefd0765b6e4540,
};

float expf_glibc(float x) {
  using C = ExpfConstants;
  uint32_t ux;
  std::memcpy(&ux, &x, sizeof ux);
  const uint32_t abstop = (ux >> 20) & 0x7ff;
  if (abstop >= C::kSpecialTop) {  // |x| >= 88, or NaN / inf
    if (ux == 0xff800000u) return 0.0f;                                   // −inf
    if (abstop >= 0x7f8) return x + x;                                    // NaN, +inf
    if (x > 0x1.62e42ep6f) return std::numeric_limits<float>::infinity();  // overflow
    if (x < -0x1.9fe368p6f) return 0.0f;                                  // underflow
    if (x < -0x1.9d1d9ep6f) return std::numeric_limits<float>::denorm_min();  // 0x1.4p-75f²
  }
  const double xd = x;
  const double kds = std::fma(C::kInvLn2N, xd, C::kShift);
  uint64_t ki;
  std::memcpy(&ki, &kds, sizeof ki);
  const double kd = kds - C::kShift;
  const double r = std::fma(C::kInvLn2N, xd, -kd);
  const uint64_t t = C::kTab[ki & 31] + (ki << 47);
  double s;
  std::memcpy(&s, &t, sizeof s);
  const double z = std::fma(r, C::kC0, C::kC1);
  const double r2 = r * r;
  double y = std::fma(r, C::kC2, 1.0);
  y = std::fma(z, r2, y);
  y = y * s;
  return static_cast<float>(y);
}

}  // namespace pdserve::kernels
