// Internal helpers shared by ggml's reference quantisers (ggml/src/ggml-quants.c), used by
// quant_kquants.cc and quant_lowbit.cc.
#pragma once

#include <cstdint>
#include <cstring>

#include "gguf/ggml_types.h"

namespace pdserve::kernels {

/// ggml's nearest_int: round to nearest, ties to even, for |fval| <= 4194303.
inline int nearest_int(float fval) {
  float val = fval + 12582912.f;
  int i;
  std::memcpy(&i, &val, sizeof(int));
  return (i & 0x007fffff) - 0x00400000;
}

/// ggml's make_qkx2_quants: L[0..n) in [0, nmax] and the scale (return) and −min
/// (*the_min) of an affine fit x ≈ scale·L − the_min, searched over nstep + 1 scales.
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min, uint8_t* Laux,
                       float rmin, float rdelta, int nstep, bool use_mad);

/// Super-block `i` of a Q2_K / Q3_K / IQ4_XS row (quant_lowbit.cc) as signed values v
/// (Q2_K: q 0..3; Q3_K: q − 4; IQ4_XS: kvalues_iq4nl[q]) in element order, with the scale of
/// each sub-block of 16 (IQ4_XS: ls − 32 of its sub-block of 32, twice), Q2_K's mins, d and dmin.
void unpack_lowbit(gguf::GgmlType t, const void* row, int64_t i, int8_t* v, int* sc, int* mn, float* d, float* dmin);

}  // namespace pdserve::kernels
