// The planner's control loop around solve_plan (one call per interval): plans for the
// forecast load plus headroom, scales up at once when the plan in force would lose
// goodput, and scales down only after `scale_down_after` consecutive intervals in which
// a smaller plan serves the same goodput (hysteresis: no flapping on a small change).
// Anchors: the Dynamo planner's scale-up-now / scale-down-after-a-window loop and the
// Kubernetes HPA's scale-down stabilisation window.
#pragma once

#include <string>

#include "base/status.h"
#include "planner/plan_input.h"

namespace pdserve::planner {

struct ControllerConfig {
  double headroom = 0.2;     // plan for rate × (1 + headroom)
  int scale_down_after = 3;  // intervals a smaller plan must suffice before it is adopted
  double tolerance = 1e-6;   // goodput differences below this (relative to demand) are ties
};

/// What one interval decided.
struct PlanDecision {
  PlanResult plan;           // the plan now in force (instance counts, pools, threshold)
  PlanResult optimum;        // the MIP's optimum for this interval's (inflated) load
  enum class Action { Start, Keep, ScaleUp, ScaleDown, Rebalance } action = Action::Keep;
  int below_intervals = 0;   // consecutive intervals a smaller plan would do
  std::string reason;        // one line for the log
};
const char* action_name(PlanDecision::Action a);

class PlanController {
 public:
  explicit PlanController(ControllerConfig cfg = {}) : cfg_(cfg) {}
  /// One interval. `in.current` is the plan in force (empty: nothing runs yet). Errors
  /// are solve_plan's.
  Result<PlanDecision> step(const PlanInput& in);

 private:
  ControllerConfig cfg_;
  int below_ = 0;
};

}  // namespace pdserve::planner
