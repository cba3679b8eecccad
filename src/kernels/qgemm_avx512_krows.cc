// The K-quant row kernels (qgemm_avx512_krows.inc) for every AVX-512 VNNI CPU, and the
// entry point that picks their GFNI build (qgemm_avx512_krows_gfni.cc) while gfni_enabled()
// and the pack form prefer_vpermt2w() names (cpu_features.h).
#define PDS_KROWS_GFNI 0
#include "kernels/qgemm_avx512_krows.inc"

namespace pdserve::kernels::avx512 {

QKernel kquant_row_kernel(gguf::GgmlType t, QOrder order, WeightLayout layout) {
  const bool perm = prefer_vpermt2w();
  return gfni_enabled() ? kquant_row_kernel_gfni(t, order, layout, perm) : row_kernel(t, order, layout, perm);
}

}  // namespace pdserve::kernels::avx512
