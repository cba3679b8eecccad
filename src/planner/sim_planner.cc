#include "planner/sim_planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace pdserve::planner {

namespace {

double chunked_prefill_s(double length, double cached_fraction, const CostModel& cost, int chunk) {
  const int input = std::max(0, static_cast<int>(std::lround(length)));
  const int cached = std::min(input, static_cast<int>(std::lround(cached_fraction * input)));
  double t = 0;
  for (int done = cached; done < input; done += chunk) t += cost.prefill_seconds(std::min(chunk, input - done), done);
  return t;
}

}  // namespace

double cost_equivalent_input(const std::vector<double>& lengths, double cached_fraction, const CostModel& cost, int chunk_tokens) {
  if (lengths.empty()) return 0;
  const int chunk = std::max(1, chunk_tokens);
  double mean = 0, lo = lengths[0], hi = lengths[0];
  for (double l : lengths) {
    mean += chunked_prefill_s(l, cached_fraction, cost, chunk);
    lo = std::min(lo, l);
    hi = std::max(hi, l);
  }
  mean /= static_cast<double>(lengths.size());
  for (int it = 0; it < 40 && hi - lo > 0.5; ++it) {
    const double mid = 0.5 * (lo + hi);
    (chunked_prefill_s(mid, cached_fraction, cost, chunk) < mean ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

int length_class(int64_t prompt_tokens) { return prompt_tokens <= 256 ? 0 : prompt_tokens <= 1024 ? 1 : 2; }
const char* length_class_name(int k) { return k == 0 ? "short" : k == 1 ? "medium" : "long"; }

Result<std::vector<ClassDemand>> workload_demand(const std::vector<SimRequest>& reqs, double cached_fraction, double ttft_s,
                                                 double tpot_s, const CostModel& cost, int chunk_tokens) {
  if (reqs.empty()) return Status::InvalidArgument("the workload has no requests to plan for");
  const double n = static_cast<double>(reqs.size());
  const double span = reqs.back().arrival_s - reqs.front().arrival_s;
  const double per_request = span > 0 ? (n - 1) / span / n : 1.0;  // each request's share of the rate (req/s)
  std::vector<double> lengths[3];
  double out[3] = {0, 0, 0};
  for (const SimRequest& r : reqs) {
    const int k = length_class(static_cast<int64_t>(r.prompt.size()));
    lengths[k].push_back(static_cast<double>(r.prompt.size()));
    out[k] += r.max_tokens;
  }
  std::vector<ClassDemand> v;
  for (int k = 0; k < 3; ++k) {
    if (lengths[k].empty()) continue;
    ClassDemand d;
    d.name = length_class_name(k);
    const double m = static_cast<double>(lengths[k].size());
    d.rate = m * per_request;
    d.cached_fraction = std::clamp(cached_fraction, 0.0, 0.99);
    d.input_tokens = cost_equivalent_input(lengths[k], d.cached_fraction, cost, chunk_tokens);
    d.output_tokens = out[k] / m;
    d.ttft_slo_s = ttft_s;
    d.tpot_slo_s = tpot_s;
    v.push_back(d);
  }
  return v;
}

SimFleet fleet_for_plan(const PlanResult& p) {
  SimFleet f;
  f.prefill = p.prefill;
  f.decode = std::max(1, p.decode);
  f.remote_prefill_threshold = std::isinf(p.threshold) || p.threshold >= (1 << 30) ? (1 << 30) : static_cast<int>(p.threshold);
  f.keep = p.keep;
  return f;
}

std::string describe_plan(const PlanResult& p) {
  char buf[256];
  std::string where;
  if (p.prefill == 0) where = "colocated (local prefill)";
  else if (std::isinf(p.threshold)) where = "never remote";
  else where = "remote above " + std::to_string(static_cast<long long>(p.threshold)) + " uncached tokens";
  std::snprintf(buf, sizeof buf, "%dP+%dD, %s, predicted goodput %.3f of %.3f req/s", p.prefill, p.decode, where.c_str(),
                p.total_goodput, p.demand);
  return buf;
}

SimPlanner::SimPlanner(PlanInput base, ControllerConfig cc, int window, loadgen::Slo slo, const std::vector<SimRequest>& reqs)
    : base_(std::move(base)), ctl_(cc), obs_(window), slo_(slo), reqs_(reqs) {}

SimFleet SimPlanner::operator()(const SimInterval& iv) {
  // The router's cumulative counters (pdserve_router_class_*_total) at this time, per
  // length class; the prompts finished since the last interval per class.
  RouterSample s;
  s.time_s = iv.time_s;
  std::vector<double> lengths[3];
  for (int k = 0; k < 3; ++k) s.classes[length_class_name(k)];
  for (size_t i = 0; i < iv.records->size(); ++i) {
    const loadgen::RequestRecord& r = (*iv.records)[i];
    if (!r.sent()) continue;
    const int64_t len = static_cast<int64_t>(reqs_[i].prompt.size());
    const int k = length_class(len);
    RouterSample::PerClass& c = s.classes[length_class_name(k)];
    c.arrivals++;
    if (!r.done_marker) continue;
    c.finished++;
    c.prompt_tokens += static_cast<double>(len);
    c.generation_tokens += static_cast<double>(std::max<int64_t>(0, r.usage_completion_tokens));
    if (loadgen::meets_slo(loadgen::request_metrics(r, len), slo_)) c.attained++;
    if (r.end_s > last_time_) lengths[k].push_back(static_cast<double>(len));
  }
  last_time_ = iv.time_s;
  s.prefix_queries = static_cast<double>(iv.prefix_queries);
  s.prefix_hits = static_cast<double>(iv.prefix_hits);
  const Observation o = obs_.add(s);

  PlanInput in = base_;
  in.classes.clear();
  double observed = 0, forecast = 0, planned_input = 0;
  for (int k = 0; k < 3; ++k) {
    ClassDemand d = base_.classes.empty() ? ClassDemand{} : base_.classes[0];  // the SLO template
    d.name = length_class_name(k);
    auto it = o.classes.find(d.name);
    if (it == o.classes.end()) continue;
    d.rate = it->second.forecast;
    d.output_tokens = it->second.output_tokens;
    d.cached_fraction = o.cached_fraction;
    if (!lengths[k].empty()) last_input_[k] = cost_equivalent_input(lengths[k], d.cached_fraction, *base_.cost, base_.shape.chunk_tokens);
    d.input_tokens = last_input_[k] > 0 ? last_input_[k] : it->second.input_tokens;
    observed += it->second.rate;
    forecast += d.rate;
    planned_input += d.rate * d.input_tokens;
    in.classes.push_back(d);
  }
  in.current = iv.active;
  auto dec = ctl_.step(in);
  if (!dec.ok()) throw std::invalid_argument("planner: " + dec.error());
  Row row;
  row.index = iv.index;
  row.time_s = iv.time_s;
  row.observed_rate = observed;
  row.forecast_rate = forecast;
  row.cached_fraction = o.cached_fraction;
  row.input_tokens = forecast > 0 ? planned_input / forecast : 0;
  row.decision = dec.value();
  rows_.push_back(row);
  return fleet_for_plan(dec.value().plan);
}

std::vector<IntervalAttainment> interval_attainment(const std::vector<loadgen::RequestRecord>& recs,
                                                    const std::vector<int64_t>& expected_input, const loadgen::Slo& slo,
                                                    double t0, double interval_s) {
  std::vector<IntervalAttainment> out;
  for (size_t i = 0; i < recs.size(); ++i) {
    const int k = static_cast<int>(std::floor((recs[i].arrival_s - t0) / interval_s));
    if (k < 0) continue;
    if (static_cast<int>(out.size()) <= k) out.resize(k + 1);
    out[k].arrivals++;
    const int64_t exp = i < expected_input.size() ? expected_input[i] : 0;
    if (loadgen::meets_slo(loadgen::request_metrics(recs[i], exp), slo)) out[k].good++;
  }
  return out;
}

}  // namespace pdserve::planner
