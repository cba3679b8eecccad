// The planner offline, inside the simulator (`pdserve simulate --plan BUDGET`):
//   * static: the workload's demand (one class: arrival rate, mean prompt and output
//     tokens, a cached fraction) goes through the GLPK MIP (planner/mip_goodput.h) once,
//     and its plan becomes the simulated fleet (fleet_for_plan);
//   * elastic (--replan-interval S): SimPlanner is the simulator's re-plan hook — every
//     S virtual seconds it builds the router's counters from the simulated requests
//     (arrivals, finished, tokens, SLO attained, prefix hits; per length class, as the
//     router counts per SLO class), feeds them to the real
//     planner::Observer (rate forecast; the prompt length it plans for is the
//     cost-equivalent one of the requests finished in the interval, as the simulation
//     knows each one — `pdserve planner` only has the router's mean) and
//     planner::PlanController (headroom,
//     scale-down hysteresis, keeping the cache-holding instances), and returns the plan
//     in force as the next fleet; every decision is kept for the report.
// Per-interval SLO attainment (by arrival interval) is computed from the records with
// loadgen's own metrics (interval_attainment).
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "loadgen/stats.h"
#include "planner/plan_controller.h"
#include "planner/plan_observer.h"
#include "planner/simulator.h"

namespace pdserve::planner {

/// The length classes the offline planner splits a workload into (by prompt tokens:
/// short <= 256 < medium <= 1024 < long), so that the MIP's conditional-disaggregation
/// threshold and per-class pools see the mix rather than its mean: 0, 1, 2.
int length_class(int64_t prompt_tokens);
const char* length_class_name(int k);

/// The demand of a workload per length class (classes without requests left out): rate =
/// its requests / the arrival span ((n − 1) / (last − first arrival) overall; n/s when
/// all arrive at once), mean max_tokens, the given cached fraction and SLO (seconds), and
/// as prompt length the cost-equivalent one (cost_equivalent_input). InvalidArgument when
/// there are no requests.
Result<std::vector<ClassDemand>> workload_demand(const std::vector<SimRequest>& reqs, double cached_fraction, double ttft_s,
                                                 double tpot_s, const CostModel& cost, int chunk_tokens);

/// The prompt length L whose prefill (chunks of `chunk_tokens`, the `cached_fraction`
/// already in KV) costs the mean prefill time of `lengths` under `cost` (bisection on
/// [min, max]). Prefill time grows faster than linearly with the length (attention), so
/// the mean length would understate the prefill work of a mix: a 2,048-token prompt costs
/// far more than two of 1,024. Empty ⇒ 0.
double cost_equivalent_input(const std::vector<double>& lengths, double cached_fraction, const CostModel& cost, int chunk_tokens);

/// A plan as a simulated fleet: no prefill instance ⇒ decode instances that prefill
/// locally (= colocated); the threshold (kNever ⇒ never remote) as the decode side's.
SimFleet fleet_for_plan(const PlanResult& p);

/// A plan as one line: "2P+6D, remote above 32 tokens, predicted goodput 4.1 of 5.0 req/s".
std::string describe_plan(const PlanResult& p);

/// The elastic hook. `base` carries the cost model, shape, budget and minimums; its
/// classes and current instances are filled per interval.
class SimPlanner {
 public:
  SimPlanner(PlanInput base, ControllerConfig cc, int window, loadgen::Slo slo, const std::vector<SimRequest>& reqs);

  /// The hook (SimConfig::replan). Throws std::invalid_argument on a solver error.
  SimFleet operator()(const SimInterval& iv);

  struct Row {
    int index = 0;
    double time_s = 0;
    double observed_rate = 0, forecast_rate = 0;  // req/s, all classes
    double cached_fraction = 0;
    double input_tokens = 0;                       // the prompt length planned for (rate-weighted mean of the classes)
    PlanDecision decision;
  };
  const std::vector<Row>& rows() const { return rows_; }

 private:
  PlanInput base_;
  PlanController ctl_;
  Observer obs_;
  loadgen::Slo slo_;
  const std::vector<SimRequest>& reqs_;
  std::vector<Row> rows_;
  double last_time_ = -1;                // the previous interval's end
  double last_input_[3] = {0, 0, 0};     // the last cost-equivalent length per class
};

/// Requests arriving in [t0 + k·interval, t0 + (k+1)·interval): how many, and how many
/// completed within `slo` (loadgen::meets_slo).
struct IntervalAttainment {
  int64_t arrivals = 0, good = 0;
  double share() const { return arrivals ? static_cast<double>(good) / arrivals : 1.0; }
};
std::vector<IntervalAttainment> interval_attainment(const std::vector<loadgen::RequestRecord>& recs,
                                                    const std::vector<int64_t>& expected_input, const loadgen::Slo& slo,
                                                    double t0, double interval_s);

}  // namespace pdserve::planner
