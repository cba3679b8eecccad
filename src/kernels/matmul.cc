// kernels::matmul: the single dispatch point of every weight type (quantised kernels per
// ISA: qgemm.h; float-type weights: matmul_float.h), activation quantisation / rounding,
// and the threading (row chunks; every (row, token) value is computed the same way
// whatever chunk or thread holds it).
#include "kernels/matmul.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <vector>

#include "kernels/matmul_float.h"
#include "kernels/matmul_profile.h"
#include "kernels/parallel.h"
#include "kernels/qgemm.h"
#include "kernels/quants.h"
#include "kernels/weight_layout.h"

namespace pdserve::kernels {

using gguf::GgmlType;

bool matmul_supports(GgmlType type) {
  return type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16 || is_quantized(type);
}

bool has_quant_kernel(Isa isa, GgmlType t) {
  switch (isa) {
    case Isa::kScalar: return qgemm_scalar(t, QOrder::kVecDot).gemm != nullptr;
    case Isa::kAvx2: return qgemm_avx2(t, QOrder::kVecDot).gemm != nullptr;
    case Isa::kAvx512Vnni: return qgemm_avx512vnni(t, QOrder::kVecDot).gemm != nullptr;
    case Isa::kAuto: return has_quant_kernel(best_isa(), t);
  }
  return false;
}

namespace {

// The one dispatch point of the quantised kernels: the ISA's kernel for the type, order
// and weight layout, falling back to the next path down for a type it lacks. A kernel
// for another layout than the weight's gets its rows converted (run_gemm).
QKernel select_qgemm(Isa isa, GgmlType t, QOrder order, WeightLayout layout) {
  isa = resolve_isa(isa);
  QKernel k;
  if (isa == Isa::kAvx512Vnni && layout != WeightLayout::kRows) k = qgemm_avx512vnni_layout(t, order, layout);
  if (!k.gemm && isa == Isa::kAvx512Vnni) k = qgemm_avx512vnni(t, order);
  if (!k.gemm && (isa == Isa::kAvx512Vnni || isa == Isa::kAvx2)) k = qgemm_avx2(t, order);
  if (!k.gemm) k = qgemm_scalar(t, order);
  return k;
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

constexpr int64_t align64(int64_t n) { return (n + 63) / 64 * 64; }

// k.gemm on rows [r0, r1) of w. A kernel that reads another layout than w's (a forced
// ISA without a kernel for it) gets those rows in ggml's layout, converted into a
// per-thread buffer first: slower, the same bits.
void run_gemm(const QKernel& k, const WeightView& w, const uint8_t* act, int64_t act_stride, int n_tok, int64_t r0, int64_t r1,
              float* y, QOrder order) {
  if (k.layout == w.layout) {
    k.gemm(w, act, act_stride, n_tok, r0, r1, y, w.rows, order);
    return;
  }
  struct Buf {
    std::vector<uint8_t> b;
  };
  thread_local Buf rows;
  rows.b.resize(static_cast<size_t>((r1 - r0) * w.row_bytes));
  untile16_rows(w, r0, r1, rows.b.data());
  WeightView v = w;
  v.data = rows.b.data();
  v.rows = r1 - r0;
  v.layout = WeightLayout::kRows;
  // Outputs of rows r0.. land at y + r0, token stride w.rows, as the whole matrix's would.
  k.gemm(v, act, act_stride, n_tok, 0, r1 - r0, y + r0, w.rows, order);
}

// Quantised matmuls of several weight matrices (same column count) on the same
// activations: each activation format (Q8_0 / Q8_K) is quantised once and each distinct
// kernel packing done once, then the row chunks of all matrices run in one parallel loop,
// so Q/K/V (or gate/up) pay one fork/join and the small K/V matrices do not run alone.
void matmul_quantized(const MatmulJob* jobs, int n_jobs, const float* x, int n_tokens, const uint8_t* gemm_order, Isa isa) {
  const int64_t cols = jobs[0].w->cols;
  // Activation formats (one quantised copy of x each).
  struct Format {
    GgmlType act_type;
    GgmlType wt;  // a weight type that uses it (for quantize_act / act_row_bytes)
    int64_t stride, off;
  };
  // Runs of consecutive tokens with the same reduction order (one run unless the type's
  // order depends on the token's flag: repacked Q4_K), each with its kernel and, if the
  // kernel repacks activations, its packed buffer (shared by runs that pack alike).
  struct Run {
    int job, t0, t1, format;
    QOrder order;
    QKernel k;
    int64_t packed_off = -1;
    bool packs = false;  // this run fills its packed buffer (else it shares another's)
  };
  std::vector<Format> formats;
  std::vector<Run> runs;
  for (int j = 0; j < n_jobs; ++j) {
    const WeightView& w = *jobs[j].w;
    const GgmlType at = vec_dot_type(w.type);
    int f = 0;
    while (f < static_cast<int>(formats.size()) && formats[f].act_type != at) ++f;
    if (f == static_cast<int>(formats.size())) formats.push_back({at, w.type, act_row_bytes(w.type, cols), 0});
    for (int t = 0; t < n_tokens; ++t) {
      const QOrder o = quant_order(w.type, w.rows, gemm_order ? gemm_order[t] : 0);
      if (runs.empty() || runs.back().job != j || runs.back().order != o) runs.push_back({j, t, t + 1, f, o, {}});
      else runs.back().t1 = t + 1;
    }
  }
  int64_t bytes = 0;
  for (Format& f : formats) {
    f.off = bytes;
    bytes += align64(f.stride * n_tokens);
  }
  for (size_t i = 0; i < runs.size(); ++i) {
    Run& run = runs[i];
    run.k = select_qgemm(isa, jobs[run.job].w->type, run.order, jobs[run.job].w->layout);
    if (run.k.pack && run.k.pack_bytes(*jobs[run.job].w, run.order, run.t1 - run.t0) == 0) run.k.pack = nullptr;  // rows as they are
    if (!run.k.pack) continue;
    for (size_t e = 0; e < i && run.packed_off < 0; ++e)
      if (runs[e].packs && runs[e].k.pack == run.k.pack && runs[e].order == run.order && runs[e].t0 == run.t0 &&
          runs[e].t1 == run.t1 && jobs[runs[e].job].w->type == jobs[run.job].w->type)
        run.packed_off = runs[e].packed_off;
    if (run.packed_off < 0) {
      run.packs = true;
      run.packed_off = bytes;
      bytes += align64(run.k.pack_bytes(*jobs[run.job].w, run.order, run.t1 - run.t0));
    }
  }
  uint8_t* act = act_scratch(static_cast<size_t>(bytes));
  // Row chunks: a multiple of every kernel's row tile (16); every (row, token) value is
  // computed the same way whatever chunk holds it. Larger chunks for batches keep a tile
  // of tokens' activations in cache across more rows.
  const int64_t chunk = n_tokens >= 8 ? 64 : 16;
  std::vector<int64_t> chunk_start(n_jobs + 1, 0);  // prefix sums of the jobs' chunk counts
  int64_t work = 0;
  for (int j = 0; j < n_jobs; ++j) {
    chunk_start[j + 1] = chunk_start[j] + (jobs[j].w->rows + chunk - 1) / chunk;
    work += jobs[j].w->rows * cols * n_tokens / 4;
  }
  constexpr int kPackChunk = 8;  // tokens per pack call (a multiple of every pack_align)
  const bool prof = matmul_profile_on();
  const int64_t t_prep = prof ? detail::profile_now_ns() : 0;
  // Activations: quantised, then repacked for the kernels; across threads only for
  // batches big enough to pay for the extra barriers (an oversubscribed machine can stall
  // each one for a time slice).
  const bool parallel_prep = n_tokens >= 8 && worth_parallel(cols * n_tokens * 8);
  for (const Format& f : formats)
    parallel_for(
        n_tokens,
        [&](int64_t t0, int64_t t1) {
          for (int64_t t = t0; t < t1; ++t) quantize_act(f.wt, x + t * cols, act + f.off + t * f.stride, cols);
        },
        parallel_prep);
  for (const Run& run : runs) {
    if (!run.packs) continue;
    const Format& f = formats[run.format];
    const int n = run.t1 - run.t0;
    parallel_for(
        (n + kPackChunk - 1) / kPackChunk,
        [&](int64_t c0, int64_t c1) {
          for (int64_t c = c0; c < c1; ++c) {
            const int tb = static_cast<int>(c) * kPackChunk;
            run.k.pack(*jobs[run.job].w, run.order, act + f.off + run.t0 * f.stride, f.stride, n, tb,
                       std::min(n, tb + kPackChunk), act + run.packed_off);
          }
        },
        parallel_prep);
  }
  const int64_t t_rows = prof ? detail::profile_now_ns() : 0;
  std::atomic<int64_t> busy_ns{0};  // --profile: time in the ranges, summed over threads
  // Ranges of one row chunk when a chunk is long (a batch's 64 rows: >= 1 M multiply-adds),
  // so the join waits for at most one chunk on the slower thread, not a range of 1/16 of
  // the job (Q4_K_M B=32: fork/join wait 4.9 ms a step); parallel_for's default (about 8
  // ranges a thread) for a GEMV's short chunks, whose claims would cost more than they save.
  const int64_t grain = chunk * cols * n_tokens >= (int64_t{1} << 20) ? 1 : 0;
  const int team = parallel_for(
      chunk_start[n_jobs],
      [&](int64_t g0, int64_t g1) {
        const int64_t t_busy = prof ? detail::profile_now_ns() : 0;
        for (int64_t g = g0; g < g1; ++g) {
          const int j = static_cast<int>(std::upper_bound(chunk_start.begin(), chunk_start.end(), g) - chunk_start.begin()) - 1;
          const WeightView& w = *jobs[j].w;
          const int64_t c = g - chunk_start[j];
          for (const Run& run : runs) {
            if (run.job != j) continue;
            const Format& f = formats[run.format];
            const uint8_t* a = run.k.pack ? act + run.packed_off : act + f.off + run.t0 * f.stride;
            run_gemm(run.k, w, a, f.stride, run.t1 - run.t0, c * chunk, std::min(w.rows, (c + 1) * chunk),
                     jobs[j].y + int64_t{run.t0} * w.rows, run.order);
          }
        }
        if (prof) busy_ns.fetch_add(detail::profile_now_ns() - t_busy, std::memory_order_relaxed);
      },
      worth_parallel(work), grain);
  if (prof) detail::matmul_profile_add(0, busy_ns.load() / team);
  if (prof) detail::matmul_profile_add(t_rows - t_prep, 0);
}

}  // namespace

void matmul(const WeightView& w, const float* x, int n_tokens, float* y, const uint8_t* gemm_order, Isa isa) {
  if (is_quantized(w.type)) {
    const MatmulJob job{&w, y};
    matmul_quantized(&job, 1, x, n_tokens, gemm_order, isa);
    return;
  }
  // F16 / BF16 weights: like ggml (vec_dot_type F16 / BF16), the activations are first
  // rounded to the weight's type (RNE), then multiplied in f32.
  const bool prof = matmul_profile_on();
  const int64_t t_prep = prof ? detail::profile_now_ns() : 0;
  const int64_t n = static_cast<int64_t>(n_tokens) * w.cols;
  const uint16_t* xb = nullptr;
  if (w.type == GgmlType::F16) {
    auto* rounded = reinterpret_cast<float*>(act_scratch(static_cast<size_t>(n) * sizeof(float)));
    round_to_f16(x, rounded, n);
    x = rounded;
  } else if (w.type == GgmlType::BF16) {
    auto* b = reinterpret_cast<uint16_t*>(act_scratch(static_cast<size_t>(n) * sizeof(uint16_t)));
    convert_to_bf16(x, b, n);
    xb = b;
  }
  const int64_t n_chunks = (w.rows + kFloatRowChunk - 1) / kFloatRowChunk;
  const int64_t t_rows = prof ? detail::profile_now_ns() : 0;
  std::atomic<int64_t> busy_ns{0};
  const int team = parallel_for(
      n_chunks,
      [&](int64_t c0, int64_t c1) {
        const int64_t t_busy = prof ? detail::profile_now_ns() : 0;
        for (int64_t c = c0; c < c1; ++c)
          matmul_float_rows(w, x, xb, n_tokens, gemm_order, c * kFloatRowChunk, std::min(w.rows, (c + 1) * kFloatRowChunk), y,
                            w.rows, isa);
        if (prof) busy_ns.fetch_add(detail::profile_now_ns() - t_busy, std::memory_order_relaxed);
      },
      worth_parallel(w.rows * w.cols * n_tokens));
  if (prof) detail::matmul_profile_add(0, busy_ns.load() / team);
  if (prof) detail::matmul_profile_add(t_rows - t_prep, 0);
}

void matmul_multi(const MatmulJob* jobs, int n_jobs, const float* x, int n_tokens, const uint8_t* gemm_order, Isa isa) {
  bool fuse = n_jobs > 1;
  for (int j = 0; j < n_jobs && fuse; ++j) fuse = is_quantized(jobs[j].w->type) && jobs[j].w->cols == jobs[0].w->cols;
  if (!fuse) {
    for (int j = 0; j < n_jobs; ++j) matmul(*jobs[j].w, x, n_tokens, jobs[j].y, gemm_order, isa);
    return;
  }
  matmul_quantized(jobs, n_jobs, x, n_tokens, gemm_order, isa);
}

void dequantize_row(const WeightView& w, int64_t r, float* out) {
  if (w.layout != WeightLayout::kRows) {
    std::vector<uint8_t> row(static_cast<size_t>(w.row_bytes));
    untile16_rows(w, r, r + 1, row.data());
    dequantize(w.type, row.data(), out, w.cols);
    return;
  }
  dequantize(w.type, static_cast<const uint8_t*>(w.data) + r * w.row_bytes, out, w.cols);
}

}  // namespace pdserve::kernels
