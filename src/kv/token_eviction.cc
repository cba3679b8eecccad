#include "kv/token_eviction.h"

#include <algorithm>
#include <cmath>

namespace pdserve::kv {

int TokenEvictionConfig::recent_for(int budget) const {
  if (policy == TokenEvictionPolicy::kStreaming) return std::max(0, budget - sinks);
  if (recent >= 0) return recent;
  return static_cast<int>(std::floor(recent_ratio * budget));
}

int TokenEvictionConfig::min_budget() const {
  if (policy == TokenEvictionPolicy::kStreaming || recent >= 0)
    return std::max(1, sinks + (policy == TokenEvictionPolicy::kStreaming ? 0 : recent));
  // budget - floor(ratio * budget) grows with budget (ratio < 1): the first that fits.
  int b = std::max(1, sinks);
  while (b < sinks + recent_for(b)) ++b;
  return b;
}

std::string TokenEvictionConfig::check(int budget) const {
  if (budget < 0) return "--kv-budget must be >= 0";
  if (budget == 0) return {};
  if (budget < min_budget())
    return "--kv-budget " + std::to_string(budget) + " is below --kv-sinks + --kv-recent (" +
           std::to_string(min_budget()) + " tokens)";
  return {};
}

std::vector<int32_t> select_kept(const TokenEvictionConfig& cfg, int budget, int n, const float* mass) {
  std::vector<int32_t> keep;
  if (n <= budget) {
    for (int i = 0; i < n; ++i) keep.push_back(i);
    return keep;
  }
  const int sinks = std::min(cfg.sinks, budget);
  const int recent = std::min(cfg.recent_for(budget), budget - sinks);
  const int heavy = budget - sinks - recent;
  for (int i = 0; i < sinks; ++i) keep.push_back(i);
  if (heavy > 0) {
    // Candidates: [sinks, n - recent); the `heavy` largest by (mass, position).
    std::vector<int32_t> cand;
    for (int i = sinks; i < n - recent; ++i) cand.push_back(i);
    auto better = [&](int32_t a, int32_t b) { return mass[a] != mass[b] ? mass[a] > mass[b] : a > b; };
    std::nth_element(cand.begin(), cand.begin() + heavy, cand.end(), better);
    cand.resize(heavy);
    std::sort(cand.begin(), cand.end());
    keep.insert(keep.end(), cand.begin(), cand.end());
  }
  for (int i = n - recent; i < n; ++i) keep.push_back(i);
  return keep;
}

void add_attention_mass(std::vector<float>& mass, const float* row, int n) {
  if (static_cast<int>(mass.size()) < n) mass.resize(n, 0.f);
  for (int i = 0; i < n; ++i) mass[i] += row[i];
}

}  // namespace pdserve::kv
