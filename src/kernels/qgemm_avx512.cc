// The AVX-512 VNNI kernel table: pair kernels for ggml's vec_dot orders, row kernels for
// llama.cpp's repacked Q4_0 / Q4_K orders and for the K-quants, and the kernels that read
// WeightLayout::kTiles16 in place (Q4_0, Q8_0, Q4_K, Q5_K, Q6_K; see qgemm_avx512.h).
#include "kernels/qgemm_avx512.h"

namespace pdserve::kernels {

QKernel qgemm_avx512vnni(gguf::GgmlType t, QOrder order) {
  using gguf::GgmlType;
  switch (t) {
    case GgmlType::Q4_0:
      return order == QOrder::kVecDot ? avx512::legacy_pair_kernel(t) : avx512::q4_0_row_kernel();
    case GgmlType::Q8_0: case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1:
      return avx512::legacy_pair_kernel(t);
    case GgmlType::Q4_K:
      if (order == QOrder::kTiled) return {};  // the AVX2 kernel (matmul.cc falls back)
      return order == QOrder::kVecDot ? avx512::kquant_pair_kernel(t) : avx512::q4_K_row_kernel(order);
    case GgmlType::Q5_K:
      return avx512::kquant_row_kernel(t, order, WeightLayout::kRows);
    case GgmlType::Q6_K:
      if (order == QOrder::kTiled) return {};
      return avx512::kquant_pair_kernel(t);
    default:
      return {};
  }
}

QKernel qgemm_avx512vnni_layout(gguf::GgmlType t, QOrder order, WeightLayout layout) {
  const bool repacked = order == QOrder::kRepackGemv || order == QOrder::kRepackGemm;
  if (layout == WeightLayout::kTiles16 && repacked && t == gguf::GgmlType::Q4_0) return avx512::q4_0_tiles16_kernel();
  if (layout == WeightLayout::kTiles16 && t == gguf::GgmlType::Q8_0) return avx512::q8_0_tiles16_kernel();
  if (layout == WeightLayout::kTiles16 && repacked && t == gguf::GgmlType::Q4_K) return avx512::q4_K_tiles16_kernel(order);
  if (layout == WeightLayout::kTiles16 && (t == gguf::GgmlType::Q5_K || t == gguf::GgmlType::Q6_K))
    return avx512::kquant_row_kernel(t, order, layout);
  return {};
}

}  // namespace pdserve::kernels
