// Adaptive speculation length per sequence: k grows while proposals are accepted and
// backs off (down to not proposing at all, for a growing number of steps) while they are
// rejected, so that a batch whose proposals miss costs about what plain decoding costs.
#pragma once

#include <algorithm>

namespace pdserve::engine {

/// A sequence's speculation state.
struct SpecState {
  int k = -1;      // draft tokens to propose next (-1: not started, then k_max)
  int misses = 0;  // verifications in a row that accepted nothing
  int idle = 0;    // steps left without proposing (after misses)
};

/// Draft tokens to ask for in this step (0: none), counting an idle step down.
/// Without `adaptive`, always k_max.
inline int spec_next_k(SpecState& st, int k_max, bool adaptive) {
  if (!adaptive) return k_max;
  if (st.k < 0) st.k = k_max;
  if (st.idle > 0) {
    --st.idle;
    return 0;
  }
  return std::min(st.k, k_max);
}

/// After verifying `proposed` (> 0) tokens of which the first `accepted` matched: all
/// accepted ⇒ k + 1 (at most k_max); some ⇒ accepted + 1; none ⇒ k = 1, and from the
/// second miss in a row on, 2^misses idle steps (at most 64) before the next proposal.
inline void spec_update(SpecState& st, int k_max, int proposed, int accepted) {
  if (st.k < 0) st.k = k_max;
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
