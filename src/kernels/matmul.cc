#include "kernels/matmul.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "base/fp16.h"
#include "kernels/parallel.h"
#include "kernels/qgemm.h"
#include "kernels/quants.h"

namespace pdserve::kernels {

namespace {

using gguf::GgmlType;

// Dot products with fixed reduction orders. Which one a (row, token) pair uses depends
// only on the weight type/shape and that token's own gemm_order flag — never on the batch
// size or the other tokens — which is what makes matmul batch invariant.


// f32 weights, decode order: the reduction order of ggml's ggml_vec_dot_f32
// (ggml-cpu/vec.cpp, AVX-512 branch, GGML_F32_STEP 64 / EPR 16), which llama.cpp's CPU
// mul_mat uses for one-token (decode) batches and for k % 16 != 0 (llamafile_sgemm
// declines both; multi-token prompts with k % 16 == 0 use dot_f32_gemm below). Four
// 16-lane FMA accumulators over 64-value chunks, folded (s0+s2)+(s1+s3) then
// _mm512_reduce_add_ps (GGML_F32_VEC_REDUCE); the n % 64 leftovers go into the float sum
// as GCC vectorizes that loop in the reference build: 16- then 8-wide chunks of rounded
// products added one by one, then a scalar FMA chain.
float dot_f32(const float* w, const float* x, int64_t n) {
  const int64_t np = n & ~int64_t(63);
  int64_t i = 0;
#if defined(__AVX512F__)
  __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  for (; i < np; i += 64) {
    s0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i), _mm512_loadu_ps(x + i), s0);
    s1 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i + 16), _mm512_loadu_ps(x + i + 16), s1);
    s2 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i + 32), _mm512_loadu_ps(x + i + 32), s2);
    s3 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i + 48), _mm512_loadu_ps(x + i + 48), s3);
  }
  float res = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s2), _mm512_add_ps(s1, s3)));
  alignas(64) float p[16];
  // Products stored rounded, then added with explicit scalar adds (no contraction).
  for (; i + 16 <= n; i += 16) {
    _mm512_store_ps(p, _mm512_mul_ps(_mm512_loadu_ps(w + i), _mm512_loadu_ps(x + i)));
    for (int j = 0; j < 16; ++j) res = _mm_cvtss_f32(_mm_add_ss(_mm_set_ss(res), _mm_set_ss(p[j])));
  }
  if (i + 8 <= n) {
    _mm256_store_ps(p, _mm256_mul_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i)));
    for (int j = 0; j < 8; ++j) res = _mm_cvtss_f32(_mm_add_ss(_mm_set_ss(res), _mm_set_ss(p[j])));
    i += 8;
  }
#else
  // Portable emulation of the same order.
  float s[4][16] = {};
  for (; i < np; i += 64)
    for (int a = 0; a < 4; ++a)
      for (int j = 0; j < 16; ++j) s[a][j] = std::fma(w[i + 16 * a + j], x[i + 16 * a + j], s[a][j]);
  float t[16];
  for (int j = 0; j < 16; ++j) t[j] = (s[0][j] + s[2][j]) + (s[1][j] + s[3][j]);
  for (int half = 8; half >= 1; half /= 2)
    for (int j = 0; j < half; ++j) t[j] += t[j + half];
  float res = t[0];
  // Leftovers: 16-wide chunks, then one 8-wide chunk, of rounded products added in order.
  const int64_t n_chunked = i + (n - i) / 16 * 16 + ((n - i) % 16 >= 8 ? 8 : 0);
  for (; i < n_chunked; ++i) {
    volatile float prod = w[i] * x[i];  // rounded product (vmulps), not contracted
    res += prod;
  }
#endif
  for (; i < n; ++i) res = std::fma(w[i], x[i], res);
  return res;
}

// f32 weights, multi-token prompt order: tinyBLAS (llamafile sgemm.cpp, tinyBLAS::gemm_bloc
// with KN = 16 on AVX-512): one 16-lane accumulator, acc = fma(w[l..l+16], x[l..l+16], acc)
// for l = 0, 16, …, then hsum = _mm512_reduce_add_ps (8+8, 4+4, 2+2, 1+1 halving fold).
// Only valid for n % 16 == 0 (llamafile_sgemm declines other k).
float dot_f32_gemm(const float* w, const float* x, int64_t n) {
#if defined(__AVX512F__)
  __m512 acc = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(w + i), _mm512_loadu_ps(x + i), acc);
  return _mm512_reduce_add_ps(acc);
#else
  float t[16] = {};
  for (int64_t i = 0; i < n; i += 16)
    for (int j = 0; j < 16; ++j) t[j] = std::fma(w[i + j], x[i + j], t[j]);
  for (int half = 8; half >= 1; half /= 2)
    for (int j = 0; j < half; ++j) t[j] += t[j + half];
  return t[0];
#endif
}

// Halving fold of 16 lanes, the order of _mm512_reduce_add_ps (8+8, 4+4, 2+2, 1+1).
inline float fold16(float* t) {
  for (int half = 8; half >= 1; half /= 2)
    for (int j = 0; j < half; ++j) t[j] += t[j + half];
  return t[0];
}

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
  for (int64_t i = np; i < n; ++i) sum += static_cast<double>(fp16_to_fp32(w[i]) * x[i]);
  return static_cast<float>(sum);
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

// bf16 weights, decode order: ggml_vec_dot_bf16 with AVX512-BF16 on bf16 activations:
// two accumulators c1, c2 of _mm512_dpbf16_ps over 64-value chunks (32 values each),
// each reduced (_mm512_reduce_add_ps) into a double sum, c1 first; leftovers in double.
float dot_bf16(const uint16_t* w, const uint16_t* xb, int64_t n) {
  int64_t i = 0;
  double sum = 0.0;
#if defined(__AVX512BF16__)
  __m512 c1 = _mm512_setzero_ps(), c2 = _mm512_setzero_ps();
  for (; i + 64 <= n; i += 64) {
    c1 = _mm512_dpbf16_ps(c1, (__m512bh)_mm512_loadu_si512(w + i), (__m512bh)_mm512_loadu_si512(xb + i));
    c2 = _mm512_dpbf16_ps(c2, (__m512bh)_mm512_loadu_si512(w + i + 32), (__m512bh)_mm512_loadu_si512(xb + i + 32));
  }
  sum += static_cast<double>(_mm512_reduce_add_ps(c1));
  sum += static_cast<double>(_mm512_reduce_add_ps(c2));
#else
  float c1[16] = {}, c2[16] = {};
  for (; i + 64 <= n; i += 64)
    for (int j = 0; j < 16; ++j) {
      c1[j] = dpbf16_lane(c1[j], w + i + 2 * j, xb + i + 2 * j);
      c2[j] = dpbf16_lane(c2[j], w + i + 32 + 2 * j, xb + i + 32 + 2 * j);
    }
  sum += static_cast<double>(fold16(c1));
  sum += static_cast<double>(fold16(c2));
#endif
  for (; i < n; ++i) sum += static_cast<double>(bf16_to_fp32(w[i]) * bf16_to_fp32(xb[i]));
  return static_cast<float>(sum);
}

// bf16 weights, multi-token prompt order (n % 32 == 0): tinyBLAS<32, __m512, __m512bh,
// ggml_bf16_t, ggml_bf16_t> — one _mm512_dpbf16_ps accumulator, then reduce_add.
float dot_bf16_gemm(const uint16_t* w, const uint16_t* xb, int64_t n) {
#if defined(__AVX512BF16__)
  __m512 c = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 32)
    c = _mm512_dpbf16_ps(c, (__m512bh)_mm512_loadu_si512(w + i), (__m512bh)_mm512_loadu_si512(xb + i));
  return _mm512_reduce_add_ps(c);
#else
  float c[16] = {};
  for (int64_t i = 0; i < n; i += 32)
    for (int j = 0; j < 16; ++j) c[j] = dpbf16_lane(c[j], w + i + 2 * j, xb + i + 2 * j);
  return fold16(c);
#endif
}

// The single dispatch point for every weight type and reduction order (see matmul.h).
// x: the token's activations (F16: rounded to f16); xb: the same as bf16 bits (BF16 weights).
float dot_row(const WeightView& w, int64_t r, const float* x, const uint16_t* xb, bool gemm) {
  const auto* row = static_cast<const uint8_t*>(w.data) + r * w.row_bytes;
  switch (w.type) {
    case GgmlType::F32: {
      const auto* wr = reinterpret_cast<const float*>(row);
      return gemm && w.cols % 16 == 0 ? dot_f32_gemm(wr, x, w.cols) : dot_f32(wr, x, w.cols);
    }
    case GgmlType::F16: {
      const auto* wr = reinterpret_cast<const uint16_t*>(row);
      return gemm && w.cols % 16 == 0 ? dot_f16_gemm(wr, x, w.cols) : dot_f16(wr, x, w.cols);
    }
    case GgmlType::BF16: {
      const auto* wr = reinterpret_cast<const uint16_t*>(row);
      return gemm && w.cols % 32 == 0 ? dot_bf16_gemm(wr, xb, w.cols) : dot_bf16(wr, xb, w.cols);
    }
    default: return 0.f;
  }
}

}  // namespace

bool matmul_supports(GgmlType type) {
  return type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16 || is_quantized(type);
}

bool isa_available(Isa isa) {
  switch (isa) {
    case Isa::kAuto: case Isa::kScalar: return true;
    case Isa::kAvx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Isa::kAvx512Vnni:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512vnni");
  }
  return false;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAuto: return "auto";
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512Vnni: return "avx512vnni";
  }
  return "?";
}

Isa best_isa() {
  static const Isa best = isa_available(Isa::kAvx512Vnni) ? Isa::kAvx512Vnni : isa_available(Isa::kAvx2) ? Isa::kAvx2 : Isa::kScalar;
  return best;
}

bool has_quant_kernel(Isa isa, GgmlType t) {
  switch (isa) {
    case Isa::kScalar: return qgemm_scalar(t) != nullptr;
    case Isa::kAvx2: return qgemm_avx2(t) != nullptr;
    case Isa::kAvx512Vnni: return qgemm_avx512vnni(t) != nullptr;
    case Isa::kAuto: return has_quant_kernel(best_isa(), t);
  }
  return false;
}

namespace {

// The one dispatch point of the quantised kernels: the ISA's table, falling back to the
// next path down for a type it lacks.
QGemmFn select_qgemm(Isa isa, GgmlType t) {
  if (isa == Isa::kAuto) isa = best_isa();
  QGemmFn f = nullptr;
  if (isa == Isa::kAvx512Vnni && isa_available(isa)) f = qgemm_avx512vnni(t);
  if (!f && (isa == Isa::kAvx512Vnni || isa == Isa::kAvx2) && isa_available(Isa::kAvx2)) f = qgemm_avx2(t);
  if (!f) f = qgemm_scalar(t);
  return f;
}

// 64-byte aligned scratch for quantised activations, reused across calls on a thread.
uint8_t* act_scratch(size_t bytes) {
  struct Buf {
    uint8_t* p = nullptr;
    size_t n = 0;
    ~Buf() { std::free(p); }
  };
  thread_local Buf b;
  if (b.n < bytes) {
    std::free(b.p);
    b.n = (bytes + 63) / 64 * 64;
    b.p = static_cast<uint8_t*>(std::aligned_alloc(64, b.n));
  }
  return b.p;
}

void matmul_quantized(const WeightView& w, const float* x, int n_tokens, float* y, const uint8_t* gemm_order, Isa isa) {
  const int64_t stride = act_row_bytes(w.type, w.cols);
  uint8_t* act = act_scratch(static_cast<size_t>(stride) * n_tokens);
#pragma omp parallel for schedule(static) if (n_tokens > 1 && worth_parallel(w.cols * n_tokens * 8))
  for (int t = 0; t < n_tokens; ++t) quantize_act(w.type, x + static_cast<int64_t>(t) * w.cols, act + t * stride, w.cols);
  const QGemmFn f = select_qgemm(isa, w.type);
  // Runs of consecutive tokens with the same reduction order (one run unless the type's
  // order depends on the token's flag: repacked Q4_K).
  struct Run { int t0, t1; QOrder order; };
  std::vector<Run> runs;
  for (int t = 0; t < n_tokens; ++t) {
    const QOrder o = quant_order(w.type, w.rows, gemm_order ? gemm_order[t] : 0);
    if (runs.empty() || runs.back().order != o) runs.push_back({t, t + 1, o});
    else runs.back().t1 = t + 1;
  }
  // Row chunks: a multiple of the kernels' row tiles; every (row, token) value is computed
  // the same way whatever chunk holds it.
  constexpr int64_t kChunk = 16;
  const int64_t n_chunks = (w.rows + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (worth_parallel(w.rows * w.cols * n_tokens / 4))
  for (int64_t c = 0; c < n_chunks; ++c)
    for (const Run& run : runs)
      f(w, act + run.t0 * stride, stride, run.t1 - run.t0, c * kChunk, std::min(w.rows, (c + 1) * kChunk), y + int64_t{run.t0} * w.rows,
        w.rows, run.order);
}

}  // namespace

void matmul(const WeightView& w, const float* x, int n_tokens, float* y, const uint8_t* gemm_order, Isa isa) {
  if (is_quantized(w.type)) {
    matmul_quantized(w, x, n_tokens, y, gemm_order, isa);
    return;
  }
  // F16 / BF16 weights: like ggml (vec_dot_type F16 / BF16), the activations are first
  // rounded to the weight's type (RNE), then multiplied in f32.
  std::vector<float> rounded;
  std::vector<uint16_t> xb;
  if (w.type == GgmlType::F16) {
    rounded.resize(static_cast<size_t>(n_tokens) * w.cols);
    for (size_t i = 0; i < rounded.size(); ++i) rounded[i] = fp16_to_fp32(fp32_to_fp16(x[i]));
    x = rounded.data();
  } else if (w.type == GgmlType::BF16) {
    xb.resize(static_cast<size_t>(n_tokens) * w.cols);
    for (size_t i = 0; i < xb.size(); ++i) xb[i] = fp32_to_bf16(x[i]);
  }
  constexpr int64_t kRowTile = 16;
  constexpr int kTokTile = 8;
  const int64_t n_row_tiles = (w.rows + kRowTile - 1) / kRowTile;
#pragma omp parallel for schedule(static) if (worth_parallel(w.rows * w.cols * n_tokens))
  for (int64_t rt = 0; rt < n_row_tiles; ++rt) {
    const int64_t r0 = rt * kRowTile, r1 = std::min(w.rows, r0 + kRowTile);
    for (int t0 = 0; t0 < n_tokens; t0 += kTokTile) {
      const int t1 = std::min(n_tokens, t0 + kTokTile);
      for (int64_t r = r0; r < r1; ++r)
        for (int t = t0; t < t1; ++t)
          y[static_cast<int64_t>(t) * w.rows + r] =
              dot_row(w, r, x + static_cast<int64_t>(t) * w.cols, xb.empty() ? nullptr : xb.data() + static_cast<int64_t>(t) * w.cols,
                      gemm_order != nullptr && gemm_order[t] != 0);
    }
  }
}

void dequantize_row(const WeightView& w, int64_t r, float* out) {
  dequantize(w.type, static_cast<const uint8_t*>(w.data) + r * w.row_bytes, out, w.cols);
}

}  // namespace pdserve::kernels
