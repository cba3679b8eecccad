// What the planner observes: the router's /metrics (per SLO class: arrivals, finished
// requests, prompt and generated tokens, SLO attainment — the pdserve_router_class_*
// counters — and the decode workers' prefix-cache counters), turned into per-interval
// rates and mean lengths, and a forecast of the next interval's rate from the recent
// window (least-squares line over the last `window` intervals, one interval ahead,
// clamped at 0: Dynamo's planner offers constant / linear / ARIMA predictors; this is
// its linear one).
#pragma once

#include <deque>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"

namespace pdserve::planner {

/// The samples of a Prometheus text page: "name{labels}" (labels as written) → value.
std::map<std::string, double> parse_prometheus(const std::string& text);
/// The metric name of a sample key ("name{…}" → "name").
std::string metric_name(const std::string& key);
/// The value of label `label` in a sample key ("" when absent).
std::string label_value(const std::string& key, const std::string& label);
/// Σ of every sample of metric `name` (any labels); 0 when there is none.
double sum_metric(const std::map<std::string, double>& samples, const std::string& name);
/// GET `url` (http://HOST:PORT[/path]); the body, or an error naming the URL.
Result<std::string> http_get(const std::string& url, double timeout_s = 2.0);

/// The router's cumulative counters at one time.
struct RouterSample {
  double time_s = 0;  // steady clock
  struct PerClass {
    double arrivals = 0, finished = 0, prompt_tokens = 0, generation_tokens = 0, attained = 0;
  };
  std::map<std::string, PerClass> classes;
  double prefix_queries = 0, prefix_hits = 0;
};
/// Reads the counters of a router /metrics page (no class yet: none). Error when the page
/// has no pdserve_* series at all (not a pdserve server).
Result<RouterSample> parse_router_sample(const std::string& metrics_text, double time_s);

/// One interval's observation of one class.
struct ClassObservation {
  double rate = 0;              // arrivals/s in the interval
  double forecast = 0;          // predicted arrivals/s of the next interval
  double input_tokens = 0;      // mean prompt tokens of requests finished (last known if none)
  double output_tokens = 0;     // mean generated tokens
  double finished = 0, attained = 0;  // in the interval
};

struct Observation {
  double interval_s = 0;
  std::map<std::string, ClassObservation> classes;
  double cached_fraction = 0;   // prefix-cache hits / queries in the interval (last known if none)
  /// Observed SLO attainment in the interval: attained / finished (−1: nothing finished).
  double attainment = -1;
};

class Observer {
 public:
  explicit Observer(int window = 5) : window_(window) {}
  /// Adds a sample; from the second one on, returns the interval since the previous one.
  /// The first call returns an observation with zero rates.
  Observation add(const RouterSample& s);

 private:
  int window_;
  bool has_prev_ = false;
  RouterSample prev_;
  std::map<std::string, std::deque<double>> history_;  // recent rates per class
  std::map<std::string, std::pair<double, double>> last_lengths_;
  double last_cached_ = 0;
};

/// Least-squares line through (0, v0) … (n−1, v_{n−1}) evaluated at n, clamped at 0;
/// the last value when n < 3, 0 when empty.
double forecast_linear(const std::deque<double>& v);

}  // namespace pdserve::planner
