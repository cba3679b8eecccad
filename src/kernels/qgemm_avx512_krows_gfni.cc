// The K-quant row kernels (qgemm_avx512_krows.inc) built with GFNI (-mgfni): only called,
// through qgemm_avx512_krows.cc, on a CPU that has it (gfni_enabled()).
#define PDS_KROWS_GFNI 1
#include "kernels/qgemm_avx512_krows.inc"

namespace pdserve::kernels::avx512 {

QKernel kquant_row_kernel_gfni(gguf::GgmlType t, QOrder order, WeightLayout layout, bool perm) {
  return row_kernel(t, order, layout, perm);
}

}  // namespace pdserve::kernels::avx512
