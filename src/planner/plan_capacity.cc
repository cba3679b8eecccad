#include "planner/plan_capacity.h"

#include <algorithm>
#include <cmath>

namespace pdserve::planner {

double mdl_utilisation_cap(double s, double target) {
  if (!(s >= 0) || !(target > 0) || s >= target) return 0.0;
  return 2.0 * (target - s) / (2.0 * target - s);
}

namespace {

// Largest b in [1, max_b] with f(b) <= limit (f nondecreasing in b); 0 if none.
template <typename F>
int largest_batch(int max_b, double limit, F f) {
  int best = 0;
  for (int b = 1; b <= max_b; ++b) {
    if (f(b) <= limit) best = b;
    else break;
  }
  return best;
}

}  // namespace

ClassCost derive_class_cost(const ClassDemand& c, const CostModel& cost, const InstanceShape& shape) {
  ClassCost k;
  const int input = std::max(0, static_cast<int>(std::lround(c.input_tokens)));
  const double h = std::clamp(c.cached_fraction, 0.0, 1.0);
  const int cached = std::min(input, static_cast<int>(std::lround(h * input)));
  const int u = input - cached;
  const int chunk = std::max(1, shape.chunk_tokens);
  k.uncached_tokens = u;
  for (int done = 0; done < u; done += chunk) k.prefill_s += cost.prefill_seconds(std::min(chunk, u - done), cached + done);
  k.transfer_s = u > 0 ? cost.transfer_seconds(static_cast<size_t>(std::llround(cost.kv_bytes_per_token() * u))) : 0.0;
  const double out = std::max(1.0, c.output_tokens);
  const int ctx = std::max(1, static_cast<int>(std::lround(c.input_tokens + out / 2)));
  int max_b = std::max(1, shape.max_seqs);
  if (shape.kv_tokens > 0) max_b = std::min<int>(max_b, static_cast<int>(shape.kv_tokens / std::max(1.0, c.input_tokens + out)));
  const double local_chunk_s = u > 0 ? cost.prefill_seconds(std::min(u, chunk), cached) : 0.0;
  k.batch_remote = largest_batch(max_b, c.tpot_slo_s, [&](int b) { return cost.decode_step_seconds(b, ctx); });
  k.batch_local = largest_batch(max_b, c.tpot_slo_s, [&](int b) { return cost.decode_step_seconds(b, ctx) + local_chunk_s; });
  if (k.batch_remote > 0) {
    k.decode_remote_s = out * cost.decode_step_seconds(k.batch_remote, ctx) / k.batch_remote;
    k.cap_remote = mdl_utilisation_cap(k.prefill_s + k.transfer_s, c.ttft_slo_s);
  }
  if (k.batch_local > 0) {
    const double step = cost.decode_step_seconds(k.batch_local, ctx);
    const int chunks = (u + chunk - 1) / chunk;
    k.decode_local_s = out * step / k.batch_local;
    k.cap_local = mdl_utilisation_cap(k.prefill_s + chunks * step, c.ttft_slo_s);
  }
  return k;
}

}  // namespace pdserve::planner
