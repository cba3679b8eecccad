// Per-class costs of one instance derived from the cost model (the measured profile):
// prefill instance-seconds per request (chunked, after the cached prefix), KV transfer
// time, the largest decode batch that keeps TPOT within the class's target, decode
// instance-seconds per request, and the utilisation caps that keep TTFT within target.
//
// For class c (I input tokens, O output tokens, cached fraction h, targets TTFT_c, TPOT_c):
//   cached = round(h·I), u = round(I) − cached  (uncached tokens: what is prefilled)
//   p_c  = Σ_chunks prefill_seconds(q_j, cached + q_1 + … + q_{j−1}),  q_j ≤ chunk_tokens
//   x_c  = transfer_seconds(kv_bytes_per_token · u)        (only the missing blocks move)
//   ctx  = I + O/2                                         (mean context while decoding)
//   B^R_c = max b ≤ max_seqs: decode_step(b, ctx) ≤ TPOT_c  (and b·(I+O) ≤ kv_tokens)
//   B^L_c = max b: decode_step(b, ctx) + prefill_seconds(min(u, chunk), cached) ≤ TPOT_c
//           (a decode instance that prefills locally runs a prompt chunk inside decode
//           steps: the prefill–decode interference DistServe §2.2 measures; worst case,
//           one chunk in every step)
//   d^R_c = O · decode_step(B^R, ctx) / B^R                 (decode instance-s per request)
//   d^L_c = O · decode_step(B^L, ctx) / B^L
//   TTFT: the prefill queue is M/D/1 (DistServe §3.1: mean TTFT = s + ρs/(2(1−ρ)) for
//   service time s at utilisation ρ); the largest ρ with mean TTFT ≤ TTFT_c is
//   ρ_max = 2(T − s)/(2T − s) for s < T, else 0 (the class cannot meet TTFT there):
//   remote s = p_c + x_c;  local s = p_c + ceil(u/chunk)·decode_step(B^L, ctx).
#pragma once

#include "planner/plan_input.h"

namespace pdserve::planner {

/// The costs of class `c` on instances of `shape` under `cost`. A mode whose TPOT or
/// TTFT target cannot be met on an idle instance has batch 0 / cap 0.
ClassCost derive_class_cost(const ClassDemand& c, const CostModel& cost, const InstanceShape& shape);

/// ρ_max of an M/D/1 queue with service time `s` whose mean sojourn time stays ≤ `target`.
double mdl_utilisation_cap(double s, double target);

}  // namespace pdserve::planner
