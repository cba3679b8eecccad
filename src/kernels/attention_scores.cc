#include "kernels/attention_scores.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "base/fp16.h"
#include "kernels/quants.h"

namespace pdserve::kernels {

void read_k_row(const KvLayerView& kv, int64_t slot, int kv_head, float* out) {
  const int64_t row = slot * kv.n_kv_heads + kv_head;
  const int d = kv.head_dim;
  switch (kv.dtype) {
    case KvDtype::F32:
      std::memcpy(out, static_cast<const float*>(kv.k) + row * d, d * sizeof(float));
      return;
    case KvDtype::F16: {
      const auto* k = static_cast<const uint16_t*>(kv.k) + row * d;
      for (int i = 0; i < d; ++i) out[i] = fp16_to_fp32(k[i]);
      return;
    }
    case KvDtype::BF16: {
      const auto* k = static_cast<const uint16_t*>(kv.k) + row * d;
      for (int i = 0; i < d; ++i) out[i] = bf16_to_fp32(k[i]);
      return;
    }
    case KvDtype::Q8_0:
    case KvDtype::Q4_0: {
      const auto* k = static_cast<const uint8_t*>(kv.k) + row * kv_row_bytes(kv.dtype, d);
      dequantize(kv.dtype == KvDtype::Q8_0 ? gguf::GgmlType::Q8_0 : gguf::GgmlType::Q4_0, k, out, d);
      return;
    }
  }
}

void attention_mass_group(const float* q, int n_q, const KvLayerView& kv, int kv_head, const int32_t* block_table,
                          int n_keys, float scale, float* mass) {
  if (n_keys <= 0 || n_q <= 0) return;
  const int d = kv.head_dim;
  thread_local std::vector<float> scores;
  scores.resize(static_cast<size_t>(n_q) * n_keys);
  float k[kMaxHeadDim];
  for (int p = 0; p < n_keys; ++p) {
    const int64_t slot = static_cast<int64_t>(block_table[p / kv.block_size]) * kv.block_size + p % kv.block_size;
    read_k_row(kv, slot, kv_head, k);  // once for the whole group
    for (int h = 0; h < n_q; ++h) {
      const float* qh = q + static_cast<int64_t>(h) * d;
      float s = 0.f;
      for (int i = 0; i < d; ++i) s += qh[i] * k[i];
      scores[static_cast<size_t>(h) * n_keys + p] = s * scale;
    }
  }
  for (int h = 0; h < n_q; ++h) {
    float* s = &scores[static_cast<size_t>(h) * n_keys];
    float mx = -INFINITY;
    for (int p = 0; p < n_keys; ++p) mx = std::max(mx, s[p]);
    double sum = 0.0;
    for (int p = 0; p < n_keys; ++p) {
      s[p] = std::exp(s[p] - mx);
      sum += s[p];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int p = 0; p < n_keys; ++p) mass[p] += s[p] * inv;
  }
}

}  // namespace pdserve::kernels
