// Calibrating a measured profile (planner/profile.h) against a running engine: the engine
// publishes each step it ran and how long it took (engine/step_timings.h, GET
// /engine/steps); predicting those same steps with the profile (planner::step_seconds,
// the simulator's own step cost) and scaling the profile by actual / predicted makes it
// describe the instance as it runs now — at its real request rate, idle gaps and
// neighbours included — rather than as `pdserve profile` measured it back to back.
//
// Scales: decode points × Σ actual / Σ predicted over decode-only steps (a request's TPOT
// is the mean of its steps, slow ones after an idle gap included, so the sum is kept);
// prefill points × the median of actual / predicted over prefill-only steps (a request's
// TTFT is one prefill: the median step gives the median TTFT, and one step disturbed by a
// neighbour does not move it). Mixed steps are counted but not used (their split between
// the two is not observed). A kind with fewer than `min_steps` steps keeps its scale 1.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/step_timings.h"
#include "planner/profile.h"

namespace pdserve::planner {

/// What one calibration did.
struct CalibrationResult {
  int decode_steps = 0, prefill_steps = 0, mixed_steps = 0;  // steps seen, by kind
  double decode_scale = 1, prefill_scale = 1;                // applied (1: too few steps)
  bool decode_scale_fitted = false, prefill_scale_fitted = false;  // false: fewer than min_steps
  uint64_t last_seq = 0;                                     // the newest step used (for ?since=)
};

/// Scales `p`'s prefill and decode points to `steps` (see the file comment) and records
/// the cumulative scales in p.calibration. Throws std::runtime_error when no step has a
/// usable kind (all mixed, or none at all).
CalibrationResult calibrate_profile(Profile& p, const std::vector<engine::StepSample>& steps, int min_steps = 5);

/// Parses the body of GET /engine/steps (server/info_json.h) and checks that the engine's
/// KV layout is the profile's (n_layer, n_head_kv, head_dim, KV dtype, block size).
/// Throws std::runtime_error naming `what` and the problem.
std::vector<engine::StepSample> parse_engine_steps(const std::string& json_text, const Profile& p,
                                                   const std::string& what);

}  // namespace pdserve::planner
