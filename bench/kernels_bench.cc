// Google Benchmark of kernels::matmul on a 2048×2048 weight matrix (F16, Q8_0, Q4_0,
// Q4_K) with 1 and 32 tokens, plus this machine's streaming-read bandwidth (the bound a
// decode step, which reads every weight once, cannot beat).
// Counters: bytes_per_second = weight bytes read per second; FLOP/s = 2·rows·cols·tokens
// per iteration. Threads: OpenMP's (OMP_NUM_THREADS, default all cores).
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gguf/ggml_types.h"
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

void BM_Matmul(benchmark::State& state, GgmlType t) {
  const int64_t n = 2048;
  const int tokens = static_cast<int>(state.range(0));
  static std::vector<Matrix> cache;  // one matrix per type, built once
  const Matrix* mp = nullptr;
  for (const auto& m : cache)
    if (m.view.type == t) mp = &m;
  if (!mp) {
    cache.push_back(make_matrix(t, n, n));
    mp = &cache.back();
  }
  const Matrix& m = *mp;
  std::vector<float> x(tokens * n), y(tokens * n);
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
      benchmark::Counter(2.0 * n * n * tokens * state.iterations(), benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  state.counters["threads"] = omp_get_max_threads();
}

BENCHMARK_CAPTURE(BM_Matmul, F16, GgmlType::F16)->Arg(1)->Arg(32)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Matmul, Q8_0, GgmlType::Q8_0)->Arg(1)->Arg(32)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Matmul, Q4_0, GgmlType::Q4_0)->Arg(1)->Arg(32)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Matmul, Q4_K, GgmlType::Q4_K)->Arg(1)->Arg(32)->Unit(benchmark::kMicrosecond)->UseRealTime();

// Streaming read of a 1 GiB buffer with `threads` OpenMP threads (each sums a contiguous
// slice with 4 independent 64-bit accumulators; the compiler vectorises it).
void BM_StreamRead(benchmark::State& state) {
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
      for (size_t i = lo; i + 4 <= hi; i += 4) {
        a0 += p[i]; a1 += p[i + 1]; a2 += p[i + 2]; a3 += p[i + 3];
      }
      total += a0 + a1 + a2 + a3;
    }
    benchmark::DoNotOptimize(total);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes));
}
BENCHMARK(BM_StreamRead)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);

}  // namespace

BENCHMARK_MAIN();
