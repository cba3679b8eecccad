// Per-class capacities of one instance derived from the cost model (the measured profile):
// the prefill pool's TTFT-safe utilisation, and how many requests per second one decode
// instance serves within the class's SLO — decode-only (prefill remote) or prefilling
// them itself (local, = colocated) — with queueing slack, so that the MIP's linear rows
// (planner/mip_goodput.h) size each pool at a load it can actually hold.
//
// Notation, class c: I input and O output tokens, cached fraction h, targets T (TTFT) and
// D (TPOT); shape: chunk = chunk_tokens, seats Bmax = min(max_seqs, kv_tokens / (I + O)).
//   cached = round(h·I), u = round(I) − cached, n_ch = ⌈u / chunk⌉   (u: what is prefilled)
//   P   = Σ_j prefill_seconds(q_j, cached + q_1 + … + q_{j−1}),  q_j ≤ chunk
//   x   = transfer_seconds(kv_bytes_per_token · u)   (only the missing blocks move)
//   ctx = I + O/2 (mean context while decoding),  t(b) = decode_step_seconds(b, ctx)
//         (t(b) = t(1) for b < 1: a step runs at least one sequence)
//   φ   = clamp(2·t(1) − t(2), 0, t(1))  the fixed cost of a forward pass, which a prompt
//         chunk riding in a decode step does not pay again (as the simulator's step_seconds)
//   P'  = max(0, P − n_ch·φ)             the time a request's chunks add to decode steps
//
// Prefill instance (remote mode), as DistServe §3.1: an M/D/1 queue with service
// s = P + x; mean TTFT = s + ρs/(2(1−ρ)) ≤ T ⇒ ρ ≤ ρR = 2(T − s)/(2T − s) (0 if s ≥ T).
//
// Decode instance, at λ requests/s of the class per instance (ρ_p = 0 in remote mode):
//   prefill share    ρ_p = λ·P'  (the share of the instance's time spent on prompt chunks)
//   interference     a step carries a chunk with frequency f: chunk steps per second are
//                    λ·n_ch and steps per second 1/τ, so f = λ·n_ch·τ; the mean step
//                    τ = t(N) + f·P'/n_ch ⇒ τ(N) = t(N) / (1 − ρ_p) — load-dependent, not
//                    the worst case of a whole chunk in every step
//   Little's law     N = λ·O·τ(N): the mean running batch (each request holds a seat for O
//                    steps; the smallest root); the mean TPOT is τ(N)
//   TPOT batch       B_D = max b ≤ Bmax with τ(b) ≤ D
//   queueing slack (at most ε = kMissShare of the requests miss, one term each):
//     (1) batch:     the number running fluctuates around N ≈ Poisson(N) (M/G/∞, whatever
//                    the length distribution): N + z·√N ≤ B_D, z = 1.645 (P(> N + z√N) ≈ ε)
//                    — square-root staffing (Halfin–Whitt) instead of sizing at N = B_D
//     (2) saturation: a compute-bound instance (b/t(b) flat, as on a CPU) is a
//                    processor-sharing server of μ = max_{b ≤ Bmax} b/t(b) tokens/s at
//                    utilisation ρ = λ·(O/μ + P'); its number in system is geometric,
//                    P(N ≥ n) = ρ^n, so ρ^(B_D + 1) ≤ ε
//     (3) chunks met (local): a request meets K ~ Poisson(f·O) chunk steps in its O steps
//                    and its TPOT is t(N) + K·(P'/n_ch)/O; P(K ≥ k*) ≤ ε for the least k*
//                    that breaks D
//     (4) TTFT (local): prompts queue FIFO for the one chunk a step takes; a prompt's
//                    service is s_L = max(P, P' + n_ch·t(N)): M/D/1 at ρ_s = λ·s_L, mean
//                    s_L + ρ_s·s_L / (2(1 − ρ_s)) ≤ T
//   capacity         λ_max = the largest λ meeting (1)–(4) (each is monotone in λ: bisection)
//   The MIP charges 1/λ_max decode instance-seconds per request (a mix of classes on one
//   pool adds their shares linearly: exact for one class, an interpolation for several).
#pragma once

#include "planner/plan_input.h"

namespace pdserve::planner {

/// The share of a class's requests the capacities allow to miss the SLO (ε above).
constexpr double kMissShare = 0.05;

/// The costs of class `c` on instances of `shape` under `cost`. A mode that cannot meet
/// the class's TPOT or TTFT even on an idle instance has rate 0 (cap 0 for the prefill pool).
ClassCost derive_class_cost(const ClassDemand& c, const CostModel& cost, const InstanceShape& shape);

/// ρ_max of an M/D/1 queue with service time `s` whose mean sojourn time stays ≤ `target`.
double mdl_utilisation_cap(double s, double target);

/// The operating point of one decode instance serving `rate` requests/s of `c`, decode
/// only (`local` false) or prefilling them too (true), under the model above.
struct DecodeOperatingPoint {
  bool ok = false;          // (1)–(4) hold
  double batch = 0;         // N, mean running sequences (Little)
  double step_s = 0;        // τ(N), the mean step = mean TPOT
  double prefill_share = 0; // ρ_p
  double utilisation = 0;   // ρ of (2)
  int tpot_batch = 0;       // B_D
};
DecodeOperatingPoint decode_point(const ClassDemand& c, const CostModel& cost, const InstanceShape& shape, double rate, bool local);

}  // namespace pdserve::planner
