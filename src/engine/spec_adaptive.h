// Adaptive speculation length per sequence: k grows while proposals are accepted and
// backs off (down to not proposing at all, for a growing number of steps) while they are
// rejected, so that a batch whose proposals miss costs about what plain decoding costs.
// With a cost threshold (engine/spec_cost.h) k is also cut to the draft rows whose
// estimated acceptance pays for them.
#pragma once

#include <algorithm>

namespace pdserve::engine {

/// A sequence's speculation state.
struct SpecState {
  int k = -1;      // draft tokens to propose next (-1: not started, then k_max)
  int misses = 0;  // verifications in a row that accepted nothing
  int idle = 0;    // steps left without proposing (after misses or a closed cost gate)
  double hits = 0, fails = 0;  // decayed accepted draft tokens and first rejections
  int gated = 0;       // cost-gate closings in a row (sets the idle backoff)
  bool probe = false;  // the gate's idle ran out: propose one token to re-measure
  int verified = 0;    // verifications so far (the first one is never gated)
};

/// Estimated chance that a draft token is accepted once the ones before it were:
/// accepted / (accepted + rejections) over the last verifications, prior 1/2.
inline double spec_acceptance(const SpecState& st) { return (st.hits + 0.5) / (st.hits + st.fails + 1.0); }

/// Draft rows worth running: the largest k <= k_max with acceptance^k > threshold (the
/// k-th row's token is emitted with probability acceptance^k). threshold <= 0: k_max.
inline int spec_cost_k(double acceptance, double threshold, int k_max) {
  if (threshold <= 0) return k_max;
  int k = 0;
  for (double p = acceptance; k < k_max && p > threshold; p *= acceptance) ++k;
  return k;
}

/// Longest idle backoff of a closed cost gate, in steps: a 1-token probe then costs at
/// most 1/256 of a row per step.
inline constexpr int kSpecMaxGatedIdle = 256;

/// Draft tokens to ask for in this step (0: none), counting an idle step down.
/// Without `adaptive`, always k_max. `threshold` (SpecCostModel::threshold; 0: none)
/// caps k by spec_cost_k, with the prior acceptance 1/2 for the sequence's first proposal
/// (which measures its acceptance: at least one token); when it allows no row the
/// sequence idles 2^closings steps
/// (at most kSpecMaxGatedIdle), then probes with one token. With threshold >= 1 no
/// acceptance could pay: the sequence's first proposal is a 1-token probe (none when
/// `cheap_probe` is false, e.g. a draft model that would first have to compute the whole
/// prompt), and after it nothing is proposed.
inline int spec_next_k(SpecState& st, int k_max, bool adaptive, double threshold = 0, bool cheap_probe = true) {
  if (!adaptive) return k_max;
  if (st.k < 0) st.k = k_max;
  if (st.idle > 0) {
    if (--st.idle == 0 && st.gated > 0) st.probe = true;
    return 0;
  }
  const int k = std::min(st.k, k_max);
  if (threshold <= 0) return k;
  if (threshold >= 1) return st.verified == 0 && cheap_probe ? 1 : 0;
  // The first proposal measures the sequence's acceptance: as many rows as the prior
  // (1/2) pays for, but at least a 1-token probe (a proposer whose first proposal is
  // costly, a draft model, gets its k: the prompt is paid for either way). A batch of new
  // sequences then does not run k_max rows each that the gate would never have allowed.
  if (st.verified == 0) return cheap_probe ? std::clamp(spec_cost_k(spec_acceptance(st), threshold, k), 1, k) : k;
  const int ck = spec_cost_k(spec_acceptance(st), threshold, k_max);
  if (ck > 0) {
    st.gated = 0;
    st.probe = false;
    return std::min(k, ck);
  }
  if (st.probe) {
    st.probe = false;
    return 1;
  }
  st.idle = std::min(kSpecMaxGatedIdle, 1 << std::min(++st.gated, 8));
  return 0;
}

/// After verifying `proposed` (> 0) tokens of which the first `accepted` matched: all
/// accepted ⇒ k + 1 (at most k_max); some ⇒ accepted + 1; none ⇒ k = 1, and from the
/// second miss in a row on, 2^misses idle steps (at most 64) before the next proposal.
/// Also updates the acceptance estimate (spec_acceptance; older verifications weigh
/// 0.8^age).
inline void spec_update(SpecState& st, int k_max, int proposed, int accepted) {
  if (st.k < 0) st.k = k_max;
  st.hits = 0.8 * st.hits + accepted;
  st.fails = 0.8 * st.fails + (accepted < proposed ? 1 : 0);
  ++st.verified;
  if (accepted >= proposed) {
    st.k = std::min(k_max, std::max(st.k, proposed) + 1);
    st.misses = 0;
  } else if (accepted > 0) {
    st.k = std::min(k_max, accepted + 1);
    st.misses = 0;
  } else {
    st.k = 1;
    if (++st.misses >= 2) st.idle = std::min(64, 1 << std::min(st.misses, 6));
  }
}

}  // namespace pdserve::engine
