#include "planner/mip_goodput.h"

#include <glpk.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "planner/plan_capacity.h"

namespace pdserve::planner {

const char* pool_choice_name(PoolChoice p) {
  switch (p) {
    case PoolChoice::Remote: return "remote";
    case PoolChoice::Local: return "local";
    case PoolChoice::None: break;
  }
  return "none";
}

namespace {

// A GLPK problem built column by column and row by row (1-based indices as GLPK wants).
class Model {
 public:
  Model() : p_(glp_create_prob(), glp_delete_prob) {}
  // kind: GLP_CV, GLP_IV, GLP_BV.
  int col(int kind, double lo, double hi) {
    const int j = glp_add_cols(p_.get(), 1);
    glp_set_col_kind(p_.get(), j, kind);
    if (kind != GLP_BV) glp_set_col_bnds(p_.get(), j, lo == hi ? GLP_FX : GLP_DB, lo, hi);
    else if (hi < 1) glp_set_col_bnds(p_.get(), j, GLP_FX, 0, 0);
    return j;
  }
  // Σ coef·x ≤ hi (GLP_UP), ≥ lo (GLP_LO) or = (GLP_FX).
  void row(const std::vector<std::pair<int, double>>& terms, int type, double lo, double hi) {
    const int i = glp_add_rows(p_.get(), 1);
    glp_set_row_bnds(p_.get(), i, type, lo, hi);
    std::vector<int> ind(1);
    std::vector<double> val(1);
    for (auto [j, v] : terms) {
      ind.push_back(j);
      val.push_back(v);
    }
    glp_set_mat_row(p_.get(), i, static_cast<int>(terms.size()), ind.data(), val.data());
  }
  void objective(int dir, const std::vector<std::pair<int, double>>& terms) {
    glp_set_obj_dir(p_.get(), dir);
    for (int j = 1; j <= glp_get_num_cols(p_.get()); ++j) glp_set_obj_coef(p_.get(), j, 0.0);
    for (auto [j, v] : terms) glp_set_obj_coef(p_.get(), j, glp_get_obj_coef(p_.get(), j) + v);
  }
  // Branch-and-cut with presolve; false when no integer solution was found.
  bool solve() {
    glp_iocp parm;
    glp_init_iocp(&parm);
    parm.presolve = GLP_ON;
    parm.msg_lev = GLP_MSG_OFF;
    parm.mip_gap = 0.0;
    if (glp_intopt(p_.get(), &parm) != 0) return false;
    const int st = glp_mip_status(p_.get());
    return st == GLP_OPT || st == GLP_FEAS;
  }
  double value(int j) const { return glp_mip_col_val(p_.get(), j); }

 private:
  std::unique_ptr<glp_prob, decltype(&glp_delete_prob)> p_;
};

std::string fmt(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", v);
  return b;
}

Status validate(const PlanInput& in) {
  if (!in.cost) return Status::InvalidArgument("planner: no cost model (profile) given");
  if (in.min_decode < 0 || in.min_prefill < 0) return Status::InvalidArgument("planner: minimum instance counts must be >= 0");
  if (in.min_prefill + std::max(1, in.min_decode) > in.budget)
    return Status::InvalidArgument("planner: infeasible budget: " + std::to_string(in.budget) + " instance(s) cannot hold the minimum of " +
                                   std::to_string(in.min_prefill) + " prefill + " + std::to_string(std::max(1, in.min_decode)) +
                                   " decode instance(s)");
  if (in.budget < std::max(1, in.min_decode))
    return Status::InvalidArgument("planner: infeasible budget: " + std::to_string(in.budget) +
                                   " instance(s) cannot hold the minimum of " + std::to_string(std::max(1, in.min_decode)) +
                                   " decode instance(s) the router needs");
  const int pinned = std::max(0, in.fixed_prefill) + std::max(in.min_decode, in.fixed_decode);
  if (pinned > in.budget)
    return Status::InvalidArgument("planner: infeasible budget: the pinned plan (" + std::to_string(std::max(0, in.fixed_prefill)) +
                                   "P + " + std::to_string(std::max(in.min_decode, in.fixed_decode)) + "D) exceeds the budget of " +
                                   std::to_string(in.budget) + " instance(s)");
  for (const auto& c : in.classes) {
    if (!(c.rate >= 0) || !std::isfinite(c.rate)) return Status::InvalidArgument("planner: class " + c.name + ": rate must be a finite number >= 0");
    if (!(c.input_tokens >= 0) || !(c.output_tokens >= 0) || !std::isfinite(c.input_tokens) || !std::isfinite(c.output_tokens))
      return Status::InvalidArgument("planner: class " + c.name + ": lengths must be finite numbers >= 0");
    if (!(c.cached_fraction >= 0 && c.cached_fraction <= 1))
      return Status::InvalidArgument("planner: class " + c.name + ": cached fraction " + fmt(c.cached_fraction) + " is outside [0, 1]");
    if (!(c.ttft_slo_s > 0) || !(c.tpot_slo_s > 0)) return Status::InvalidArgument("planner: class " + c.name + ": SLO targets must be > 0");
  }
  return Status::Ok();
}

}  // namespace

Result<PlanResult> solve_plan(const PlanInput& in) {
  if (Status s = validate(in); !s.ok()) return s;
  std::vector<double> thetas = in.thresholds.empty() ? std::vector<double>{0, 32, 128, 512, 2048, kNever} : in.thresholds;
  std::sort(thetas.begin(), thetas.end());
  thetas.erase(std::unique(thetas.begin(), thetas.end()), thetas.end());

  PlanResult r;
  const size_t C = in.classes.size();
  for (const auto& c : in.classes) {
    r.costs.push_back(derive_class_cost(c, *in.cost, in.shape));
    r.demand += c.rate;
  }

  Model m;
  const double N = in.budget;
  const double p_lo = in.fixed_prefill >= 0 ? in.fixed_prefill : std::min<double>(in.min_prefill, N), p_hi = in.fixed_prefill >= 0 ? in.fixed_prefill : N;
  const double d_lo = in.fixed_decode >= 0 ? in.fixed_decode : in.min_decode, d_hi = in.fixed_decode >= 0 ? in.fixed_decode : N;
  const int nP = m.col(GLP_IV, p_lo, p_hi);
  const int nD = m.col(GLP_IV, std::max<double>(d_lo, in.min_decode), std::max<double>(d_hi, in.min_decode));
  m.row({{nP, 1}, {nD, 1}}, GLP_UP, 0, N);

  std::vector<int> z;
  std::vector<std::pair<int, double>> zsum;
  for (size_t k = 0; k < thetas.size(); ++k) {
    z.push_back(m.col(GLP_BV, 0, 1));
    zsum.push_back({z.back(), 1});
  }
  m.row(zsum, GLP_FX, 1, 1);

  std::vector<int> gR(C), gL(C), yR(C), yL(C);
  std::vector<std::pair<int, double>> prefill_row{{nP, -1}}, decode_row{{nD, -1}}, goodput;
  for (size_t c = 0; c < C; ++c) {
    const ClassDemand& d = in.classes[c];
    const ClassCost& k = r.costs[c];
    const bool remote_ok = k.rate_remote > 0 && k.cap_remote > 0;
    const bool local_ok = k.rate_local > 0;
    yR[c] = m.col(GLP_BV, 0, remote_ok ? 1 : 0);
    yL[c] = m.col(GLP_BV, 0, local_ok ? 1 : 0);
    gR[c] = m.col(GLP_CV, 0, d.rate);
    gL[c] = m.col(GLP_CV, 0, d.rate);
    m.row({{gR[c], 1}, {yR[c], -d.rate}}, GLP_UP, 0, 0);
    m.row({{gL[c], 1}, {yL[c], -d.rate}}, GLP_UP, 0, 0);
    m.row({{yR[c], 1}, {yL[c], 1}}, GLP_UP, 0, 1);
    std::vector<std::pair<int, double>> below{{yR[c], 1}}, above{{yL[c], 1}};
    for (size_t t = 0; t < thetas.size(); ++t) (thetas[t] < k.uncached_tokens ? below : above).push_back({z[t], -1});
    m.row(below, GLP_UP, 0, 0);
    m.row(above, GLP_UP, 0, 0);
    m.row({{yR[c], 1}, {nP, -1}}, GLP_UP, 0, 0);
    if (remote_ok) {
      prefill_row.push_back({gR[c], k.prefill_s / k.cap_remote});
      decode_row.push_back({gR[c], k.decode_remote_s()});
    }
    if (local_ok) decode_row.push_back({gL[c], k.decode_local_s()});
    goodput.push_back({gR[c], 1});
    goodput.push_back({gL[c], 1});
    if (!remote_ok && !local_ok && d.rate > 0)
      r.notes.push_back("class " + d.name + " cannot meet its SLO (TTFT " + fmt(d.ttft_slo_s) + " s, TPOT " + fmt(d.tpot_slo_s) +
                        " s) on any instance: prefill " + fmt(k.prefill_s) + " s, decode step at batch 1 " +
                        fmt(in.cost->decode_step_seconds(1, static_cast<int>(d.input_tokens + d.output_tokens / 2))) + " s");
  }
  m.row(prefill_row, GLP_UP, 0, 0);
  m.row(decode_row, GLP_UP, 0, 0);

  // Current instances: kept ones count against their role's instances.
  std::vector<int> keep(in.current.size());
  std::vector<std::pair<int, double>> keepP{{nP, -1}}, keepD{{nD, -1}}, keep_obj;
  double wsum = 0;
  for (const auto& s : in.current) wsum += std::max(0.0, s.cached_blocks) + 1;
  for (size_t i = 0; i < in.current.size(); ++i) {
    keep[i] = m.col(GLP_BV, 0, 1);
    (in.current[i].role == InstanceState::Role::Prefill ? keepP : keepD).push_back({keep[i], 1});
    keep_obj.push_back({keep[i], 0.5 * (std::max(0.0, in.current[i].cached_blocks) + 1) / wsum});
  }
  m.row(keepP, GLP_UP, 0, 0);
  m.row(keepD, GLP_UP, 0, 0);

  // Stage 1: maximum goodput.
  m.objective(GLP_MAX, goodput);
  if (!m.solve()) return Status::Internal("planner: GLPK found no solution (stage 1: goodput)");
  double G = 0;
  for (auto [j, v] : goodput) G += m.value(j);
  // Stage 2: fewest instances at that goodput, keeping the cache holders.
  m.row(goodput, GLP_LO, G * (1 - 1e-9) - 1e-9, 0);
  // Ties on instances: the fewest prefill instances (¼ at most over all of them, so with
  // the keep term below ¾ this never buys an instance).
  std::vector<std::pair<int, double>> stage2{{nP, 1 + 0.25 / std::max(1.0, N)}, {nD, 1}};
  for (auto [j, v] : keep_obj) stage2.push_back({j, -v});
  m.objective(GLP_MIN, stage2);
  if (!m.solve()) return Status::Internal("planner: GLPK found no solution (stage 2: instances)");

  r.prefill = static_cast<int>(std::lround(m.value(nP)));
  r.decode = static_cast<int>(std::lround(m.value(nD)));
  double lo = -1, hi = kNever;  // remote classes need θ < u, local ones θ ≥ u
  for (size_t c = 0; c < C; ++c) {
    const double vr = m.value(gR[c]), vl = m.value(gL[c]);
    const bool remote = m.value(yR[c]) > 0.5, local = m.value(yL[c]) > 0.5;
    PoolChoice p = PoolChoice::None;
    if (remote && (vr > 0 || in.classes[c].rate == 0)) p = PoolChoice::Remote;
    if (local && (vl > 0 || in.classes[c].rate == 0)) p = PoolChoice::Local;
    r.pools.push_back(p);
    r.goodput.push_back(vr + vl);
    r.total_goodput += vr + vl;
    if (p == PoolChoice::Remote) hi = std::min(hi, r.costs[c].uncached_tokens);
    if (p == PoolChoice::Local) lo = std::max(lo, r.costs[c].uncached_tokens);
  }
  // The threshold: the largest candidate consistent with the pools (prompts of classes
  // not planned stay local as long as they can).
  r.threshold = thetas.front();
  for (double t : thetas)
    if (t >= lo && t < hi) r.threshold = t;
  if (r.prefill == 0) r.threshold = kNever;
  std::vector<std::pair<double, std::string>> kept;
  for (size_t i = 0; i < in.current.size(); ++i)
    if (m.value(keep[i]) > 0.5) kept.push_back({-in.current[i].cached_blocks, in.current[i].id});
  std::stable_sort(kept.begin(), kept.end());
  for (auto& [w, id] : kept) r.keep.push_back(id);
  return r;
}

}  // namespace pdserve::planner
