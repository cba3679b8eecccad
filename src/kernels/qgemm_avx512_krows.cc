// The K-quant row kernels (qgemm_avx512_krows.inc) for every AVX-512 VNNI CPU, and the
// entry point that hands calls to their GFNI build (qgemm_avx512_krows_gfni.cc) while
// gfni_enabled().
#define PDS_KROWS_GFNI 0
#include "kernels/qgemm_avx512_krows.inc"

namespace pdserve::kernels::avx512 {

QKernel kquant_row_kernel(gguf::GgmlType t, QOrder order, WeightLayout layout) { return row_kernel(t, order, layout); }

}  // namespace pdserve::kernels::avx512
