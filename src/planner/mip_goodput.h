// The planner's mixed-integer program (GLPK): how many prefill and decode instances,
// which conditional-disaggregation threshold, and which class goes to which pool, to
// maximise SLO goodput within a budget of instances.
//
// Sources: DistServe (Zhong et al., OSDI '24) — goodput (requests/s meeting both TTFT and
// TPOT) as the objective, prefill as an M/D/1 queue, placement of P and D per SLO;
// Splitwise (Patel et al., ISCA '24) — sizing separate prompt and token pools by the
// mix of prompt and output lengths; NVIDIA Dynamo's planner and llm-d's autoscaler —
// the loop around it (observe the router, forecast, re-plan every interval, scale the
// pools, keep hot-cache instances).
//
// Data (per class c; planner/plan_capacity.h derives them from the profile and writes out
// the queueing model behind them):
//   λ_c    arrival rate (requests/s)                u_c   uncached prompt tokens
//   p_c    prefill instance-seconds per request     ρR_c  prefill-pool utilisation cap (TTFT, M/D/1)
//   R_c    req/s one decode-only instance serves within the SLO with queueing slack
//          (Little's law at the profile's step time, square-root staffing of the batch,
//          processor-sharing saturation), 0: never
//   L_c    req/s one instance that also prefills them serves (colocated: the same, with the
//          load-dependent chunk interference τ = t(N)/(1 − λ·P') and the local prompt
//          queue's TTFT), 0: never
//   N      budget (instances)                       θ_k   candidate thresholds, k = 1..K
//   w_i    cache weight of current instance i
// Variables:
//   nP, nD ∈ ℤ≥0        prefill and decode instances
//   g_cR, g_cL ≥ 0      goodput of class c prefilled remotely (P pool → D pool) / locally
//                       (on its decode instance, colocated)
//   y_cR, y_cL ∈ {0,1}  class c's pool (at most one)
//   z_k ∈ {0,1}         threshold θ_k chosen (exactly one)
//   k_i ∈ {0,1}         current instance i kept (its role's count bounds them)
// Constraints:
//   g_cm ≤ λ_c · y_cm                             only its pool serves a class
//   y_cR + y_cL ≤ 1
//   y_cR ≤ Σ_{k: θ_k < u_c} z_k,  y_cL ≤ Σ_{k: θ_k ≥ u_c} z_k,  Σ_k z_k = 1
//                                                 (one threshold splits remote from local)
//   Σ_c g_cR · p_c / ρR_c ≤ nP                     prefill pool within its TTFT-safe load
//   Σ_c g_cR / R_c + Σ_c g_cL / L_c ≤ nD           decode pool: each class's share of an
//                                                 instance at its SLO-safe rate (local prefill
//                                                 included in L_c)
//   y_cR ≤ nP                                     remote needs a prefill instance
//   nP + nD ≤ N,  nD ≥ min_decode
//   Σ_{i ∈ P now} k_i ≤ nP,  Σ_{i ∈ D now} k_i ≤ nD
//   (a mode that cannot meet the class's TTFT or TPOT even idle has y fixed at 0)
// Objective, lexicographic (two solves):
//   1. max G = Σ_c (g_cR + g_cL)                  SLO goodput
//   2. min nP + nD + (¼/N)·nP − ½ Σ_i w_i k_i  s.t. Σ g ≥ G·(1 − 1e−9)
//      (fewest instances; among those, the fewest prefill instances — resource pooling:
//      a colocated instance's idle time absorbs a burst of either phase, a split pool
//      strands it in one, so at equal goodput and size the less disaggregated plan has
//      the slack where the burst lands; then keep the current instances holding the most
//      prefix cache: w_i = (cached_i + 1) / Σ_j (cached_j + 1); the fractional terms sum
//      below ¾, so they never buy an instance)
#pragma once

#include "base/status.h"
#include "planner/plan_input.h"

namespace pdserve::planner {

/// Solves the program above for `in` (pure: same input, same plan). Errors
/// (InvalidArgument, one line naming the problem): no cost model, a budget below the
/// decode minimum (or below pinned counts), a negative rate or length, a cached
/// fraction outside [0, 1]. A budget too small for the load is not an error: the plan
/// is the best partial goodput, and `notes` name the classes that cannot meet their SLO
/// on any instance.
Result<PlanResult> solve_plan(const PlanInput& in);

}  // namespace pdserve::planner
