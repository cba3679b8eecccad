// Google Benchmark of kernels::matmul on a 2048×2048 weight matrix (F16, BF16, Q8_0, Q4_0,
// Q4_K, Q5_K, Q6_K) with 1 and 32 tokens (the matrix stays in the last-level cache), one-token
// products with a 32768×2048 matrix read from memory (BM_MatmulStream: a decode step's
// access pattern), plus this machine's streaming-read bandwidth (the bound a decode step,
// which reads every weight once, cannot beat; BM_StreamReadPrefetch with software prefetch).
// Counters: bytes_per_second = weight bytes read per second; FLOP/s = 2·rows·cols·tokens
// per iteration. Threads: OpenMP's (OMP_NUM_THREADS, default all cores).
// BM_PeakInt8Vnni / BM_PeakInt8Avx2 / BM_PeakFma32 / BM_PeakInt8Amx: the machine's compute peak
// (register-only loops, issue #21); BM_PeakVecDotBlockVnni: the ceiling ggml's vec_dot order leaves of it;
// BM_VnniWith/KIND: that loop with two instructions of another kind, which either share
// VPDPBUSD's ports or run beside it; BM_VnniWith/bcast_per_N: with one activation broadcast
// from memory per N VPDPBUSD instead. BM_AttentionF16Group: one GQA group's attention with the cache in L2;
// BM_AttentionDecodeTinyLlama/{f16,q8_0,q4_0}: a decode step's attention over all layers with
// the cache read from memory (long-context decode, issue #21 target 5). BM_QuantizeAct/{Q8_K,
// Q8_0}: the activations' quantisation before a quantised matmul.
#include <benchmark/benchmark.h>
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "gguf/ggml_types.h"
#include "base/fp16.h"
#include "base/huge_pages.h"
#include "kernels/attention.h"
#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "kernels/parallel.h"
#include "kernels/weight_layout.h"
#include "kernels/qgemm.h"
#include "kernels/quants.h"

namespace {

using pdserve::gguf::GgmlType;
using pdserve::kernels::QOrder;

struct Matrix {
  std::vector<uint8_t> data;
  pdserve::kernels::WeightView view;
};

Matrix make_matrix(GgmlType t, int64_t rows, int64_t cols) {
  Matrix m;
  const int64_t rb = pdserve::gguf::row_bytes(t, cols);
  m.data.resize(static_cast<size_t>(rb * rows));
  std::mt19937 rng(42);
  std::normal_distribution<float> nd(0.f, 0.02f);
  std::vector<float> row(cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (float& x : row) x = nd(rng);
    pdserve::kernels::quantize(t, row.data(), m.data.data() + r * rb, cols);
  }
  m.view = {m.data.data(), t, rows, cols, rb};
  return m;
}

/// One matrix per (type, rows, layout), built once; `tiles16`: in WeightLayout::kTiles16
/// (kernels/weight_layout.h), as Model::load lays out Q4_0 and the K-quants.
const Matrix& cached_matrix(GgmlType t, int64_t rows, int64_t cols, bool tiles16 = false) {
  static std::vector<std::unique_ptr<Matrix>> cache;
  const auto layout = tiles16 ? pdserve::kernels::WeightLayout::kTiles16 : pdserve::kernels::WeightLayout::kRows;
  for (const auto& m : cache)
    if (m->view.type == t && m->view.rows == rows && m->view.layout == layout) return *m;
  cache.push_back(std::make_unique<Matrix>(make_matrix(t, rows, cols)));
  if (tiles16) pdserve::kernels::tile16_in_place(cache.back()->view);
  return *cache.back();
}

/// n activations from N(0, 1), the same every call.
std::vector<float> random_activations(int64_t n) {
  std::vector<float> x(n);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (float& v : x) v = nd(rng);
  return x;
}

void run_matmul(benchmark::State& state, GgmlType t, int64_t rows, bool tiles16 = false) {
  const int64_t n = 2048;
  const int tokens = static_cast<int>(state.range(0));
  pdserve::kernels::set_compute_threads(omp_get_max_threads());  // OMP_NUM_THREADS, else every CPU
  const Matrix& m = cached_matrix(t, rows, n, tiles16);
  const std::vector<float> x = random_activations(tokens * n);
  std::vector<float> y(tokens * rows);
  // Multi-token batches as a prompt (GEMM order; micro-batches of >= 8 tokens tiled, as
  // kernels::gemm_order_flag gives them), one token as a decode step.
  const uint8_t prompt = static_cast<uint8_t>(1 | (tokens >= 8 ? pdserve::kernels::kGemmTiledBatch : 0));
  std::vector<uint8_t> order(tokens, tokens > 1 ? prompt : 0);
  for (auto _ : state) {
    pdserve::kernels::matmul(m.view, x.data(), tokens, y.data(), order.data());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(m.data.size()));
  state.counters["FLOP/s"] =
      benchmark::Counter(2.0 * rows * n * tokens * state.iterations(), benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  state.counters["threads"] = pdserve::kernels::compute_threads();
}

void BM_Matmul(benchmark::State& state, GgmlType t) { run_matmul(state, t, 2048); }
void BM_MatmulStream(benchmark::State& state, GgmlType t) { run_matmul(state, t, 32768); }
void BM_MatmulStreamTiles16(benchmark::State& state, GgmlType t) { run_matmul(state, t, 32768, true); }
void BM_MatmulTiles16(benchmark::State& state, GgmlType t) { run_matmul(state, t, 2048, true); }

BENCHMARK_CAPTURE(BM_Matmul, F16, GgmlType::F16)->Arg(1)->Arg(32)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Matmul, BF16, GgmlType::BF16)->Arg(1)->Arg(32)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Matmul, Q8_0, GgmlType::Q8_0)->Arg(1)->Arg(32)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Matmul, Q4_0, GgmlType::Q4_0)->Arg(1)->Arg(32)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Matmul, Q4_K, GgmlType::Q4_K)->Arg(1)->Arg(32)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Matmul, Q5_K, GgmlType::Q5_K)->Arg(1)->Arg(32)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Matmul, Q6_K, GgmlType::Q6_K)->Arg(1)->Arg(32)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_MatmulStream, F16, GgmlType::F16)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_MatmulStream, Q8_0, GgmlType::Q8_0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_MatmulStream, Q4_0, GgmlType::Q4_0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_MatmulStream, Q4_K, GgmlType::Q4_K)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_MatmulStream, Q5_K, GgmlType::Q5_K)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_MatmulStream, Q6_K, GgmlType::Q6_K)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();
// In-cache GEMM on the layout Model::load gives (a prompt's 32 or 128 tokens): the kernels'
// compute efficiency apart from memory (FLOP/s against BM_PeakInt8Vnni).
BENCHMARK_CAPTURE(BM_MatmulTiles16, Q8_0, GgmlType::Q8_0)->Arg(32)->Arg(128)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_MatmulTiles16, Q4_0, GgmlType::Q4_0)->Arg(32)->Arg(128)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_MatmulTiles16, Q4_K, GgmlType::Q4_K)->Arg(32)->Arg(128)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_MatmulTiles16, Q5_K, GgmlType::Q5_K)->Arg(32)->Arg(128)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_MatmulTiles16, Q6_K, GgmlType::Q6_K)->Arg(32)->Arg(128)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_MatmulStreamTiles16, Q8_0, GgmlType::Q8_0)->Arg(1)->Arg(16)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_MatmulStreamTiles16, Q4_0, GgmlType::Q4_0)->Arg(1)->Arg(16)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_MatmulStreamTiles16, Q4_K, GgmlType::Q4_K)->Arg(1)->Arg(16)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_MatmulStreamTiles16, Q5_K, GgmlType::Q5_K)->Arg(1)->Arg(16)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_MatmulStreamTiles16, Q6_K, GgmlType::Q6_K)->Arg(1)->Arg(16)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The GEMM kernel alone (issue #21, targets 2 and 3): the AVX-512 VNNI QKernel that Model::load's
// kTiles16 layout gets, called directly on one thread (no activation quantisation, no fork /
// join). Args: tokens, rows, columns, the tokens' gemm_order flag (5: a prompt batch's order,
// quant_order with kGemmTiledBatch; 2: a decode token's, the batched GEMV), and rows per call
// (0: all; 64: matmul's row chunks of a batch). /16/32/2048/5/0 is a prompt, /32/64/2048/2/0
// batched decode (B=32; 64 rows: the four-tile and two-tile passes). The weights (36-136 KB)
// and activations (40-80 KB) stay in the core's L2, so FLOP/s against BM_PeakInt8Vnni/1 is the
// kernel's own compute efficiency; BM_MatmulTiles16 (2048 rows, weights from L3) then shows what
// the memory and threads add. Skipped without AVX-512 VNNI; with AMX 16 tokens go to its tiles, as
// a prompt's do.
void BM_GemmKernel(benchmark::State& state, GgmlType t) {
  namespace k = pdserve::kernels;
  if (!k::cpu_features().avx512vnni) {
    state.SkipWithError("no AVX-512 VNNI");
    return;
  }
  const int tokens = static_cast<int>(state.range(0));
  const int64_t rows = state.range(1), n = state.range(2);
  Matrix m = make_matrix(t, rows, n);
  k::tile16_in_place(m.view);
  const QOrder order = k::quant_order(t, rows, static_cast<uint8_t>(state.range(3)));
  const k::QKernel kern = k::qgemm_avx512vnni_layout(t, order, k::WeightLayout::kTiles16);
  if (kern.gemm == nullptr) {
    state.SkipWithError("no kTiles16 kernel for this type");
    return;
  }
  const std::vector<float> x = random_activations(tokens * n);
  const int64_t rb = k::act_row_bytes(t, n);
  std::vector<uint8_t> act(rb * tokens + 64), packed;
  uint8_t* a = act.data() + (64 - reinterpret_cast<uintptr_t>(act.data()) % 64) % 64;
  for (int i = 0; i < tokens; ++i) k::quantize_act(t, x.data() + i * n, a + i * rb, n);
  const uint8_t* in = a;
  if (kern.pack != nullptr && kern.pack_bytes(m.view, order, tokens) > 0) {
    packed.resize(static_cast<size_t>(kern.pack_bytes(m.view, order, tokens) + 64));
    uint8_t* p = packed.data() + (64 - reinterpret_cast<uintptr_t>(packed.data()) % 64) % 64;
    kern.pack(m.view, order, a, rb, tokens, 0, tokens, p);
    in = p;
  }
  std::vector<float> y(tokens * rows);
  const int64_t chunk = state.range(4) > 0 ? state.range(4) : rows;
  for (auto _ : state) {
    for (int64_t r = 0; r < rows; r += chunk) kern.gemm(m.view, in, rb, tokens, r, std::min(rows, r + chunk), y.data(), rows, order);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.counters["FLOP/s"] =
      benchmark::Counter(2.0 * rows * n * tokens * state.iterations(), benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}
BENCHMARK_CAPTURE(BM_GemmKernel, Q8_0, GgmlType::Q8_0)->Args({16, 32, 2048, 5, 0})->Args({32, 64, 2048, 2, 0})->UseRealTime();
BENCHMARK_CAPTURE(BM_GemmKernel, Q4_0, GgmlType::Q4_0)->Args({16, 32, 2048, 5, 0})->Args({32, 64, 2048, 2, 0})->UseRealTime();
BENCHMARK_CAPTURE(BM_GemmKernel, Q4_K, GgmlType::Q4_K)->Args({16, 32, 2048, 5, 0})->Args({32, 64, 2048, 2, 0})->UseRealTime();
BENCHMARK_CAPTURE(BM_GemmKernel, Q5_K, GgmlType::Q5_K)->Args({16, 32, 2048, 5, 0})->Args({32, 64, 2048, 2, 0})->UseRealTime();
BENCHMARK_CAPTURE(BM_GemmKernel, Q6_K, GgmlType::Q6_K)->Args({16, 32, 2048, 5, 0})->Args({32, 64, 2048, 2, 0})->UseRealTime();

// The activations' quantisation before every quantised matmul (kernels::quantize_act, one
// thread): range(0) rows of 2048 values, Q8_K (the K-quants') or Q8_0 (the legacy types').
// bytes_per_second = float input bytes per second.
void BM_QuantizeAct(benchmark::State& state, GgmlType wt) {
  const int64_t cols = 2048, n = state.range(0);
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x(cols * n);
  for (float& v : x) v = nd(rng);
  const int64_t rb = pdserve::kernels::act_row_bytes(wt, cols);
  std::vector<uint8_t> out(rb * n + 64);
  for (auto _ : state) {
    for (int64_t t = 0; t < n; ++t) pdserve::kernels::quantize_act(wt, x.data() + t * cols, out.data() + t * rb, cols);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * n * cols * static_cast<int64_t>(sizeof(float)));
}
BENCHMARK_CAPTURE(BM_QuantizeAct, Q8_K, GgmlType::Q4_K)->Arg(64)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_QuantizeAct, Q8_0, GgmlType::Q4_0)->Arg(64)->Unit(benchmark::kMicrosecond)->UseRealTime();

// One parallel_for of 16 ranges whose bodies do nothing (range(0) threads): the fork/join's
// own cost per call, which every GEMV of a decode step pays.
void BM_ParallelForEmpty(benchmark::State& state) {
  pdserve::kernels::set_compute_threads(static_cast<int>(state.range(0)));
  for (auto _ : state)
    pdserve::kernels::parallel_for(16, [](int64_t b, int64_t e) { benchmark::DoNotOptimize(b + e); }, true, 1);
}
BENCHMARK(BM_ParallelForEmpty)->Arg(1)->Arg(2)->UseRealTime();

// A decode step's GEMVs of one kind, from memory: one token against copies of one rows×cols
// matrix (a TinyLlama-1.1B layer's ffn_gate — 5632×2048 — or ffn_down — 2048×5632), Tiles16
// as Model::load lays them out, one after the other as the forward pass runs them. The
// copies fill 1 GiB of huge pages (as Model::load's copy of the weights), so that they come
// from DRAM even on a CPU with a large L3: 22 of them (a layer stack, 143 MB of Q4_0) stayed
// in the 480 MB L3 of a Granite Rapids Xeon and read 1.5x as fast as the model's 600 MB.
// bytes_per_second against BM_StreamRead is issue #21's target 1 for that kind of matrix.
void BM_GemvLayers(benchmark::State& state, GgmlType t, int64_t rows, int64_t cols) {
  constexpr size_t kStackBytes = size_t{1} << 30;
  pdserve::kernels::set_compute_threads(omp_get_max_threads());
  static pdserve::HugePageBuffer stack(kStackBytes);  // the copies of the kind last run
  static pdserve::kernels::WeightView current{};
  static size_t bytes = 0;
  if (bytes == 0 || current.type != t || current.rows != rows || current.cols != cols) {
    Matrix one = make_matrix(t, rows, cols);
    pdserve::kernels::tile16_in_place(one.view);
    bytes = one.data.size();
    for (size_t l = 0; l < kStackBytes / bytes; ++l) std::memcpy(stack.get() + l * bytes, one.data.data(), bytes);
    current = one.view;
  }
  const size_t copies = kStackBytes / bytes;
  const std::vector<float> x = random_activations(cols);
  std::vector<float> y(rows);
  const uint8_t order = 0;
  for (auto _ : state) {
    for (size_t l = 0; l < copies; ++l) {
      pdserve::kernels::WeightView v = current;
      v.data = stack.get() + l * bytes;
      pdserve::kernels::matmul(v, x.data(), 1, y.data(), &order);
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(copies * bytes));
  state.counters["threads"] = pdserve::kernels::compute_threads();
}
// The same GEMV (one token) on one 512×2048 matrix that stays in L2: the kernel's compute
// rate apart from memory. A GEMV streams at the memory's pace only if this is well above
// BM_StreamRead.
void BM_GemvInCache(benchmark::State& state, GgmlType t) { run_matmul(state, t, 512, true); }
BENCHMARK_CAPTURE(BM_GemvInCache, Q8_0, GgmlType::Q8_0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_GemvInCache, Q4_0, GgmlType::Q4_0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_GemvInCache, Q4_K, GgmlType::Q4_K)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_GemvInCache, Q5_K, GgmlType::Q5_K)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_GemvInCache, Q6_K, GgmlType::Q6_K)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_GemvLayers, Q4_0_gate, GgmlType::Q4_0, 5632, 2048)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_GemvLayers, Q4_0_down, GgmlType::Q4_0, 2048, 5632)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_GemvLayers, Q4_K_gate, GgmlType::Q4_K, 5632, 2048)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_GemvLayers, Q4_K_down, GgmlType::Q4_K, 2048, 5632)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_GemvLayers, Q5_K_gate, GgmlType::Q5_K, 5632, 2048)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_GemvLayers, Q5_K_down, GgmlType::Q5_K, 2048, 5632)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_GemvLayers, Q6_K_gate, GgmlType::Q6_K, 5632, 2048)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_GemvLayers, Q6_K_down, GgmlType::Q6_K, 2048, 5632)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_GemvLayers, Q8_0_gate, GgmlType::Q8_0, 5632, 2048)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_GemvLayers, Q8_0_down, GgmlType::Q8_0, 2048, 5632)->Unit(benchmark::kMicrosecond)->UseRealTime();

// Streaming read of a 1 GiB buffer with `threads` OpenMP threads (each sums a contiguous
// slice with 4 independent 64-bit accumulators; the compiler vectorises it). `prefetch`:
// also software-prefetch 2 KiB ahead, as the matmul kernels do — the hardware prefetchers
// alone do not reach a core's read bandwidth.
template <bool prefetch>
void stream_read(benchmark::State& state) {
  const size_t bytes = size_t{1} << 30;
  const int threads = static_cast<int>(state.range(0));
  static std::vector<uint64_t> buf;
  if (buf.empty()) {
    buf.resize(bytes / sizeof(uint64_t));
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < buf.size(); ++i) buf[i] = i;  // fault every page in
  }
  const size_t n = buf.size();
  for (auto _ : state) {
    uint64_t total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
      const int nt = omp_get_num_threads(), id = omp_get_thread_num();
      const size_t lo = n * id / nt, hi = n * (id + 1) / nt;
      const uint64_t* p = buf.data();
      uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
      for (size_t i = lo; i + 8 <= hi; i += 8) {
        if constexpr (prefetch) asm volatile("prefetcht1 %0" : : "m"(p[std::min(i + 256, hi - 1)]));  // a line per 8 values
        a0 += p[i] + p[i + 4]; a1 += p[i + 1] + p[i + 5]; a2 += p[i + 2] + p[i + 6]; a3 += p[i + 3] + p[i + 7];
      }
      total += a0 + a1 + a2 + a3;
    }
    benchmark::DoNotOptimize(total);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes));
}
void BM_StreamRead(benchmark::State& state) { stream_read<false>(state); }
void BM_StreamReadPrefetch(benchmark::State& state) { stream_read<true>(state); }
BENCHMARK(BM_StreamRead)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
BENCHMARK(BM_StreamReadPrefetch)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);

// Compute peak (issue #21): register-only loops of the instruction sequences the kernels
// use, on range(0) threads (one OpenMP region; each thread runs the same loop; the time is
// the region's wall time). Nothing touches memory, so the rate is the core's issue rate
// for that sequence times the cores. Counter OP/s: 2 ops per multiply-add.
//  - BM_PeakInt8Avx2: the AVX2 int8 dot of the Q8_0/Q4_0/K-quant GEMMs (qgemm_simd.inc
//    without VNNI): vpmaddubsw (u8×s8 → 16 s16 pair sums) + vpmaddwd by ones (→ 8 s32) +
//    vpaddd into the accumulator = 32 multiply-adds per 256-bit step; 8 independent
//    accumulators (more than the 3+3+1-cycle latency × 2 issue ports needs).
//  - BM_PeakInt8Vnni: the same dot with AVX-512 VNNI (vpdpbusd zmm, 64 multiply-adds per
//    instruction; skipped on CPUs without it).
//  - BM_PeakFma32: vfmadd231ps ymm, 10 independent accumulators (latency 4 × 2 FMA ports
//    = 8 in flight needed): 8 multiply-adds per instruction.
// The int8 loop is inline asm (8 accumulators in registers); in the FMA loop an empty asm
// statement makes the operands opaque each iteration, so the compiler can neither hoist the
// products nor drop the loop. Run on an idle machine: the counter is per wall-clock second.
constexpr int64_t kPeakIters = int64_t{1} << 24;

int64_t peak_int8_thread() {
  // Written in asm so that the 8 accumulators stay in registers (ymm8-15); ymm0 = the
  // activations, ymm1-4 = four weight vectors, ymm5 = 16-bit ones, ymm6/7 = temporaries.
  alignas(32) int32_t out[8];
  int64_t n = kPeakIters;
  asm volatile(
      "vpcmpeqb %%ymm0, %%ymm0, %%ymm0\n\t"
      "vpabsb %%ymm0, %%ymm0\n\t"  // activations: 1
      "vpcmpeqb %%ymm1, %%ymm1, %%ymm1\n\t"  // weights: -1, 1, -1, 1
      "vpabsb %%ymm1, %%ymm2\n\t"
      "vmovdqa %%ymm1, %%ymm3\n\t"
      "vmovdqa %%ymm2, %%ymm4\n\t"
      "vpsrlw $15, %%ymm3, %%ymm5\n\t"  // 16-bit ones
      "vpxor %%ymm8, %%ymm8, %%ymm8\n\t"
      "vpxor %%ymm9, %%ymm9, %%ymm9\n\t"
      "vpxor %%ymm10, %%ymm10, %%ymm10\n\t"
      "vpxor %%ymm11, %%ymm11, %%ymm11\n\t"
      "vpxor %%ymm12, %%ymm12, %%ymm12\n\t"
      "vpxor %%ymm13, %%ymm13, %%ymm13\n\t"
      "vpxor %%ymm14, %%ymm14, %%ymm14\n\t"
      "vpxor %%ymm15, %%ymm15, %%ymm15\n\t"
      "1:\n\t"
      "vpmaddubsw %%ymm1, %%ymm0, %%ymm6\n\t"
      "vpmaddwd %%ymm5, %%ymm6, %%ymm6\n\t"
      "vpaddd %%ymm6, %%ymm8, %%ymm8\n\t"
      "vpmaddubsw %%ymm2, %%ymm0, %%ymm7\n\t"
      "vpmaddwd %%ymm5, %%ymm7, %%ymm7\n\t"
      "vpaddd %%ymm7, %%ymm9, %%ymm9\n\t"
      "vpmaddubsw %%ymm3, %%ymm0, %%ymm6\n\t"
      "vpmaddwd %%ymm5, %%ymm6, %%ymm6\n\t"
      "vpaddd %%ymm6, %%ymm10, %%ymm10\n\t"
      "vpmaddubsw %%ymm4, %%ymm0, %%ymm7\n\t"
      "vpmaddwd %%ymm5, %%ymm7, %%ymm7\n\t"
      "vpaddd %%ymm7, %%ymm11, %%ymm11\n\t"
      "vpmaddubsw %%ymm1, %%ymm0, %%ymm6\n\t"
      "vpmaddwd %%ymm5, %%ymm6, %%ymm6\n\t"
      "vpaddd %%ymm6, %%ymm12, %%ymm12\n\t"
      "vpmaddubsw %%ymm2, %%ymm0, %%ymm7\n\t"
      "vpmaddwd %%ymm5, %%ymm7, %%ymm7\n\t"
      "vpaddd %%ymm7, %%ymm13, %%ymm13\n\t"
      "vpmaddubsw %%ymm3, %%ymm0, %%ymm6\n\t"
      "vpmaddwd %%ymm5, %%ymm6, %%ymm6\n\t"
      "vpaddd %%ymm6, %%ymm14, %%ymm14\n\t"
      "vpmaddubsw %%ymm4, %%ymm0, %%ymm7\n\t"
      "vpmaddwd %%ymm5, %%ymm7, %%ymm7\n\t"
      "vpaddd %%ymm7, %%ymm15, %%ymm15\n\t"
      "dec %[n]\n\t"
      "jnz 1b\n\t"
      "vpaddd %%ymm9, %%ymm8, %%ymm8\n\t"
      "vpaddd %%ymm11, %%ymm10, %%ymm10\n\t"
      "vpaddd %%ymm13, %%ymm12, %%ymm12\n\t"
      "vpaddd %%ymm15, %%ymm14, %%ymm14\n\t"
      "vpaddd %%ymm10, %%ymm8, %%ymm8\n\t"
      "vpaddd %%ymm14, %%ymm12, %%ymm12\n\t"
      "vpaddd %%ymm12, %%ymm8, %%ymm8\n\t"
      "vmovdqa %%ymm8, %[out]\n\t"
      "vzeroupper\n\t"
      : [n] "+r"(n), [out] "=m"(out)
      :
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13",
        "xmm14", "xmm15", "cc");
  return out[0];
}
constexpr int64_t kPeakInt8MacsPerIter = 8 * 32;

// Zeroes zmm8-15 (the accumulators of the AVX-512 peak loops below).
#define PDS_ZERO_ZMM8_15                                                                    \
  "vpxord %%zmm8, %%zmm8, %%zmm8\n\tvpxord %%zmm9, %%zmm9, %%zmm9\n\t"                     \
  "vpxord %%zmm10, %%zmm10, %%zmm10\n\tvpxord %%zmm11, %%zmm11, %%zmm11\n\t"               \
  "vpxord %%zmm12, %%zmm12, %%zmm12\n\tvpxord %%zmm13, %%zmm13, %%zmm13\n\t"               \
  "vpxord %%zmm14, %%zmm14, %%zmm14\n\tvpxord %%zmm15, %%zmm15, %%zmm15\n\t"

constexpr int64_t kPeakVnniMacsPerIter = 12 * 64;

// The AVX-512 VNNI int8 dot of the Q8_0/Q4_0/K-quant GEMMs on CPUs that have it
// (qgemm_avx512*.cc): vpdpbusd zmm (64 u8×s8 multiply-adds into 16 s32 lanes), 12
// independent accumulators (zmm8-19: enough for a 4-5-cycle latency on 2 ports).
// PDS_VNNI_LOOP(name, body) runs `body` kPeakIters times with zmm1 = 1 bytes, zmm2 = −1,
// zmm8-19 zero, zmm20-23 = zmm1 and [mem] 16 int32 in memory; PDS_VNNI_WITH(name, extra) is
// the 12-VPDPBUSD loop with `extra` added to each iteration: the peak is
// the loop alone (extra ""); BM_VnniWith/KIND adds two instructions of one kind on registers
// of their own (no dependence on the accumulators), to see which share VPDPBUSD's ports (issue
// #21, RESULTS "Fewer multiply-port instructions"). OP/s counts only the VPDPBUSD
// multiply-adds, so against BM_PeakInt8Vnni a rate 12/14 as high says the two take VPDPBUSD's
// ports, and the same rate says they run beside it. Kinds: vpmulld, vpdpwssd, vfmadd231ps,
// vcvtdq2ps, vpbroadcastd (from memory), vpandd, vpshufd, vpermt2w, vpslld, vbroadcasti32x4 (from memory).
#define PDS_VNNI_LOOP(name, body)                                                                      \
  __attribute__((target("avx512f,avx512bw,avx512vnni"))) int64_t name() {                              \
    alignas(64) int32_t out[16];                                                                       \
    alignas(64) static const int32_t mem[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}; \
    int64_t n = kPeakIters;                                                                            \
    asm volatile("vpternlogd $0xff, %%zmm0, %%zmm0, %%zmm0\n\t"                                        \
                 "vpabsb %%zmm0, %%zmm1\n\t"                                                           \
                 "vmovdqa64 %%zmm0, %%zmm2\n\t" PDS_ZERO_ZMM8_15                                       \
                 "vpxord %%zmm16, %%zmm16, %%zmm16\n\tvpxord %%zmm17, %%zmm17, %%zmm17\n\t"            \
                 "vpxord %%zmm18, %%zmm18, %%zmm18\n\tvpxord %%zmm19, %%zmm19, %%zmm19\n\t"            \
                 "vmovdqa64 %%zmm1, %%zmm20\n\tvmovdqa64 %%zmm1, %%zmm21\n\t"                          \
                 "vmovdqa64 %%zmm1, %%zmm22\n\tvmovdqa64 %%zmm1, %%zmm23\n\t"                          \
                 "1:\n\t" body                                                                         \
                 "dec %[n]\n\t"                                                                        \
                 "jnz 1b\n\t"                                                                          \
                 "vpaddd %%zmm9, %%zmm8, %%zmm8\n\tvpaddd %%zmm20, %%zmm8, %%zmm8\n\t"                 \
                 "vpaddd %%zmm22, %%zmm8, %%zmm8\n\t"                                                  \
                 "vmovdqa32 %%zmm8, %[out]\n\t"                                                        \
                 "vzeroupper\n\t"                                                                      \
                 : [n] "+r"(n), [out] "=m"(out)                                                        \
                 : [mem] "r"(mem)                                                                      \
                 : "xmm0", "xmm1", "xmm2", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", \
                   "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", "xmm23", "cc"); \
    return out[0];                                                                                     \
  }
// The 12 VPDPBUSD of the peak loop (zmm2 × zmm1 into zmm8-19).
#define PDS_VNNI_12                                                                        \
  "vpdpbusd %%zmm2, %%zmm1, %%zmm8\n\tvpdpbusd %%zmm2, %%zmm1, %%zmm9\n\t"               \
  "vpdpbusd %%zmm2, %%zmm1, %%zmm10\n\tvpdpbusd %%zmm2, %%zmm1, %%zmm11\n\t"             \
  "vpdpbusd %%zmm2, %%zmm1, %%zmm12\n\tvpdpbusd %%zmm2, %%zmm1, %%zmm13\n\t"             \
  "vpdpbusd %%zmm2, %%zmm1, %%zmm14\n\tvpdpbusd %%zmm2, %%zmm1, %%zmm15\n\t"             \
  "vpdpbusd %%zmm2, %%zmm1, %%zmm16\n\tvpdpbusd %%zmm2, %%zmm1, %%zmm17\n\t"             \
  "vpdpbusd %%zmm2, %%zmm1, %%zmm18\n\tvpdpbusd %%zmm2, %%zmm1, %%zmm19\n\t"
#define PDS_VNNI_WITH(name, extra) PDS_VNNI_LOOP(name, PDS_VNNI_12 extra)
PDS_VNNI_WITH(peak_vnni_thread, "")
PDS_VNNI_WITH(vnni_with_vpmulld, "vpmulld %%zmm1, %%zmm20, %%zmm20\n\tvpmulld %%zmm1, %%zmm21, %%zmm21\n\t")
PDS_VNNI_WITH(vnni_with_vpdpwssd, "vpdpwssd %%zmm1, %%zmm1, %%zmm20\n\tvpdpwssd %%zmm1, %%zmm1, %%zmm21\n\t")
PDS_VNNI_WITH(vnni_with_vfmadd, "vfmadd231ps %%zmm1, %%zmm1, %%zmm20\n\tvfmadd231ps %%zmm1, %%zmm1, %%zmm21\n\t")
PDS_VNNI_WITH(vnni_with_vcvtdq2ps, "vcvtdq2ps %%zmm1, %%zmm20\n\tvcvtdq2ps %%zmm1, %%zmm21\n\t")
PDS_VNNI_WITH(vnni_with_vpbroadcastd, "vpbroadcastd (%[mem]), %%zmm20\n\tvpbroadcastd 4(%[mem]), %%zmm21\n\t")
PDS_VNNI_WITH(vnni_with_vpandd, "vpandd %%zmm1, %%zmm22, %%zmm20\n\tvpandd %%zmm1, %%zmm23, %%zmm21\n\t")
PDS_VNNI_WITH(vnni_with_vpshufd, "vpshufd $0x55, %%zmm22, %%zmm20\n\tvpshufd $0xaa, %%zmm23, %%zmm21\n\t")
PDS_VNNI_WITH(vnni_with_vpermt2w, "vpermt2w %%zmm22, %%zmm1, %%zmm20\n\tvpermt2w %%zmm23, %%zmm1, %%zmm21\n\t")
PDS_VNNI_WITH(vnni_with_vpslld, "vpslld $16, %%zmm22, %%zmm20\n\tvpslld $16, %%zmm23, %%zmm21\n\t")
PDS_VNNI_WITH(vnni_with_vbroadcasti32x4, "vbroadcasti32x4 (%[mem]), %%zmm20\n\tvbroadcasti32x4 16(%[mem]), %%zmm21\n\t")

// The same 12 VPDPBUSD (12 accumulators) with their 4-byte activation operands broadcast from
// memory, as the quantised GEMMs' row kernels take them (a token's 4 bytes against 16 rows):
// BM_VnniWith/bcast_per_1 one VPBROADCASTD per VPDPBUSD (q4k_tile), bcast_per_2 one per two
// (two 16-row tiles share it: q4k_tile_pair), bcast_per_4 one per four. On the Ice Lake Xeon
// bcast_per_1 ran at 57 % of BM_PeakInt8Vnni, bcast_per_2 at 91 % (bench/RESULTS.md, "One
// broadcast per two VPDPBUSD").
#define PDS_B(off, reg) "vpbroadcastd " #off "(%[mem]), %%zmm" #reg "\n\t"
#define PDS_D(src, acc) "vpdpbusd %%zmm" #src ", %%zmm1, %%zmm" #acc "\n\t"
PDS_VNNI_LOOP(vnni_bcast_per_1, PDS_B(0, 20) PDS_D(20, 8) PDS_B(4, 21) PDS_D(21, 9) PDS_B(8, 20) PDS_D(20, 10)
               PDS_B(12, 21) PDS_D(21, 11) PDS_B(16, 20) PDS_D(20, 12) PDS_B(20, 21) PDS_D(21, 13) PDS_B(24, 20) PDS_D(20, 14)
               PDS_B(28, 21) PDS_D(21, 15) PDS_B(32, 20) PDS_D(20, 16) PDS_B(36, 21) PDS_D(21, 17) PDS_B(40, 20) PDS_D(20, 18)
               PDS_B(44, 21) PDS_D(21, 19))
PDS_VNNI_LOOP(vnni_bcast_per_2, PDS_B(0, 20) PDS_D(20, 8) PDS_D(20, 9) PDS_B(4, 21) PDS_D(21, 10) PDS_D(21, 11)
               PDS_B(8, 20) PDS_D(20, 12) PDS_D(20, 13) PDS_B(12, 21) PDS_D(21, 14) PDS_D(21, 15)
               PDS_B(16, 20) PDS_D(20, 16) PDS_D(20, 17) PDS_B(20, 21) PDS_D(21, 18) PDS_D(21, 19))
PDS_VNNI_LOOP(vnni_bcast_per_4, PDS_B(0, 20) PDS_D(20, 8) PDS_D(20, 9) PDS_D(20, 10) PDS_D(20, 11)
               PDS_B(4, 21) PDS_D(21, 12) PDS_D(21, 13) PDS_D(21, 14) PDS_D(21, 15)
               PDS_B(8, 20) PDS_D(20, 16) PDS_D(20, 17) PDS_D(20, 18) PDS_D(20, 19))
// Other memory µops beside the 12 VPDPBUSD: ld64_per_N one 64-byte load (VMOVDQA64, an L1
// hit) per N of them, as a VPDPBUSD operand or sum that a kernel keeps in memory costs;
// store_per_N one 64-byte store per N (to one line), as a kernel's accumulators kept in memory
// cost. On the Ice Lake Xeon VM these showed that it runs about one vector load a cycle, not
// two (bench/RESULTS.md, "Vector loads and stores cost this VM").
#define PDS_L(reg) "vmovdqa64 (%[mem]), %%zmm" #reg "\n\t"
#define PDS_S "vmovdqa64 %%zmm1, %[out]\n\t"
PDS_VNNI_LOOP(vnni_ld64_per_1, PDS_L(20) PDS_D(20, 8) PDS_L(21) PDS_D(21, 9) PDS_L(20) PDS_D(20, 10) PDS_L(21) PDS_D(21, 11)
               PDS_L(20) PDS_D(20, 12) PDS_L(21) PDS_D(21, 13) PDS_L(20) PDS_D(20, 14) PDS_L(21) PDS_D(21, 15)
               PDS_L(20) PDS_D(20, 16) PDS_L(21) PDS_D(21, 17) PDS_L(20) PDS_D(20, 18) PDS_L(21) PDS_D(21, 19))
PDS_VNNI_LOOP(vnni_ld64_per_2, PDS_L(20) PDS_D(20, 8) PDS_D(20, 9) PDS_L(21) PDS_D(21, 10) PDS_D(21, 11)
               PDS_L(20) PDS_D(20, 12) PDS_D(20, 13) PDS_L(21) PDS_D(21, 14) PDS_D(21, 15)
               PDS_L(20) PDS_D(20, 16) PDS_D(20, 17) PDS_L(21) PDS_D(21, 18) PDS_D(21, 19))
PDS_VNNI_LOOP(vnni_store_per_2, PDS_D(1, 8) PDS_D(1, 9) PDS_S PDS_D(1, 10) PDS_D(1, 11) PDS_S PDS_D(1, 12) PDS_D(1, 13) PDS_S
               PDS_D(1, 14) PDS_D(1, 15) PDS_S PDS_D(1, 16) PDS_D(1, 17) PDS_S PDS_D(1, 18) PDS_D(1, 19) PDS_S)
PDS_VNNI_LOOP(vnni_store_per_4, PDS_D(1, 8) PDS_D(1, 9) PDS_D(1, 10) PDS_D(1, 11) PDS_S PDS_D(1, 12) PDS_D(1, 13) PDS_D(1, 14)
               PDS_D(1, 15) PDS_S PDS_D(1, 16) PDS_D(1, 17) PDS_D(1, 18) PDS_D(1, 19) PDS_S)
#undef PDS_L
#undef PDS_S
#undef PDS_B
#undef PDS_D
#undef PDS_VNNI_WITH
#undef PDS_VNNI_12
#undef PDS_VNNI_LOOP

// The ceiling of ggml's vec_dot order (quants.h) on the VNNI kernels: per 32-value block of
// a (row, token) pair, the exact int32 group sums must become floats and meet their block's
// scale product before the next block (acc = fma(d_w * d_a, float(sums), acc)), so each
// vpdpbusd (64 multiply-adds: a block of two tokens, qgemm_avx512_legacy.cc's pair tile) comes
// with a register copy of its start value (−o·s4), a vcvtdq2ps, a vmulps and a vfmadd231ps.
// 8 independent chains in registers (zmm8-15 accumulators, zmm16-23 sums, zmm24-31 products).
__attribute__((target("avx512f,avx512bw,avx512vnni"))) int64_t peak_vecdot_block_thread() {
  alignas(64) float out[16];
  int64_t n = kPeakIters;
  asm volatile(
      "vpternlogd $0xff, %%zmm0, %%zmm0, %%zmm0\n\t"
      "vpabsb %%zmm0, %%zmm1\n\t"                     // activations: 1
      "vmovdqa64 %%zmm0, %%zmm2\n\t"                  // weights: -1
      "vpxord %%zmm3, %%zmm3, %%zmm3\n\t"             // start value of the sums
      "vpabsd %%zmm0, %%zmm4\n\t"
      "vcvtdq2ps %%zmm4, %%zmm4\n\t"                  // d_w = 1.0
      "vmovaps %%zmm4, %%zmm5\n\t"                    // d_a = 1.0
      PDS_ZERO_ZMM8_15
      "1:\n\t"
#define PDS_VECDOT_CHAIN(a, s, p) \
      "vmovdqa64 %%zmm3, %%zmm" #s "\n\t" \
      "vpdpbusd %%zmm2, %%zmm1, %%zmm" #s "\n\t" \
      "vcvtdq2ps %%zmm" #s ", %%zmm" #s "\n\t" \
      "vmulps %%zmm5, %%zmm4, %%zmm" #p "\n\t" \
      "vfmadd231ps %%zmm" #p ", %%zmm" #s ", %%zmm" #a "\n\t"
      PDS_VECDOT_CHAIN(8, 16, 24) PDS_VECDOT_CHAIN(9, 17, 25) PDS_VECDOT_CHAIN(10, 18, 26) PDS_VECDOT_CHAIN(11, 19, 27)
      PDS_VECDOT_CHAIN(12, 20, 28) PDS_VECDOT_CHAIN(13, 21, 29) PDS_VECDOT_CHAIN(14, 22, 30) PDS_VECDOT_CHAIN(15, 23, 31)
#undef PDS_VECDOT_CHAIN
      "dec %[n]\n\t"
      "jnz 1b\n\t"
      "vaddps %%zmm9, %%zmm8, %%zmm8\n\t"
      "vaddps %%zmm11, %%zmm10, %%zmm10\n\t"
      "vaddps %%zmm13, %%zmm12, %%zmm12\n\t"
      "vaddps %%zmm15, %%zmm14, %%zmm14\n\t"
      "vaddps %%zmm10, %%zmm8, %%zmm8\n\t"
      "vaddps %%zmm14, %%zmm12, %%zmm12\n\t"
      "vaddps %%zmm12, %%zmm8, %%zmm8\n\t"
      "vmovaps %%zmm8, %[out]\n\t"
      "vzeroupper\n\t"
      : [n] "+r"(n), [out] "=m"(out)
      :
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15",
        "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", "xmm23", "xmm24", "xmm25", "xmm26", "xmm27", "xmm28",
        "xmm29", "xmm30", "xmm31", "cc");
  return static_cast<int64_t>(out[0]);
}
constexpr int64_t kPeakVecDotMacsPerIter = 8 * 64;

float peak_fma_thread() {
  __m256 c0 = _mm256_set1_ps(0.f), c1 = _mm256_set1_ps(1.f), c2 = _mm256_set1_ps(2.f), c3 = _mm256_set1_ps(3.f),
         c4 = _mm256_set1_ps(4.f), c5 = _mm256_set1_ps(5.f), c6 = _mm256_set1_ps(6.f), c7 = _mm256_set1_ps(7.f),
         c8 = _mm256_set1_ps(8.f), c9 = _mm256_set1_ps(9.f);
  __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-3f);
  for (int64_t i = 0; i < kPeakIters; ++i) {
    asm volatile("" : "+x"(a), "+x"(b));
    c0 = _mm256_fmadd_ps(a, c0, b); c1 = _mm256_fmadd_ps(a, c1, b); c2 = _mm256_fmadd_ps(a, c2, b);
    c3 = _mm256_fmadd_ps(a, c3, b); c4 = _mm256_fmadd_ps(a, c4, b); c5 = _mm256_fmadd_ps(a, c5, b);
    c6 = _mm256_fmadd_ps(a, c6, b); c7 = _mm256_fmadd_ps(a, c7, b); c8 = _mm256_fmadd_ps(a, c8, b);
    c9 = _mm256_fmadd_ps(a, c9, b);
  }
  const __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(c0, c1), _mm256_add_ps(c2, c3)),
                                 _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(c4, c5), _mm256_add_ps(c6, c7)), _mm256_add_ps(c8, c9)));
  return _mm256_cvtss_f32(s);
}
constexpr int64_t kPeakFmaMacsPerIter = 10 * 8;

// AMX-INT8's peak (Intel SDM vol. 1 ch. 18): TDPBSSD on full tiles (16 rows × 64 int8 of A,
// 16 × 64 of B: 16·16·64 multiply-adds each), four independent C tiles (tmm0-3) from
// tmm4-7, registers only. The Q4_0, Q4_K, Q5_K (tiled order) and Q6_K matmuls of 16 or more
// tokens use these tiles where the CPU has them (qgemm_avx512_amx.cc; Q4_0's 32-value blocks
// and Q6_K's lanes use K = 32, half a tile's depth).
constexpr int64_t kPeakAmxMacsPerIter = 4 * 16 * 16 * 64;
int64_t peak_amx_thread() {
  alignas(64) uint8_t cfg[64] = {1};  // palette 1; 8 tiles of 16 rows × 64 bytes
  for (int t = 0; t < 8; ++t) {
    cfg[16 + 2 * t] = 64;
    cfg[48 + t] = 16;
  }
  int64_t n = kPeakIters / 16;  // a TDPBSSD is ~16 cycles: as long as the other peak loops
  asm volatile(
      "ldtilecfg (%[cfg])\n\t"
      "tilezero %%tmm0\n\ttilezero %%tmm1\n\ttilezero %%tmm2\n\ttilezero %%tmm3\n\t"
      "tilezero %%tmm4\n\ttilezero %%tmm5\n\ttilezero %%tmm6\n\ttilezero %%tmm7\n\t"
      "1:\n\t"
      "tdpbssd %%tmm5, %%tmm4, %%tmm0\n\ttdpbssd %%tmm7, %%tmm4, %%tmm1\n\t"
      "tdpbssd %%tmm5, %%tmm6, %%tmm2\n\ttdpbssd %%tmm7, %%tmm6, %%tmm3\n\t"
      "dec %[n]\n\tjnz 1b\n\t"
      "tilerelease\n\t"
      : [n] "+r"(n)
      : [cfg] "r"(cfg)
      : "memory");
  return n;
}

template <typename Fn>
void peak_loop(benchmark::State& state, Fn thread_loop, int64_t macs_per_iter) {
  const int threads = static_cast<int>(state.range(0));
  for (auto _ : state) {
    double sink = 0;
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    sink += static_cast<double>(thread_loop());
    benchmark::DoNotOptimize(sink);
  }
  state.counters["OP/s"] = benchmark::Counter(2.0 * static_cast<double>(macs_per_iter) * kPeakIters * threads * state.iterations(),
                                              benchmark::Counter::kIsRate);
}
void BM_PeakInt8Avx2(benchmark::State& state) { peak_loop(state, peak_int8_thread, kPeakInt8MacsPerIter); }
void BM_PeakFma32(benchmark::State& state) { peak_loop(state, peak_fma_thread, kPeakFmaMacsPerIter); }
void BM_PeakInt8Vnni(benchmark::State& state) {
  if (!__builtin_cpu_supports("avx512vnni") || !__builtin_cpu_supports("avx512bw")) {
    state.SkipWithError("this CPU has no AVX-512 VNNI");
    return;
  }
  peak_loop(state, peak_vnni_thread, kPeakVnniMacsPerIter);
}
void BM_PeakInt8Amx(benchmark::State& state) {
  if (!pdserve::kernels::amx_available()) {
    state.SkipWithError("this CPU has no AMX-INT8 (or Linux did not grant the tile state)");
    return;
  }
  peak_loop(state, peak_amx_thread, kPeakAmxMacsPerIter / 16);  // per kPeakIters: the loop runs kPeakIters / 16 times
}
void BM_PeakVecDotBlockVnni(benchmark::State& state) {
  if (!__builtin_cpu_supports("avx512vnni") || !__builtin_cpu_supports("avx512bw")) {
    state.SkipWithError("this CPU has no AVX-512 VNNI");
    return;
  }
  peak_loop(state, peak_vecdot_block_thread, kPeakVecDotMacsPerIter);
}
BENCHMARK(BM_PeakInt8Vnni)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
BENCHMARK(BM_PeakInt8Amx)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
void BM_VnniWith(benchmark::State& state, int64_t (*thread_loop)()) {
  if (!__builtin_cpu_supports("avx512vnni") || !__builtin_cpu_supports("avx512bw")) {
    state.SkipWithError("this CPU has no AVX-512 VNNI");
    return;
  }
  peak_loop(state, thread_loop, kPeakVnniMacsPerIter);
}
BENCHMARK_CAPTURE(BM_VnniWith, vpmulld, vnni_with_vpmulld)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
BENCHMARK_CAPTURE(BM_VnniWith, vpdpwssd, vnni_with_vpdpwssd)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
BENCHMARK_CAPTURE(BM_VnniWith, vfmadd231ps, vnni_with_vfmadd)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
BENCHMARK_CAPTURE(BM_VnniWith, vcvtdq2ps, vnni_with_vcvtdq2ps)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
BENCHMARK_CAPTURE(BM_VnniWith, vpbroadcastd, vnni_with_vpbroadcastd)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
BENCHMARK_CAPTURE(BM_VnniWith, vpandd, vnni_with_vpandd)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
BENCHMARK_CAPTURE(BM_VnniWith, vpshufd, vnni_with_vpshufd)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
BENCHMARK_CAPTURE(BM_VnniWith, vpermt2w, vnni_with_vpermt2w)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
BENCHMARK_CAPTURE(BM_VnniWith, vpslld, vnni_with_vpslld)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
BENCHMARK_CAPTURE(BM_VnniWith, vbroadcasti32x4, vnni_with_vbroadcasti32x4)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
BENCHMARK_CAPTURE(BM_VnniWith, bcast_per_1, vnni_bcast_per_1)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
BENCHMARK_CAPTURE(BM_VnniWith, bcast_per_2, vnni_bcast_per_2)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
BENCHMARK_CAPTURE(BM_VnniWith, bcast_per_4, vnni_bcast_per_4)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
BENCHMARK_CAPTURE(BM_VnniWith, ld64_per_1, vnni_ld64_per_1)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
BENCHMARK_CAPTURE(BM_VnniWith, ld64_per_2, vnni_ld64_per_2)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
BENCHMARK_CAPTURE(BM_VnniWith, store_per_2, vnni_store_per_2)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
BENCHMARK_CAPTURE(BM_VnniWith, store_per_4, vnni_store_per_4)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
BENCHMARK(BM_PeakVecDotBlockVnni)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
BENCHMARK(BM_PeakInt8Avx2)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
BENCHMARK(BM_PeakFma32)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);

}  // namespace

// f16-KV paged attention of one token against range(0) cached keys: a KV head of 64 dims
// read by a group of 8 query heads (TinyLlama's GQA), one call per group; the counter is
// keys attended per second per query head. Path: the one kernels::paged_attention_group
// picks (AVX-512 / AVX2 / scalar).
void BM_AttentionF16Group(benchmark::State& state) {
  const int n_keys = static_cast<int>(state.range(0)), d = 64, group = 8, block = 16;
  const int n_blocks = (n_keys + block - 1) / block;
  std::mt19937 rng(1);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<uint16_t> k(static_cast<size_t>(n_blocks) * block * d), v(k.size());
  for (auto& x : k) x = pdserve::fp32_to_fp16(g(rng));
  for (auto& x : v) x = pdserve::fp32_to_fp16(g(rng));
  pdserve::kernels::set_compute_threads(omp_get_max_threads());  // OMP_NUM_THREADS, else every CPU
  std::vector<int32_t> table(n_blocks);
  for (int i = 0; i < n_blocks; ++i) table[i] = i;
  std::vector<float> q(group * d), out(group * d);
  for (auto& x : q) x = g(rng);
  pdserve::kernels::KvLayerView kv;
  kv.k = k.data();
  kv.v = v.data();
  kv.dtype = pdserve::kernels::KvDtype::F16;
  kv.block_size = block;
  kv.n_kv_heads = 1;
  kv.head_dim = d;
  for (auto _ : state) {
    pdserve::kernels::paged_attention_group(q.data(), group, kv, 0, table.data(), n_keys, 0.125f, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["keys_per_head"] = benchmark::Counter(static_cast<double>(n_keys) * group * state.iterations(),
                                                        benchmark::Counter::kIsRate);
}
BENCHMARK(BM_AttentionF16Group)->Arg(512)->Arg(2048)->Unit(benchmark::kMicrosecond)->UseRealTime();

// One decode step's attention over a long context in the TinyLlama shape (22 layers, 4 KV
// heads of 64, 8 query heads each, 16-token blocks, the engine's cache layout
// [block][token][KV head][row]): n_keys keys a sequence, 88 MB at 4,096 in f16 — more than
// the last-level cache, so the rows come from memory as in a decode step, where the weights
// stream through the caches between the layers. K and V on huge pages, as the engine's
// pools; written with kv_store (the cache dtype's conversion). Per layer the KV heads go to
// the compute threads as the model does (kernels::parallel_for, one head per range). Time per iteration =
// attention time of one decode token.
void BM_AttentionDecodeTinyLlama(benchmark::State& state, pdserve::kernels::KvDtype dtype) {
  using pdserve::kernels::KvLayerView;
  const int n_keys = static_cast<int>(state.range(0)), layers = 22, kv_heads = 4, d = 64, group = 8, block = 16;
  const int n_blocks = (n_keys + block - 1) / block;
  const int64_t slots = int64_t{n_blocks} * block, row = pdserve::kernels::kv_row_bytes(dtype, d);
  const size_t per_layer = static_cast<size_t>(slots * kv_heads * row), bytes = per_layer * layers;
  pdserve::HugePageBuffer kbuf(bytes), vbuf(bytes);
  const auto layer = [&](int l) {
    KvLayerView kv;
    kv.k = kbuf.get() + l * per_layer;
    kv.v = vbuf.get() + l * per_layer;
    kv.dtype = dtype;
    kv.block_size = block;
    kv.n_kv_heads = kv_heads;
    kv.head_dim = d;
    return kv;
  };
  // Uniform values in [-1, 1) from a hash of the index (splitmix64): deterministic, parallel.
  const auto uniform = [](uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return static_cast<float>((x ^ (x >> 31)) >> 40) * 0x1p-23f - 1.f;
  };
#pragma omp parallel for schedule(static)
  for (int64_t ls = 0; ls < layers * slots; ++ls) {
    float kf[kv_heads * d], vf[kv_heads * d];
    for (int i = 0; i < kv_heads * d; ++i) {
      kf[i] = uniform(2 * (ls * kv_heads * d + i));
      vf[i] = uniform(2 * (ls * kv_heads * d + i) + 1);
    }
    pdserve::kernels::kv_store(layer(static_cast<int>(ls / slots)), ls % slots, kf, vf);
  }
  pdserve::kernels::set_compute_threads(omp_get_max_threads());  // OMP_NUM_THREADS, else every CPU
  std::vector<int32_t> table(n_blocks);
  for (int i = 0; i < n_blocks; ++i) table[i] = i;
  std::mt19937 rng(1);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> q(kv_heads * group * d), out(q.size());
  for (auto& x : q) x = g(rng);
  for (auto _ : state) {
    for (int l = 0; l < layers; ++l) {
      const KvLayerView kv = layer(l);
      pdserve::kernels::parallel_for(
          kv_heads,
          [&](int64_t h0, int64_t h1) {
            for (int h = static_cast<int>(h0); h < h1; ++h)
              pdserve::kernels::paged_attention_group(q.data() + h * group * d, group, kv, h, table.data(), n_keys, 0.125f,
                                                      out.data() + h * group * d);
          },
          true, 1);
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["kv_bytes_per_second"] =
      benchmark::Counter(static_cast<double>(n_keys) * layers * kv_heads * row * 2 * state.iterations(), benchmark::Counter::kIsRate);
  state.counters["threads"] = pdserve::kernels::compute_threads();
}
BENCHMARK_CAPTURE(BM_AttentionDecodeTinyLlama, f16, pdserve::kernels::KvDtype::F16)
    ->Arg(512)->Arg(4096)->Arg(16384)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_AttentionDecodeTinyLlama, q8_0, pdserve::kernels::KvDtype::Q8_0)
    ->Arg(512)->Arg(4096)->Arg(16384)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_AttentionDecodeTinyLlama, q4_0, pdserve::kernels::KvDtype::Q4_0)
    ->Arg(512)->Arg(4096)->Arg(16384)->Unit(benchmark::kMicrosecond)->UseRealTime();

BENCHMARK_MAIN();
