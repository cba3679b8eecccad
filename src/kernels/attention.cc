#include "kernels/attention.h"

#include <cmath>
#include <cstring>

#include "base/fp16.h"
#include "kernels/expf.h"
#include "kernels/ops.h"

namespace pdserve::kernels {

namespace {

inline int64_t token_offset(const KvLayerView& kv, int64_t slot, int head) {
  return (slot * kv.n_kv_heads + head) * kv.head_dim;
}

// Q·K for the f16 cache as ggml_vec_dot_f16 computes it (ggml-cpu/vec.cpp, AVX-512
// branch: GGML_F16_STEP 64, EPR 16): 64-value chunks into four 16-lane f32 FMA
// accumulators, folded (s0+s2)+(s1+s3) then reduced into a double (GGML_F16_VEC_REDUCE);
// the d % 64 leftovers (all of them for head_dim < 64) are f32 products summed in double
// (ggml_float). The result is rounded to float.
inline float dot_f16_q(const float* qh, const uint16_t* kh, int d) {
  const int np = d & ~63;
  double sum = 0.0;
  if (np > 0) {
    float s[4][16] = {};
    for (int i = 0; i < np; i += 64)
      for (int a = 0; a < 4; ++a)
        for (int j = 0; j < 16; ++j) s[a][j] = std::fma(qh[i + 16 * a + j], fp16_to_fp32(kh[i + 16 * a + j]), s[a][j]);
    float t[16];
    for (int j = 0; j < 16; ++j) t[j] = (s[0][j] + s[2][j]) + (s[1][j] + s[3][j]);
    for (int half = 8; half >= 1; half /= 2)  // _mm512_reduce_add_ps fold order
      for (int j = 0; j < half; ++j) t[j] += t[j + half];
    sum = t[0];
  }
  for (int i = np; i < d; ++i) sum += static_cast<double>(qh[i] * fp16_to_fp32(kh[i]));
  return static_cast<float>(sum);
}

// A SIMD f16 kernel: paged_attention_group's arguments (one head = a group of one).
using F16AttentionFn = void (*)(const float*, int, const KvLayerView&, int, const int32_t*, int, float, float*);

// The one dispatch point of the f16 kernels: the requested path, or the next one down that
// this CPU has (AVX-512 → AVX2 → scalar). nullptr = scalar.
F16AttentionFn select_f16(Isa isa) {
  switch (resolve_isa(isa)) {
    case Isa::kAvx512Vnni: return avx512::paged_attention_f16_group;
    case Isa::kAvx2: return avx2::paged_attention_f16_group;
    default: return nullptr;
  }
}

// The Q8_0 / Q4_0 kernels' dispatch, as select_f16 (BF16 and other dtypes: nullptr = scalar).
F16AttentionFn select_quant(Isa isa, KvDtype dtype) {
  if (dtype != KvDtype::Q8_0 && dtype != KvDtype::Q4_0) return nullptr;
  switch (resolve_isa(isa)) {
    case Isa::kAvx512Vnni: return avx512::paged_attention_quant_group;
    case Isa::kAvx2: return avx2::paged_attention_quant_group;
    default: return nullptr;
  }
}

}  // namespace

void kv_store(const KvLayerView& kv, int64_t slot, const float* k, const float* v) {
  const int64_t n = static_cast<int64_t>(kv.n_kv_heads) * kv.head_dim;
  const int64_t off = token_offset(kv, slot, 0);
  if (kv.dtype == KvDtype::F32) {
    std::memcpy(static_cast<float*>(kv.k) + off, k, n * sizeof(float));
    std::memcpy(static_cast<float*>(kv.v) + off, v, n * sizeof(float));
  } else if (kv.dtype == KvDtype::F16) {
    auto* kd = static_cast<uint16_t*>(kv.k) + off;
    auto* vd = static_cast<uint16_t*>(kv.v) + off;
    for (int64_t i = 0; i < n; ++i) {
      kd[i] = fp32_to_fp16(k[i]);
      vd[i] = fp32_to_fp16(v[i]);
    }
  } else {  // BF16, Q8_0, Q4_0: row by row (a row is whole blocks)
    const int64_t row = kv_row_bytes(kv.dtype, kv.head_dim);
    for (int h = 0; h < kv.n_kv_heads; ++h) {
      const int64_t boff = (slot * kv.n_kv_heads + h) * row;
      quantize_kv_row(kv.dtype, k + int64_t{h} * kv.head_dim, static_cast<uint8_t*>(kv.k) + boff, kv.head_dim);
      quantize_kv_row(kv.dtype, v + int64_t{h} * kv.head_dim, static_cast<uint8_t*>(kv.v) + boff, kv.head_dim);
    }
  }
}

void paged_attention_head(const float* q, const KvLayerView& kv, int kv_head,
                          const int32_t* block_table, int n_keys, float scale, float* out, Isa isa, int first_key,
                          float softcap) {
  const bool plain = first_key == 0 && softcap == 0.f;  // the SIMD kernels have neither option
  if (kv.dtype == KvDtype::Q8_0 || kv.dtype == KvDtype::Q4_0 || kv.dtype == KvDtype::BF16) {
    if (const F16AttentionFn f = select_quant(isa, kv.dtype); f && plain) return f(q, 1, kv, kv_head, block_table, n_keys, scale, out);
    return paged_attention_quant_scalar(q, kv, kv_head, block_table, n_keys, scale, out, first_key, softcap);
  }
  if (kv.dtype == KvDtype::F16) {
    if (const F16AttentionFn f = select_f16(isa); f && plain) return f(q, 1, kv, kv_head, block_table, n_keys, scale, out);
    return paged_attention_f16_scalar(q, kv, kv_head, block_table, n_keys, scale, out, first_key, softcap);
  }
  const int d = kv.head_dim;
  if (softcap > 0.f) scale /= softcap;
  float m = -INFINITY, l = 0.f;
  {  // f32 cache
    float acc[kMaxHeadDim] = {};
    for (int p = first_key; p < n_keys; ++p) {
      const int64_t slot = static_cast<int64_t>(block_table[p / kv.block_size]) * kv.block_size + p % kv.block_size;
      const float* kp = static_cast<const float*>(kv.k) + token_offset(kv, slot, kv_head);
      const float* vp = static_cast<const float*>(kv.v) + token_offset(kv, slot, kv_head);
      float s = 0.f;
      for (int i = 0; i < d; ++i) s += q[i] * kp[i];
      s *= scale;
      if (softcap > 0.f) s = softcap * tanh_cr(s);
      // Online softmax: rescale the running sum and accumulator when the max grows.
      float ms = 1.f, vs = 1.f;
      if (s > m) {
        ms = std::exp(m - s);
        m = s;
        for (int i = 0; i < d; ++i) acc[i] *= ms;
      } else {
        vs = std::exp(s - m);
      }
      for (int i = 0; i < d; ++i) acc[i] += vp[i] * vs;
      l = l * ms + vs;
    }
    const float inv = l > 0.f ? 1.f / l : 0.f;
    for (int i = 0; i < d; ++i) out[i] = acc[i] * inv;
  }
}

void paged_attention_group(const float* q, int n_q, const KvLayerView& kv, int kv_head, const int32_t* block_table,
                           int n_keys, float scale, float* out, Isa isa, int first_key, float softcap) {
  const bool plain = first_key == 0 && softcap == 0.f;
  if (kv.dtype == KvDtype::F16 && plain)
    if (const F16AttentionFn f = select_f16(isa)) return f(q, n_q, kv, kv_head, block_table, n_keys, scale, out);
  if (const F16AttentionFn f = select_quant(isa, kv.dtype); f && plain)
    return f(q, n_q, kv, kv_head, block_table, n_keys, scale, out);
  // The scalar paths: head by head (the reference's order within each head is all that counts).
  const int64_t d = kv.head_dim;
  for (int h = 0; h < n_q; ++h)
    paged_attention_head(q + h * d, kv, kv_head, block_table, n_keys, scale, out + h * d, Isa::kScalar, first_key, softcap);
}

void paged_attention_f16_scalar(const float* q, const KvLayerView& kv, int kv_head, const int32_t* block_table,
                                int n_keys, float scale, float* out, int first_key, float softcap) {
  const int d = kv.head_dim;
  if (softcap > 0.f) scale /= softcap;  // ggml_compute_forward_flash_attn_ext_f16: scale /= logit_softcap
  float m = -INFINITY, l = 0.f;
  // f16 cache: the numerics of llama.cpp's CPU flash attention
  // (ggml_compute_forward_flash_attn_ext_f16_one_chunk, used for prefill and decode when
  // head_dim is not a multiple of the SIMD width, and for decode below 512 cached keys):
  // Q is rounded to f16 and dotted with K by ggml_vec_dot_f16 (dot_f16_q), and the V
  // accumulator is kept in f16 (ggml_vec_scale_f16 / ggml_vec_mad_f16: rounded after
  // every scale and multiply-add). The multiply-adds are single-rounding FMAs, as
  // ggml_vec_mad_f16 (GGML_F16_VEC_FMA) and its contracted scalar code compute them —
  // written out with std::fma so the result does not depend on -ffp-contract.
  float qh[kMaxHeadDim];
  uint16_t acc[kMaxHeadDim];
  for (int i = 0; i < d; ++i) {
    qh[i] = fp16_to_fp32(fp32_to_fp16(q[i]));
    acc[i] = 0;
  }
  for (int p = first_key; p < n_keys; ++p) {  // keys before first_key: masked (-inf), skipped as ggml does
    const int64_t slot = static_cast<int64_t>(block_table[p / kv.block_size]) * kv.block_size + p % kv.block_size;
    const auto* kh = static_cast<const uint16_t*>(kv.k) + token_offset(kv, slot, kv_head);
    const auto* vh = static_cast<const uint16_t*>(kv.v) + token_offset(kv, slot, kv_head);
    float s = dot_f16_q(qh, kh, d);
    s *= scale;
    if (softcap > 0.f) s = softcap * tanh_cr(s);
    float ms = 1.f, vs = 1.f;
    if (s > m) {
      ms = expf_glibc(m - s);
      m = s;
      for (int i = 0; i < d; ++i) acc[i] = fp32_to_fp16(fp16_to_fp32(acc[i]) * ms);
    } else {
      vs = expf_glibc(s - m);
    }
    for (int i = 0; i < d; ++i) acc[i] = fp32_to_fp16(std::fma(fp16_to_fp32(vh[i]), vs, fp16_to_fp32(acc[i])));
    l = std::fma(l, ms, vs);
  }
  const float inv = l > 0.f ? 1.f / l : 0.f;
  for (int i = 0; i < d; ++i) out[i] = fp16_to_fp32(acc[i]) * inv;
}

bool attention_has_simd(Isa isa) {
  if (isa == Isa::kAuto) return select_f16(isa) != nullptr;
  if (isa == Isa::kAvx512Vnni) return select_f16(isa) == avx512::paged_attention_f16_group;
  if (isa == Isa::kAvx2) return select_f16(isa) == avx2::paged_attention_f16_group;
  return false;
}

}  // namespace pdserve::kernels
