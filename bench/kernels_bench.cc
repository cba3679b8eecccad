// Google Benchmark of kernels::matmul on a 2048×2048 weight matrix (F16, BF16, Q8_0, Q4_0,
// Q4_K, Q6_K) with 1 and 32 tokens (the matrix stays in the last-level cache), one-token
// products with a 32768×2048 matrix read from memory (BM_MatmulStream: a decode step's
// access pattern), plus this machine's streaming-read bandwidth (the bound a decode step,
// which reads every weight once, cannot beat; BM_StreamReadPrefetch with software prefetch).
// Counters: bytes_per_second = weight bytes read per second; FLOP/s = 2·rows·cols·tokens
// per iteration. Threads: OpenMP's (OMP_NUM_THREADS, default all cores).
#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "gguf/ggml_types.h"
#include "base/fp16.h"
#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "kernels/quants.h"

namespace {

using pdserve::gguf::GgmlType;

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

/// One matrix per (type, rows), built once.
const Matrix& cached_matrix(GgmlType t, int64_t rows, int64_t cols) {
  static std::vector<std::unique_ptr<Matrix>> cache;
  for (const auto& m : cache)
    if (m->view.type == t && m->view.rows == rows) return *m;
  cache.push_back(std::make_unique<Matrix>(make_matrix(t, rows, cols)));
  return *cache.back();
}

void run_matmul(benchmark::State& state, GgmlType t, int64_t rows) {
  const int64_t n = 2048;
  const int tokens = static_cast<int>(state.range(0));
  const Matrix& m = cached_matrix(t, rows, n);
  std::vector<float> x(tokens * n), y(tokens * rows);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (float& v : x) v = nd(rng);
  // Multi-token batches as a prompt (GEMM order), one token as a decode step.
  std::vector<uint8_t> order(tokens, tokens > 1 ? 1 : 0);
  for (auto _ : state) {
    pdserve::kernels::matmul(m.view, x.data(), tokens, y.data(), order.data());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(m.data.size()));
  state.counters["FLOP/s"] =
      benchmark::Counter(2.0 * rows * n * tokens * state.iterations(), benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  state.counters["threads"] = omp_get_max_threads();
}

void BM_Matmul(benchmark::State& state, GgmlType t) { run_matmul(state, t, 2048); }
void BM_MatmulStream(benchmark::State& state, GgmlType t) { run_matmul(state, t, 32768); }

BENCHMARK_CAPTURE(BM_Matmul, F16, GgmlType::F16)->Arg(1)->Arg(32)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Matmul, BF16, GgmlType::BF16)->Arg(1)->Arg(32)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Matmul, Q8_0, GgmlType::Q8_0)->Arg(1)->Arg(32)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Matmul, Q4_0, GgmlType::Q4_0)->Arg(1)->Arg(32)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Matmul, Q4_K, GgmlType::Q4_K)->Arg(1)->Arg(32)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Matmul, Q6_K, GgmlType::Q6_K)->Arg(1)->Arg(32)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_MatmulStream, F16, GgmlType::F16)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_MatmulStream, Q8_0, GgmlType::Q8_0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_MatmulStream, Q4_0, GgmlType::Q4_0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_MatmulStream, Q4_K, GgmlType::Q4_K)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_MatmulStream, Q6_K, GgmlType::Q6_K)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();

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

BENCHMARK_MAIN();
