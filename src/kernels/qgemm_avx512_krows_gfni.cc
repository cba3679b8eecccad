// The K-quant row kernels (qgemm_avx512_krows.inc) built with GFNI (-mgfni): only called,
// through qgemm_avx512_krows.cc, on a CPU that has it (gfni_enabled()).
#define PDS_KROWS_GFNI 1
#include "kernels/qgemm_avx512_krows.inc"

namespace pdserve::kernels::avx512 {

QGemmFn kquant_row_gemm_gfni(gguf::GgmlType t, QOrder order, WeightLayout layout) { return row_kernel(t, order, layout).gemm; }

}  // namespace pdserve::kernels::avx512
