// Float-type weights (F32, F16, BF16): llama.cpp's dot-product orders per (row, token)
// (matmul.h), one row and one token at a time — the portable path, and the reference the
// AVX-512 register tiles (matmul_float_avx512.cc) reproduce bit for bit — and the one
// dispatch point of the float matmul family.
#include "kernels/matmul_float.h"

#include <algorithm>
#include <cmath>

#include "base/fp16.h"

namespace pdserve::kernels {
namespace {

using gguf::GgmlType;

// ---- One (row, token) references ----

// Halving fold of 16 lanes, the order of _mm512_reduce_add_ps (8+8, 4+4, 2+2, 1+1).
inline float fold16(float* t) {
  for (int half = 8; half >= 1; half /= 2)
    for (int j = 0; j < half; ++j) t[j] += t[j + half];
  return t[0];
}

// ggml_vec_dot_f32's leftovers after its 64-value chunks (from i, the chunked length, to
// n) added to res as GCC vectorizes that loop in the reference build: 16- then 8-wide
// chunks of rounded products added one by one, then a scalar FMA chain.
float f32_decode_tail(float res, const float* w, const float* x, int64_t i, int64_t n) {
  // Leftovers: 16-wide chunks, then one 8-wide chunk, of rounded products added in order.
  const int64_t n_chunked = i + (n - i) / 16 * 16 + ((n - i) % 16 >= 8 ? 8 : 0);
  for (; i < n_chunked; ++i) {
    volatile float prod = w[i] * x[i];  // rounded product (vmulps), not contracted
    res += prod;
  }
  for (; i < n; ++i) res = std::fma(w[i], x[i], res);
  return res;
}

// f32 weights, decode order: the reduction order of ggml's ggml_vec_dot_f32
// (ggml-cpu/vec.cpp, AVX-512 branch, GGML_F32_STEP 64 / EPR 16), which llama.cpp's CPU
// mul_mat uses for one-token (decode) batches and for k % 16 != 0 (llamafile_sgemm
// declines both; multi-token prompts with k % 16 == 0 use dot_f32_gemm below). Four
// 16-lane FMA accumulators over 64-value chunks, folded (s0+s2)+(s1+s3) then
// _mm512_reduce_add_ps (GGML_F32_VEC_REDUCE); then f32_decode_tail.
float dot_f32(const float* w, const float* x, int64_t n) {
  const int64_t np = n & ~int64_t(63);
  float s[4][16] = {};
  for (int64_t i = 0; i < np; i += 64)
    for (int a = 0; a < 4; ++a)
      for (int j = 0; j < 16; ++j) s[a][j] = std::fma(w[i + 16 * a + j], x[i + 16 * a + j], s[a][j]);
  float t[16];
  for (int j = 0; j < 16; ++j) t[j] = (s[0][j] + s[2][j]) + (s[1][j] + s[3][j]);
  return f32_decode_tail(fold16(t), w, x, np, n);
}

// f32 weights, multi-token prompt order: tinyBLAS (llamafile sgemm.cpp, tinyBLAS::gemm_bloc
// with KN = 16 on AVX-512): one 16-lane accumulator, acc = fma(w[l..l+16], x[l..l+16], acc)
// for l = 0, 16, …, then hsum = _mm512_reduce_add_ps (8+8, 4+4, 2+2, 1+1 halving fold).
// Only valid for n % 16 == 0 (llamafile_sgemm declines other k).
float dot_f32_gemm(const float* w, const float* x, int64_t n) {
  float t[16] = {};
  for (int64_t i = 0; i < n; i += 16)
    for (int j = 0; j < 16; ++j) t[j] = std::fma(w[i + j], x[i + j], t[j]);
  return fold16(t);
}

}  // namespace

float f16_decode_tail(double sum, const uint16_t* w, const float* x, int64_t i, int64_t n) {
  for (; i < n; ++i) sum += static_cast<double>(fp16_to_fp32(w[i]) * x[i]);
  return static_cast<float>(sum);
}

namespace {

// f16 weights, decode order: ggml_vec_dot_f16 (ggml-cpu/vec.cpp, AVX-512: GGML_F16_STEP 64,
// EPR 16) on f16 activations (x holds them widened): four 16-lane f32 FMA accumulators
// over 64-value chunks, folded (s0+s2)+(s1+s3), reduced into a double; the n % 64
// leftovers are f32 products added in double; the result rounded to float.
float dot_f16(const uint16_t* w, const float* x, int64_t n) {
  const int64_t np = n & ~int64_t(63);
  double sum = 0.0;
  if (np > 0) {
    float s[4][16] = {};
    for (int64_t i = 0; i < np; i += 64)
      for (int a = 0; a < 4; ++a)
        for (int j = 0; j < 16; ++j) s[a][j] = std::fma(fp16_to_fp32(w[i + 16 * a + j]), x[i + 16 * a + j], s[a][j]);
    float t[16];
    for (int j = 0; j < 16; ++j) t[j] = (s[0][j] + s[2][j]) + (s[1][j] + s[3][j]);
    sum = fold16(t);
  }
  return f16_decode_tail(sum, w, x, np, n);
}

// f16 weights, multi-token prompt order (n % 16 == 0): tinyBLAS<16, __m512, __m512,
// ggml_fp16_t, ggml_fp16_t> — one 16-lane FMA accumulator, then _mm512_reduce_add_ps.
float dot_f16_gemm(const uint16_t* w, const float* x, int64_t n) {
  float t[16] = {};
  for (int64_t i = 0; i < n; i += 16)
    for (int j = 0; j < 16; ++j) t[j] = std::fma(fp16_to_fp32(w[i + j]), x[i + j], t[j]);
  return fold16(t);
}

// One VDPBF16PS lane step: acc += a[2k+1]*b[2k+1], then += a[2k]*b[2k] (Intel SDM order;
// bf16 products are exact in f32).
inline float dpbf16_lane(float acc, const uint16_t* a, const uint16_t* b) {
  acc = std::fma(bf16_to_fp32(a[1]), bf16_to_fp32(b[1]), acc);
  return std::fma(bf16_to_fp32(a[0]), bf16_to_fp32(b[0]), acc);
}

}  // namespace

float bf16_decode_tail(double sum, const uint16_t* w, const uint16_t* xb, int64_t i, int64_t n) {
  for (; i < n; ++i) sum += static_cast<double>(bf16_to_fp32(w[i]) * bf16_to_fp32(xb[i]));
  return static_cast<float>(sum);
}

namespace {

// bf16 weights, decode order: ggml_vec_dot_bf16 with AVX512-BF16 on bf16 activations:
// two accumulators c1, c2 of _mm512_dpbf16_ps over 64-value chunks (32 values each),
// each reduced (_mm512_reduce_add_ps) into a double sum, c1 first; leftovers in double.
float dot_bf16(const uint16_t* w, const uint16_t* xb, int64_t n) {
  int64_t i = 0;
  double sum = 0.0;
  float c1[16] = {}, c2[16] = {};
  for (; i + 64 <= n; i += 64)
    for (int j = 0; j < 16; ++j) {
      c1[j] = dpbf16_lane(c1[j], w + i + 2 * j, xb + i + 2 * j);
      c2[j] = dpbf16_lane(c2[j], w + i + 32 + 2 * j, xb + i + 32 + 2 * j);
    }
  sum += static_cast<double>(fold16(c1));
  sum += static_cast<double>(fold16(c2));
  return bf16_decode_tail(sum, w, xb, i, n);
}

// bf16 weights, multi-token prompt order (n % 32 == 0): tinyBLAS<32, __m512, __m512bh,
// ggml_bf16_t, ggml_bf16_t> — one _mm512_dpbf16_ps accumulator, then reduce_add.
float dot_bf16_gemm(const uint16_t* w, const uint16_t* xb, int64_t n) {
  float c[16] = {};
  for (int64_t i = 0; i < n; i += 32)
    for (int j = 0; j < 16; ++j) c[j] = dpbf16_lane(c[j], w + i + 2 * j, xb + i + 2 * j);
  return fold16(c);
}

/// Whether a token with flag `flag` takes the tinyBLAS (prompt GEMM) order for these weights.
bool gemm_order_applies(const WeightView& w, uint8_t flag) {
  return flag != 0 && w.cols % (w.type == GgmlType::BF16 ? 32 : 16) == 0;
}

/// The reference dot of row r and token t.
float dot_row(const WeightView& w, int64_t r, const float* x, const uint16_t* xb, bool gemm) {
  const auto* row = static_cast<const uint8_t*>(w.data) + r * w.row_bytes;
  switch (w.type) {
    case GgmlType::F32: {
      const auto* wr = reinterpret_cast<const float*>(row);
      return gemm ? dot_f32_gemm(wr, x, w.cols) : dot_f32(wr, x, w.cols);
    }
    case GgmlType::F16: {
      const auto* wr = reinterpret_cast<const uint16_t*>(row);
      return gemm ? dot_f16_gemm(wr, x, w.cols) : dot_f16(wr, x, w.cols);
    }
    case GgmlType::BF16: {
      const auto* wr = reinterpret_cast<const uint16_t*>(row);
      return gemm ? dot_bf16_gemm(wr, xb, w.cols) : dot_bf16(wr, xb, w.cols);
    }
    default: return 0.f;
  }
}

}  // namespace

void matmul_float_rows(const WeightView& w, const float* x, const uint16_t* xb, int n_tok, const uint8_t* gemm_order, int64_t r0,
                       int64_t r1, float* y, int64_t ldy, Isa isa) {
  const bool tiles = resolve_isa(isa) == Isa::kAvx512Vnni && cpu_features().avx512bf16;
  // Runs of consecutive tokens with the same order.
  for (int t0 = 0; t0 < n_tok;) {
    const bool gemm = gemm_order != nullptr && gemm_order_applies(w, gemm_order[t0]);
    int t1 = t0 + 1;
    while (t1 < n_tok && (gemm_order != nullptr && gemm_order_applies(w, gemm_order[t1])) == gemm) ++t1;
    if (tiles) {
      avx512::matmul_float_run(w, x, xb, t0, t1, gemm, r0, r1, y, ldy);
      t0 = t1;
      continue;
    }
    for (int64_t r = r0; r < r1; ++r)
      for (int t = t0; t < t1; ++t)
        y[t * ldy + r] = dot_row(w, r, x + static_cast<int64_t>(t) * w.cols, xb ? xb + static_cast<int64_t>(t) * w.cols : nullptr, gemm);
    t0 = t1;
  }
}

float dot_float_reference(const WeightView& w, int64_t r, const float* x, const uint16_t* xb, uint8_t flag) {
  return dot_row(w, r, x, xb, gemm_order_applies(w, flag));
}

void round_to_f16(const float* x, float* dst, int64_t n) {
  int64_t i = 0;
  if (best_isa() == Isa::kAvx512Vnni) {
    i = n / 16 * 16;
    avx512::round_to_f16(x, dst, i);
  }
  for (; i < n; ++i) dst[i] = fp16_to_fp32(fp32_to_fp16(x[i]));
}

void convert_to_bf16(const float* x, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  if (best_isa() == Isa::kAvx512Vnni) {
    i = n / 16 * 16;
    avx512::convert_to_bf16(x, dst, i);
  }
  for (; i < n; ++i) dst[i] = fp32_to_bf16(x[i]);
}

}  // namespace pdserve::kernels
