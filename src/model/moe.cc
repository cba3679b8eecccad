// Built with -ffp-contract=off (CMakeLists.txt): the weighting and the sum of the experts'
// outputs are ggml's separate float multiplies and adds, never fused into FMAs.
#include "model/moe.h"

#include <algorithm>
#include <cmath>

#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/parallel.h"

namespace pdserve::model {

void moe_route(float* logits, int n_expert, int k, int32_t* sel, float* w) {
  float mx = -INFINITY;
  for (int i = 0; i < n_expert; ++i) mx = std::max(mx, logits[i]);
  double sum = 0;
  for (int i = 0; i < n_expert; ++i) {
    const float v = std::exp(logits[i] - mx);
    sum += static_cast<double>(v);
    logits[i] = v;
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int i = 0; i < n_expert; ++i) logits[i] *= inv;
  // Partial selection sort: k is small (2-8).
  for (int j = 0; j < k; ++j) {
    int best = -1;
    for (int i = 0; i < n_expert; ++i) {
      bool taken = false;
      for (int q = 0; q < j; ++q) taken |= sel[q] == i;
      if (!taken && (best < 0 || logits[i] > logits[best])) best = i;
    }
    sel[j] = best;
    w[j] = logits[best];
  }
  double s = 0;
  for (int j = 0; j < k; ++j) s += static_cast<double>(w[j]);
  const float ws = std::max(static_cast<float>(s), 6.103515625e-5f);
  for (int j = 0; j < k; ++j) w[j] /= ws;
}

void moe_ffn(const ModelConfig& c, const LayerWeights& L, const float* xn, int m, Workspace& ws, float* out) {
  const int E = c.n_embd, Fe = c.n_ff_exp, X = c.n_expert, k = c.n_expert_used;
  const int rows = m * k;
  float* router = ws.router.get();
  int32_t* sel = ws.moe_sel.data();
  float* w = ws.moe_w.get();
  // The router too takes the decode order (see moe.h).
  kernels::matmul(L.ffn_gate_inp, xn, m, router, nullptr);
  for (int t = 0; t < m; ++t) moe_route(router + size_t(t) * X, X, k, sel + size_t(t) * k, w + size_t(t) * k);

  // Counting sort of the m·k (token, slot) pairs by expert: expert e's rows are
  // [start[e], start[e + 1]), its tokens in batch order.
  int32_t* start = ws.moe_count.data();
  int32_t* row_of = ws.moe_row.data();
  int32_t* tok = ws.moe_tok.data();
  std::fill(start, start + X + 1, 0);
  for (int i = 0; i < rows; ++i) ++start[sel[i] + 1];
  for (int e = 0; e < X; ++e) start[e + 1] += start[e];
  for (int i = 0; i < rows; ++i) {  // start[e] advances to the end of e's rows ...
    const int r = start[sel[i]]++;
    row_of[i] = r;
    tok[r] = i / k;
  }
  for (int e = X; e > 0; --e) start[e] = start[e - 1];  // ... and is shifted back
  start[0] = 0;

  float *gx = ws.moe_x.get(), *gy = ws.moe_y.get(), *gate = ws.moe_gate.get(), *up = ws.moe_up.get();
  kernels::parallel_for(
      rows,
      [&](int64_t r0, int64_t r1) {
        for (int r = static_cast<int>(r0); r < r1; ++r)
          std::copy_n(xn + size_t(tok[r]) * E, E, gx + size_t(r) * E);
      },
      kernels::worth_parallel(int64_t{rows} * E));

  for (int e = 0; e < X; ++e) {
    const int n = start[e + 1] - start[e];
    if (n == 0) continue;
    const kernels::WeightView g = expert_slice(L.w_gate_exps, e, Fe), u = expert_slice(L.w_up_exps, e, Fe);
    const kernels::MatmulJob jobs[] = {{&g, gate + size_t(start[e]) * Fe}, {&u, up + size_t(start[e]) * Fe}};
    kernels::matmul_multi(jobs, 2, gx + size_t(start[e]) * E, n, nullptr);
  }
  kernels::parallel_for(
      rows,
      [&](int64_t r0, int64_t r1) {
        for (int r = static_cast<int>(r0); r < r1; ++r)
          kernels::swiglu(gate + size_t(r) * Fe, up + size_t(r) * Fe, Fe);
      },
      kernels::worth_parallel(int64_t{rows} * Fe * 8));
  for (int e = 0; e < X; ++e) {
    const int n = start[e + 1] - start[e];
    if (n == 0) continue;
    kernels::matmul(expert_slice(L.w_down_exps, e, E), gate + size_t(start[e]) * Fe, n, gy + size_t(start[e]) * E, nullptr);
  }

  kernels::parallel_for(
      m,
      [&](int64_t t0, int64_t t1) {
        for (int t = static_cast<int>(t0); t < t1; ++t) {
          float* o = out + size_t(t) * E;
          const float* y0 = gy + size_t(row_of[size_t(t) * k]) * E;
          const float w0 = w[size_t(t) * k];
          for (int i = 0; i < E; ++i) o[i] = y0[i] * w0;
          for (int j = 1; j < k; ++j) {
            const float* yj = gy + size_t(row_of[size_t(t) * k + j]) * E;
            const float wj = w[size_t(t) * k + j];
            for (int i = 0; i < E; ++i) {
              const float p = yj[i] * wj;
              o[i] = o[i] + p;
            }
          }
        }
      },
      kernels::worth_parallel(int64_t{rows} * E));
}

}  // namespace pdserve::model
