// The scalar path of the quantised matmul: vec_dot_scalar per (row, token).
#include "kernels/qgemm.h"
#include "kernels/quants.h"

namespace pdserve::kernels {

namespace {
void gemm_scalar(const WeightView& w, const uint8_t* act, int64_t act_stride, int n_tok, int64_t r0, int64_t r1, float* y,
                 int64_t ldy, QOrder order) {
  const auto* base = static_cast<const uint8_t*>(w.data);
  for (int64_t r = r0; r < r1; ++r)
    for (int t = 0; t < n_tok; ++t)
      y[t * ldy + r] = vec_dot_scalar(w.type, base + r * w.row_bytes, act + t * act_stride, w.cols, order);
}
}  // namespace

QKernel qgemm_scalar(gguf::GgmlType t, QOrder) {
  QKernel k;
  if (is_quantized(t)) k.gemm = gemm_scalar;
  return k;
}

}  // namespace pdserve::kernels
