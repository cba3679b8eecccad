// AVX2 + FMA quantised matmul kernels (maddubs/madd integer dots); body in qgemm_simd.inc.
#include <cstring>
#define QG_VNNI 0
#define QG_NS avx2
#include "kernels/qgemm_simd.inc"

namespace pdserve::kernels {

QKernel qgemm_avx2(gguf::GgmlType t, QOrder) {
  QKernel k;
  k.gemm = avx2::table(t);
  return k;
}

}  // namespace pdserve::kernels
