#include "loadgen/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace pdserve::loadgen {

double percentile_sorted(const std::vector<double>& x, double p) {
  if (x.empty()) return std::numeric_limits<double>::quiet_NaN();
  p = std::clamp(p, 0.0, 100.0);
  const double r = p / 100.0 * static_cast<double>(x.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(r));
  const size_t hi = std::min(lo + 1, x.size() - 1);
  return x[lo] + (r - static_cast<double>(lo)) * (x[hi] - x[lo]);
}

double percentile(std::vector<double> values, double p) {
  std::sort(values.begin(), values.end());
  return percentile_sorted(values, p);
}

Distribution summarize(std::vector<double> v) {
  Distribution d;
  d.count = v.size();
  if (v.empty()) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    d.mean = d.p50 = d.p90 = d.p99 = d.min = d.max = nan;
    return d;
  }
  std::sort(v.begin(), v.end());
  d.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  d.p50 = percentile_sorted(v, 50);
  d.p90 = percentile_sorted(v, 90);
  d.p99 = percentile_sorted(v, 99);
  d.min = v.front();
  d.max = v.back();
  return d;
}

RequestMetrics request_metrics(const RequestRecord& r, int64_t expected_input_tokens) {
  RequestMetrics m;
  m.ok = r.ok;
  m.input_tokens = r.usage_prompt_tokens >= 0 ? r.usage_prompt_tokens : expected_input_tokens;
  m.output_tokens = r.usage_completion_tokens >= 0 ? r.usage_completion_tokens : static_cast<int64_t>(r.chunk_s.size());
  if (!r.ok) return m;
  m.ttft_s = r.first_token_s - r.send_s;
  m.e2e_s = r.end_s - r.send_s;
  if (m.output_tokens > 1) m.tpot_s = (m.e2e_s - m.ttft_s) / static_cast<double>(m.output_tokens - 1);
  return m;
}

bool meets_slo(const RequestMetrics& m, const Slo& slo) {
  if (!m.ok) return false;
  if (slo.ttft_ms > 0 && m.ttft_s * 1000.0 > slo.ttft_ms) return false;
  if (slo.tpot_ms > 0 && m.tpot_s && *m.tpot_s * 1000.0 > slo.tpot_ms) return false;
  return true;
}

Summary summarize_run(const std::vector<RequestRecord>& recs, const std::vector<int64_t>& expected_input,
                      const Slo& slo) {
  Summary s;
  s.requests = recs.size();
  std::vector<double> ttft, tpot, itl, e2e;
  double first_send = std::numeric_limits<double>::infinity(), last_end = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < recs.size(); ++i) {
    const RequestRecord& r = recs[i];
    if (!r.sent()) {
      ++s.not_sent;
      continue;
    }
    first_send = std::min(first_send, r.send_s);
    last_end = std::max(last_end, r.end_s);
    if (!r.ok) {
      ++s.failed;
      continue;
    }
    ++s.completed;
    const RequestMetrics m = request_metrics(r, i < expected_input.size() ? expected_input[i] : 0);
    s.input_tokens += m.input_tokens;
    s.output_tokens += m.output_tokens;
    ttft.push_back(m.ttft_s * 1000.0);
    e2e.push_back(m.e2e_s * 1000.0);
    if (m.tpot_s) tpot.push_back(*m.tpot_s * 1000.0);
    for (size_t k = 1; k < r.chunk_s.size(); ++k) itl.push_back((r.chunk_s[k] - r.chunk_s[k - 1]) * 1000.0);
    if (slo.set() && meets_slo(m, slo)) ++s.good_requests;
  }
  s.duration_s = last_end > first_send ? last_end - first_send : 0.0;
  if (s.duration_s > 0) {
    s.request_throughput = static_cast<double>(s.completed) / s.duration_s;
    s.output_throughput = static_cast<double>(s.output_tokens) / s.duration_s;
    s.total_token_throughput = static_cast<double>(s.input_tokens + s.output_tokens) / s.duration_s;
    if (slo.set()) s.goodput = static_cast<double>(s.good_requests) / s.duration_s;
  } else if (slo.set()) {
    s.goodput = 0.0;
  }
  s.ttft_ms = summarize(std::move(ttft));
  s.tpot_ms = summarize(std::move(tpot));
  s.itl_ms = summarize(std::move(itl));
  s.e2e_ms = summarize(std::move(e2e));
  return s;
}

Timeline timeline(const std::vector<RequestRecord>& recs, const std::vector<int64_t>& expected_input,
                  double bin_s) {
  Timeline tl;
  double end = 0;
  for (const auto& r : recs)
    if (r.sent()) end = std::max(end, r.end_s);
  if (bin_s <= 0) {
    // About 60 bins, rounded to 1, 2 or 5 times a power of ten.
    const double raw = std::max(end / 60.0, 1e-3);
    const double p10 = std::pow(10.0, std::floor(std::log10(raw)));
    bin_s = raw <= p10 ? p10 : raw <= 2 * p10 ? 2 * p10 : raw <= 5 * p10 ? 5 * p10 : 10 * p10;
  }
  tl.bin_s = bin_s;
  const size_t n = std::max<size_t>(1, static_cast<size_t>(std::ceil(end / bin_s)));
  std::vector<double> tokens(n, 0.0), prompt(n, 0.0), done(n, 0.0), busy(n, 0.0);
  auto bin = [&](double t) { return std::min(n - 1, static_cast<size_t>(std::max(0.0, t) / bin_s)); };
  for (size_t i = 0; i < recs.size(); ++i) {
    const RequestRecord& r = recs[i];
    if (!r.sent()) continue;
    // Time in flight, split over the bins it overlaps.
    for (size_t b = bin(r.send_s); b < n; ++b) {
      const double lo = std::max(r.send_s, static_cast<double>(b) * bin_s);
      const double hi = std::min(r.end_s, static_cast<double>(b + 1) * bin_s);
      if (hi <= lo) break;
      busy[b] += hi - lo;
    }
    if (r.ok) {
      done[bin(r.end_s)] += 1;
      const int64_t in = r.usage_prompt_tokens >= 0 ? r.usage_prompt_tokens
                         : i < expected_input.size() ? expected_input[i]
                                                     : 0;
      if (r.first_token_s >= 0) prompt[bin(r.first_token_s)] += static_cast<double>(in);
      if (!r.chunk_s.empty()) {
        const double out = r.usage_completion_tokens >= 0 ? static_cast<double>(r.usage_completion_tokens)
                                                          : static_cast<double>(r.chunk_s.size());
        const double per_chunk = out / static_cast<double>(r.chunk_s.size());
        for (double t : r.chunk_s) tokens[bin(t)] += per_chunk;
      }
    }
  }
  for (size_t i = 0; i < n; ++i) {
    tl.t_s.push_back((static_cast<double>(i) + 0.5) * bin_s);
    tl.output_tok_per_s.push_back(tokens[i] / bin_s);
    tl.prompt_tok_per_s.push_back(prompt[i] / bin_s);
    tl.completed_per_s.push_back(done[i] / bin_s);
    tl.in_flight.push_back(busy[i] / bin_s);
  }
  return tl;
}

}  // namespace pdserve::loadgen
