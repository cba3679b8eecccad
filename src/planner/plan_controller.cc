#include "planner/plan_controller.h"

#include <algorithm>

#include "planner/mip_goodput.h"

namespace pdserve::planner {

const char* action_name(PlanDecision::Action a) {
  switch (a) {
    case PlanDecision::Action::Start: return "start";
    case PlanDecision::Action::Keep: return "keep";
    case PlanDecision::Action::ScaleUp: return "scale_up";
    case PlanDecision::Action::ScaleDown: return "scale_down";
    case PlanDecision::Action::Rebalance: return "rebalance";
  }
  return "?";
}

Result<PlanDecision> PlanController::step(const PlanInput& in) {
  PlanInput inflated = in;
  for (auto& c : inflated.classes) c.rate *= 1 + cfg_.headroom;
  auto opt = solve_plan(inflated);
  if (!opt.ok()) return opt.status();
  PlanDecision d;
  d.optimum = opt.value();
  int curP = 0, curD = 0;
  for (const auto& s : in.current) (s.role == InstanceState::Role::Prefill ? curP : curD)++;
  if (in.current.empty()) {
    below_ = 0;
    d.plan = d.optimum;
    d.action = PlanDecision::Action::Start;
    d.reason = "no plan in force";
    return d;
  }
  PlanInput pinned = inflated;
  pinned.fixed_prefill = std::min(curP, in.budget);
  pinned.fixed_decode = std::min(std::max(curD, in.min_decode), in.budget - pinned.fixed_prefill);
  auto cur = solve_plan(pinned);
  if (!cur.ok()) {  // the plan in force no longer fits the budget: adopt the optimum
    below_ = 0;
    d.plan = d.optimum;
    d.action = d.optimum.instances() < curP + curD ? PlanDecision::Action::ScaleDown : PlanDecision::Action::Rebalance;
    d.reason = cur.error();
    return d;
  }
  const double tol = cfg_.tolerance * std::max(1.0, d.optimum.demand);
  if (d.optimum.total_goodput > cur.value().total_goodput + tol) {
    below_ = 0;
    d.plan = d.optimum;
    d.action = d.optimum.instances() > curP + curD ? PlanDecision::Action::ScaleUp : PlanDecision::Action::Rebalance;
    d.reason = "the plan in force would serve " + std::to_string(cur.value().total_goodput) + " of " +
               std::to_string(d.optimum.demand) + " req/s within SLO; the optimum serves " +
               std::to_string(d.optimum.total_goodput);
    return d;
  }
  if (d.optimum.instances() < curP + curD) {
    d.below_intervals = ++below_;
    if (below_ >= cfg_.scale_down_after) {
      below_ = 0;
      d.plan = d.optimum;
      d.action = PlanDecision::Action::ScaleDown;
      d.reason = "a plan of " + std::to_string(d.optimum.instances()) + " instance(s) has sufficed for " +
                 std::to_string(cfg_.scale_down_after) + " interval(s)";
      return d;
    }
    d.plan = cur.value();
    d.action = PlanDecision::Action::Keep;
    d.reason = "a smaller plan would do (" + std::to_string(below_) + "/" + std::to_string(cfg_.scale_down_after) + " intervals)";
    return d;
  }
  below_ = 0;
  d.plan = cur.value();
  d.action = PlanDecision::Action::Keep;
  d.reason = "the plan in force serves the optimum goodput";
  return d;
}

}  // namespace pdserve::planner
