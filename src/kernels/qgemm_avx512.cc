// AVX-512 VNNI quantised matmul kernels (VPDPBUSD on 256-bit vectors, AVX512VL); body in
// qgemm_simd.inc.
#include <cstring>
#define QG_VNNI 1
#define QG_NS avx512vnni
#include "kernels/qgemm_simd.inc"

namespace pdserve::kernels {

QGemmFn qgemm_avx512vnni(gguf::GgmlType t) { return avx512vnni::table(t); }

}  // namespace pdserve::kernels
