// AVX2 + FMA quantised matmul kernels — NOT WRITTEN YET: the table is empty, so matmul() falls
// back to the next path down (ending at the scalar path, qgemm_scalar.cc), and
// kernels_quant_test reports this path as skipped. A kernel added here must reproduce
// quants.h vec_dot_scalar bit for bit (kernels_quant_test checks it).
#include "kernels/qgemm.h"

namespace pdserve::kernels {

QGemmFn qgemm_avx2(gguf::GgmlType) { return nullptr; }

}  // namespace pdserve::kernels
