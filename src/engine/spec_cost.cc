#include "engine/spec_cost.h"

#include <algorithm>

namespace pdserve::engine {

void SpecCostModel::observe_step(int rows, double seconds) {
  if (rows <= 0 || seconds <= 0) return;
  if (fit_ && seconds > 4 * (a_ + b_ * rows)) return;
  const double x = rows, y = seconds;
  w_ = kDecay * w_ + 1;
  sx_ = kDecay * sx_ + x;
  sy_ = kDecay * sy_ + y;
  sxx_ = kDecay * sxx_ + x * x;
  sxy_ = kDecay * sxy_ + x * y;
  if (w_ < 8) return;
  const double mx = sx_ / w_, my = sy_ / w_, var = sxx_ / w_ - mx * mx;
  // Rows that barely varied (speculation off, a steady batch) say nothing about b: keep
  // the last fit.
  if (var < 0.25) return;
  double b = (sxy_ / w_ - mx * my) / var, a = my - b * mx;
  if (b < 0) b = 0, a = my;
  if (a < 0) a = 0, b = my / mx;
  a_ = a;
  b_ = b;
  fit_ = true;
}

bool SpecCostModel::plain_step() { return ++steps_ % (fit_ ? 32 : 4) == 0; }

void SpecCostModel::observe_proposer(int tokens, double seconds) {
  prop_seconds_ = kDecay * prop_seconds_ + std::max(0.0, seconds);
  prop_tokens_ = kDecay * prop_tokens_ + std::max(0, tokens);
}

double SpecCostModel::threshold(int seqs) const {
  if (!fit_ || seqs <= 0) return 0;
  const double per_token = (a_ + b_ * seqs) / seqs;
  if (per_token <= 0) return 0;
  const double p = prop_tokens_ > 0 ? prop_seconds_ / prop_tokens_ : 0;
  return std::max(1e-9, (b_ + p) / per_token);
}

}  // namespace pdserve::engine
