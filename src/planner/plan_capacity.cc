#include "planner/plan_capacity.h"

#include <algorithm>
#include <cmath>

namespace pdserve::planner {

double mdl_utilisation_cap(double s, double target) {
  if (!(s >= 0) || !(target > 0) || s >= target) return 0.0;
  return 2.0 * (target - s) / (2.0 * target - s);
}

namespace {

constexpr double kZ = 1.645;        // one-sided normal quantile of 1 − kMissShare
constexpr int kMaxScan = 1 << 16;   // seats scanned at most (max_seqs may be "unbounded")

// The class's per-request constants (the notation of plan_capacity.h).
struct Consts {
  int u = 0, cached = 0, n_ch = 0, bmax = 1, ctx = 1;
  double out = 1, P = 0, Pp = 0, x = 0, phi = 0, mu = 0;
  const CostModel* cost = nullptr;
  // t(b) for real b ≥ 0: t(1) below one sequence, linear between whole batches.
  double t(double b) const {
    if (b <= 1) return cost->decode_step_seconds(1, ctx);
    const int lo = static_cast<int>(std::floor(b));
    const double w = b - lo, tl = cost->decode_step_seconds(lo, ctx);
    return w > 0 ? tl + w * (cost->decode_step_seconds(lo + 1, ctx) - tl) : tl;
  }
};

Consts consts(const ClassDemand& c, const CostModel& cost, const InstanceShape& shape) {
  Consts k;
  k.cost = &cost;
  const int input = std::max(0, static_cast<int>(std::lround(c.input_tokens)));
  const double h = std::clamp(c.cached_fraction, 0.0, 1.0);
  k.cached = std::min(input, static_cast<int>(std::lround(h * input)));
  k.u = input - k.cached;
  const int chunk = std::max(1, shape.chunk_tokens);
  k.n_ch = (k.u + chunk - 1) / chunk;
  for (int done = 0; done < k.u; done += chunk) k.P += cost.prefill_seconds(std::min(chunk, k.u - done), k.cached + done);
  k.x = k.u > 0 ? cost.transfer_seconds(static_cast<size_t>(std::llround(cost.kv_bytes_per_token() * k.u))) : 0.0;
  k.out = std::max(1.0, c.output_tokens);
  k.ctx = std::max(1, static_cast<int>(std::lround(c.input_tokens + k.out / 2)));
  k.bmax = std::max(1, std::min(shape.max_seqs, kMaxScan));
  if (shape.kv_tokens > 0) k.bmax = std::max(0, std::min<int>(k.bmax, static_cast<int>(shape.kv_tokens / std::max(1.0, c.input_tokens + k.out))));
  const double t1 = cost.decode_step_seconds(1, k.ctx), t2 = cost.decode_step_seconds(2, k.ctx);
  k.phi = std::clamp(2 * t1 - t2, 0.0, t1);
  k.Pp = std::max(0.0, k.P - k.n_ch * k.phi);
  for (int b = 1; b <= k.bmax; ++b) {
    const double tb = cost.decode_step_seconds(b, k.ctx);
    if (tb > 0) k.mu = std::max(k.mu, b / tb);
  }
  return k;
}

// P(K ≥ k) for K ~ Poisson(m).
double poisson_tail(double m, long k) {
  if (k <= 0) return 1.0;
  if (!(m > 0)) return 0.0;
  if (m > 200) return 0.5 * std::erfc((static_cast<double>(k) - 0.5 - m) / std::sqrt(2 * m));
  if (static_cast<double>(k) > m + 40 * std::sqrt(m) + 40) return 0.0;
  double pmf = std::exp(-m), cdf = 0;
  for (long j = 0; j < k; ++j) {
    cdf += pmf;
    pmf *= m / static_cast<double>(j + 1);
  }
  return std::max(0.0, 1.0 - cdf);
}

DecodeOperatingPoint point(const Consts& k, const ClassDemand& c, double rate, bool local) {
  DecodeOperatingPoint p;
  if (k.bmax < 1) return p;
  const double rho_p = local ? rate * k.Pp : 0.0;
  p.prefill_share = rho_p;
  if (rho_p >= 1) return p;
  auto tau = [&](double b) { return k.t(b) / (1 - rho_p); };
  // TPOT batch B_D.
  int bd = 0;
  for (int b = 1; b <= k.bmax && tau(b) <= c.tpot_slo_s; ++b) bd = b;
  p.tpot_batch = bd;
  if (bd == 0) return p;
  // Little's law: the smallest N with rate·O·τ(N) = N (h(x) = rate·O·τ(x) − x is linear
  // between whole batches, and constant-slope −1 below one sequence).
  const double lo_rate = rate * k.out;
  double n = -1;
  if (lo_rate * tau(1) <= 1) {
    n = lo_rate * tau(1);
  } else {
    for (int b = 2; b <= k.bmax; ++b) {
      const double hb = lo_rate * tau(b) - b;
      if (hb <= 0) {
        const double ha = lo_rate * tau(b - 1) - (b - 1);
        n = (b - 1) + ha / (ha - hb);
        break;
      }
    }
  }
  if (n < 0) return p;  // saturated: the batch would grow past the seats
  p.batch = n;
  p.step_s = tau(n);
  // (1) batch fluctuations within the TPOT batch.
  if (n + kZ * std::sqrt(n) > bd) return p;
  // (2) processor-sharing saturation.
  p.utilisation = k.mu > 0 ? rate * (k.out / k.mu + (local ? k.Pp : 0.0)) : 1.0;
  if (p.utilisation >= 1 || std::pow(p.utilisation, bd + 1) > kMissShare) return p;
  if (local && k.u > 0) {
    // (3) chunk steps met during a request's O steps.
    const double tn = k.t(n), e = k.Pp / k.n_ch;
    const double f = std::min(1.0, rate * k.n_ch * p.step_s);
    if (e > 0) {
      const double room = (c.tpot_slo_s - tn) * k.out / e;  // chunks that still fit in D
      const long kstar = static_cast<long>(std::floor(room)) + 1;
      if (poisson_tail(f * k.out, kstar) > kMissShare) return p;
    }
  }
  if (local) {
    // (4) TTFT of the prompt queue on this instance.
    const double s = std::max(k.P, k.Pp + std::max(1, k.n_ch) * k.t(n));
    const double rs = rate * s;
    if (rs >= 1 || s + rs * s / (2 * (1 - rs)) > c.ttft_slo_s) return p;
  }
  p.ok = true;
  return p;
}

// The largest rate with point(rate).ok (0 if none): bisection below the rate that
// saturates the instance.
double capacity(const Consts& k, const ClassDemand& c, bool local, DecodeOperatingPoint* at) {
  const double work = k.mu > 0 ? k.out / k.mu + (local ? k.Pp : 0.0) : 0.0;
  if (!(work > 0)) return 0.0;
  double lo = 0, hi = 1.0 / work;
  if (!point(k, c, hi * 1e-9, local).ok) return 0.0;
  lo = hi * 1e-9;
  for (int it = 0; it < 60; ++it) {
    const double mid = 0.5 * (lo + hi);
    (point(k, c, mid, local).ok ? lo : hi) = mid;
  }
  *at = point(k, c, lo, local);
  return lo;
}

}  // namespace

DecodeOperatingPoint decode_point(const ClassDemand& c, const CostModel& cost, const InstanceShape& shape, double rate, bool local) {
  return point(consts(c, cost, shape), c, rate, local);
}

ClassCost derive_class_cost(const ClassDemand& c, const CostModel& cost, const InstanceShape& shape) {
  const Consts k = consts(c, cost, shape);
  ClassCost r;
  r.uncached_tokens = k.u;
  r.prefill_s = k.P;
  r.transfer_s = k.x;
  r.cap_remote = mdl_utilisation_cap(k.P + k.x, c.ttft_slo_s);
  DecodeOperatingPoint pr, pl;
  r.rate_remote = capacity(k, c, false, &pr);
  r.rate_local = capacity(k, c, true, &pl);
  r.batch_remote = pr.batch;
  r.step_remote_s = pr.step_s;
  r.batch_local = pl.batch;
  r.step_local_s = pl.step_s;
  r.prefill_share_local = pl.prefill_share;
  return r;
}

}  // namespace pdserve::planner
