// Quantised (Q8_0, Q4_0) and BF16 KV caches: their row formats and the scalar reference of
// their paged attention, with the numerics of llama.cpp's CPU flash attention for such a
// cache (ggml-cpu/ops.cpp, ggml_compute_forward_flash_attn_ext_f16_one_chunk, llama.cpp
// build 11669 / ggml 0.27.0). That function is the only path the reference takes for a
// K/V type other than F32/F16 — prefill and decode alike: its split-KV decode path and
// its tiled prefill path both require kv_is_f32_or_f16. Per query row:
//   * Q is converted with the K type's vec_dot_type from_float (Q8_0 for Q8_0 and Q4_0 K:
//     the x86 quantize_row_q8_0; BF16 for BF16 K: round to nearest even), and each key's
//     score is that type's vec_dot (ggml_vec_dot_q8_0_q8_0 / q4_0_q8_0 / bf16), times scale;
//   * V not F16: the row is converted to f32 with the type's to_float (dequantize_row_*,
//     bf16 → f32) and accumulated into an f32 VKQ32: on a new maximum VKQ32 *= ms
//     (ggml_vec_scale_f32), then VKQ32 = fma(v, vs, VKQ32) (ggml_vec_mad_f32, FMA lanes);
//     S = S*ms + vs (contracted: one fma); out = VKQ32 * (1/S).
// The x86 (haswell backend) orders of the dots, from the library the reference runs:
//   * Q8_0/Q4_0 · Q8_0: exact int32 sums over each block's 4-value groups g = 0..7, one
//     8-lane f32 accumulator acc[g] = fma(d_k*d_q, sum_g, acc[g]) over the blocks in
//     order, then hsum_float_8 (quants.h) — the contract of vec_dot_legacy_scalar;
//   * BF16 · BF16: 32-value chunks into four 8-lane FMA accumulators c0..c3 (element
//     32i + 8a + j in c_a lane j), folded (c0+c2)+(c1+c3), then 8 → 4 → 2 → 1 as
//     hsum_float_8, into a double; the head_dim % 32 leftovers are f32 products added to
//     that double one by one (ggml_float); the result rounded to float.
#include <cmath>
#include <cstring>

#include "base/fp16.h"
#include "kernels/attention.h"
#include "kernels/ops.h"
#include "kernels/expf.h"
#include "kernels/quant_types.h"
#include "kernels/quants.h"

namespace pdserve::kernels {

int64_t kv_row_bytes(KvDtype dtype, int head_dim) {
  switch (dtype) {
    case KvDtype::F32: return int64_t{head_dim} * 4;
    case KvDtype::F16:
    case KvDtype::BF16: return int64_t{head_dim} * 2;
    case KvDtype::Q8_0: return int64_t{head_dim} / QK8_0 * int64_t{sizeof(BlockQ8_0)};
    case KvDtype::Q4_0: return int64_t{head_dim} / QK4_0 * int64_t{sizeof(BlockQ4_0)};
  }
  return 0;
}

bool kv_dtype_fits(KvDtype dtype, int head_dim) {
  if (head_dim <= 0) return false;
  if (dtype == KvDtype::Q8_0 || dtype == KvDtype::Q4_0) return head_dim % 32 == 0;
  return true;
}

namespace {

// A row of Q8_0 blocks, each as ggml's x86 quantize_row_q8_0 (quantize_block_q8_0_x86;
// the same values as quantize_act_q8_0's ActPairQ8 rows).
void quantize_q8_0_x86(const float* x, BlockQ8_0* y, int n) {
  for (int b = 0; b < n / QK8_0; ++b) y[b].d = fp32_to_fp16(quantize_block_q8_0_x86(x + b * QK8_0, y[b].qs));
}

// 32 signed values of block b of a Q8_0 / Q4_0 row, and the block's scale.
inline float unpack_kv_block(KvDtype t, const void* row, int b, int8_t* w) {
  if (t == KvDtype::Q8_0) {
    const BlockQ8_0& x = static_cast<const BlockQ8_0*>(row)[b];
    std::memcpy(w, x.qs, QK8_0);
    return fp16_to_fp32(x.d);
  }
  const BlockQ4_0& x = static_cast<const BlockQ4_0*>(row)[b];
  for (int j = 0; j < 16; ++j) {
    w[j] = static_cast<int8_t>((x.qs[j] & 0xF) - 8);
    w[j + 16] = static_cast<int8_t>((x.qs[j] >> 4) - 8);
  }
  return fp16_to_fp32(x.d);
}

// ggml_vec_dot_q8_0_q8_0 / q4_0_q8_0 (x86 AVX2 order, see the top of the file): K row of
// type t, Q as Q8_0 blocks, d values.
float dot_q_kv(KvDtype t, const void* krow, const BlockQ8_0* q, int d) {
  float acc[8] = {};
  int8_t w[32];
  for (int b = 0; b < d / 32; ++b) {
    const float dk = unpack_kv_block(t, krow, b, w);
    const float s = dk * fp16_to_fp32(q[b].d);
    for (int g = 0; g < 8; ++g) {
      int32_t sum = 0;
      for (int i = 4 * g; i < 4 * g + 4; ++i) sum += int32_t{w[i]} * int32_t{q[b].qs[i]};
      acc[g] = std::fma(s, static_cast<float>(sum), acc[g]);
    }
  }
  return hsum_float_8(acc);
}

// ggml_vec_dot_bf16 (x86 AVX2 order, see the top of the file); qb: Q rounded to bf16, as f32.
float dot_bf16(const float* qb, const uint16_t* k, int d) {
  const int np = d & ~31;
  double sum = 0.0;
  float c[4][8] = {};
  for (int i = 0; i < np; i += 32)
    for (int a = 0; a < 4; ++a)
      for (int j = 0; j < 8; ++j) c[a][j] = std::fma(bf16_to_fp32(k[i + 8 * a + j]), qb[i + 8 * a + j], c[a][j]);
  float t[8];
  for (int j = 0; j < 8; ++j) t[j] = (c[0][j] + c[2][j]) + (c[1][j] + c[3][j]);
  sum = hsum_float_8(t);
  for (int i = np; i < d; ++i) sum += static_cast<double>(bf16_to_fp32(k[i]) * qb[i]);
  return static_cast<float>(sum);
}

}  // namespace

void quantize_kv_row(KvDtype dtype, const float* x, void* row, int head_dim) {
  switch (dtype) {
    case KvDtype::F32: std::memcpy(row, x, sizeof(float) * head_dim); break;
    case KvDtype::F16:
      for (int i = 0; i < head_dim; ++i) static_cast<uint16_t*>(row)[i] = fp32_to_fp16(x[i]);
      break;
    case KvDtype::BF16:
      for (int i = 0; i < head_dim; ++i) static_cast<uint16_t*>(row)[i] = fp32_to_bf16(x[i]);
      break;
    case KvDtype::Q8_0: quantize_q8_0_x86(x, static_cast<BlockQ8_0*>(row), head_dim); break;
    case KvDtype::Q4_0: quantize_legacy(gguf::GgmlType::Q4_0, x, row, head_dim); break;  // quantize_row_q4_0_ref
  }
}

void paged_attention_quant_scalar(const float* q, const KvLayerView& kv, int kv_head, const int32_t* block_table,
                                  int n_keys, float scale, float* out, int first_key, float softcap) {
  const int d = kv.head_dim;
  if (softcap > 0.f) scale /= softcap;
  const int64_t row = kv_row_bytes(kv.dtype, d);
  const bool bf16 = kv.dtype == KvDtype::BF16;
  BlockQ8_0 q8[kMaxHeadDim / QK8_0];
  float qb[kMaxHeadDim];
  if (bf16) {
    for (int i = 0; i < d; ++i) qb[i] = bf16_to_fp32(fp32_to_bf16(q[i]));
  } else {
    quantize_q8_0_x86(q, q8, d);
  }
  float acc[kMaxHeadDim], v32[kMaxHeadDim];
  for (int i = 0; i < d; ++i) acc[i] = 0.f;
  float m = -INFINITY, l = 0.f;
  for (int p = first_key; p < n_keys; ++p) {
    const int64_t slot = static_cast<int64_t>(block_table[p / kv.block_size]) * kv.block_size + p % kv.block_size;
    const int64_t off = (slot * kv.n_kv_heads + kv_head) * row;
    const uint8_t* kr = static_cast<const uint8_t*>(kv.k) + off;
    const uint8_t* vr = static_cast<const uint8_t*>(kv.v) + off;
    float s = bf16 ? dot_bf16(qb, reinterpret_cast<const uint16_t*>(kr), d) : dot_q_kv(kv.dtype, kr, q8, d);
    s *= scale;
    if (softcap > 0.f) s = softcap * tanh_cr(s);
    float ms = 1.f, vs = 1.f;
    if (s > m) {
      ms = expf_glibc(m - s);
      m = s;
      for (int i = 0; i < d; ++i) acc[i] *= ms;
    } else {
      vs = expf_glibc(s - m);
    }
    if (bf16) {
      for (int i = 0; i < d; ++i) v32[i] = bf16_to_fp32(reinterpret_cast<const uint16_t*>(vr)[i]);
    } else {
      int8_t w[32];
      for (int b = 0; b < d / 32; ++b) {
        const float dv = unpack_kv_block(kv.dtype, vr, b, w);
        for (int j = 0; j < 32; ++j) v32[32 * b + j] = w[j] * dv;  // dequantize_row_*: x*d, one rounding
      }
    }
    for (int i = 0; i < d; ++i) acc[i] = std::fma(v32[i], vs, acc[i]);
    l = std::fma(l, ms, vs);
  }
  const float inv = l > 0.f ? 1.f / l : 0.f;
  for (int i = 0; i < d; ++i) out[i] = acc[i] * inv;
}

}  // namespace pdserve::kernels
