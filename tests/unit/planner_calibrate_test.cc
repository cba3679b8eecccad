// Calibrating a profile against live step timings (planner/calibrate.h).
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "planner/calibrate.h"
#include "planner/simulator.h"

namespace pdserve::planner {
namespace {

Profile base() {
  return parse_profile(R"({
    "format": "pdserve-profile-v1",
    "model": {"file": "stories260K.gguf", "architecture": "llama", "n_layer": 5, "n_embd": 64, "n_head": 8,
              "n_head_kv": 4, "head_dim": 8, "n_vocab": 512, "weight_type": "f32", "kv_dtype": "f16",
              "block_size": 16},
    "machine": {"threads": 1, "cpu": "test"},
    "prefill": [{"chunk_tokens": 16, "cached_tokens": 0, "seconds": 0.002},
                {"chunk_tokens": 128, "cached_tokens": 0, "seconds": 0.012}],
    "decode": [{"batch": 1, "context": 32, "step_seconds": 0.001},
               {"batch": 4, "context": 32, "step_seconds": 0.0025},
               {"batch": 1, "context": 256, "step_seconds": 0.0012}],
    "transfer": [{"bytes": 1000, "seconds": 0.001}],
    "kv_bytes_per_token": 640
  })");
}

engine::StepSample decode(uint64_t seq, int b, double ctx, double seconds) {
  engine::StepSample s;
  s.seq = seq;
  s.decodes = b;
  s.mean_context = ctx;
  s.seconds = seconds;
  return s;
}

engine::StepSample prefill(uint64_t seq, int n, int cached, double seconds) {
  engine::StepSample s;
  s.seq = seq;
  s.chunks = {{n, cached}};
  s.seconds = seconds;
  return s;
}

TEST(PlannerCalibrate, ScalesDecodeAndPrefillByActualOverPredicted) {
  const Profile p0 = base();
  Profile p = base();
  std::vector<engine::StepSample> steps;
  uint64_t seq = 1;
  // Decode steps that took 1.5x what the profile says, prefills 2x; one mixed step (ignored).
  for (int b : {1, 2, 4})
    for (int i = 0; i < 4; ++i) steps.push_back(decode(seq++, b, 100, 1.5 * step_seconds(p0, b, 100, {})));
  for (int n : {20, 64, 128, 40, 90}) steps.push_back(prefill(seq++, n, 0, 2.0 * step_seconds(p0, 0, 0, {{n, 0}})));
  engine::StepSample mixed = decode(seq++, 1, 50, 1.0);
  mixed.chunks = {{16, 0}};
  steps.push_back(mixed);
  const CalibrationResult r = calibrate_profile(p, steps);
  EXPECT_EQ(r.decode_steps, 12);
  EXPECT_EQ(r.prefill_steps, 5);
  EXPECT_EQ(r.mixed_steps, 1);
  EXPECT_EQ(r.last_seq, seq - 1);
  EXPECT_NEAR(r.decode_scale, 1.5, 1e-9);
  EXPECT_NEAR(r.prefill_scale, 2.0, 1e-9);
  EXPECT_NEAR(p.decode_step_seconds(2, 100), 1.5 * p0.decode_step_seconds(2, 100), 1e-12);
  EXPECT_NEAR(p.prefill_seconds(64, 0), 2.0 * p0.prefill_seconds(64, 0), 1e-12);
  EXPECT_DOUBLE_EQ(p.transfer_seconds(1000), p0.transfer_seconds(1000));  // not observed: unchanged

  // Recorded in the file, cumulative over calibrations.
  const Profile q = parse_profile(profile_to_json(p));
  ASSERT_TRUE(q.calibration.calibrated());
  EXPECT_NEAR(q.calibration.decode_scale, 1.5, 1e-9);
  EXPECT_EQ(q.calibration.prefill_steps, 5);
  Profile again = q;
  std::vector<engine::StepSample> faster;
  for (int i = 0; i < 6; ++i) faster.push_back(decode(100 + i, 1, 32, 0.5 * again.decode_step_seconds(1, 32)));
  const CalibrationResult r2 = calibrate_profile(again, faster);
  EXPECT_NEAR(r2.decode_scale, 0.5, 1e-9);
  EXPECT_DOUBLE_EQ(r2.prefill_scale, 1);  // no prefill step this time
  EXPECT_NEAR(again.calibration.decode_scale, 0.75, 1e-9);
  EXPECT_NEAR(again.decode_step_seconds(1, 32), 0.75 * p0.decode_step_seconds(1, 32), 1e-12);
  EXPECT_FALSE(base().calibration.calibrated());
  EXPECT_EQ(profile_to_json(base()).find("calibration"), std::string::npos);
}

TEST(PlannerCalibrate, TooFewStepsOfAKindLeaveItsScaleAlone) {
  Profile p = base();
  const double d = p.decode_step_seconds(1, 32), f = p.prefill_seconds(16, 0);
  const CalibrationResult r = calibrate_profile(p, {decode(1, 1, 32, 9 * d), prefill(2, 16, 0, 9 * f)}, 5);
  EXPECT_DOUBLE_EQ(r.decode_scale, 1);
  EXPECT_DOUBLE_EQ(r.prefill_scale, 1);
  EXPECT_DOUBLE_EQ(p.decode_step_seconds(1, 32), d);
  EXPECT_FALSE(r.decode_scale_fitted);
  EXPECT_FALSE(r.prefill_scale_fitted);
  EXPECT_FALSE(p.calibration.calibrated());  // steps that scaled nothing are not counted
  engine::StepSample mixed = decode(3, 1, 32, 0.1);
  mixed.chunks = {{16, 0}};
  EXPECT_THROW(calibrate_profile(p, {mixed}), std::runtime_error);
  EXPECT_THROW(calibrate_profile(p, {}), std::runtime_error);
}

TEST(PlannerCalibrate, PrefillTakesTheMedianStepDecodeKeepsTheTotal) {
  const Profile p0 = base();
  Profile p = base();
  const double d = p0.decode_step_seconds(1, 32), f = p0.prefill_seconds(64, 0);
  std::vector<engine::StepSample> steps;
  // Five decode steps, the first after an idle gap at 3x: their total is 7/5 of predicted.
  for (int i = 0; i < 5; ++i) steps.push_back(decode(1 + i, 1, 32, (i == 0 ? 3 : 1) * d));
  // Five prefills at 1.2x and one disturbed at 10x: the median is 1.2.
  for (int i = 0; i < 6; ++i) steps.push_back(prefill(10 + i, 64, 0, (i == 2 ? 10 : 1.2) * f));
  const CalibrationResult r = calibrate_profile(p, steps);
  EXPECT_NEAR(r.decode_scale, 1.4, 1e-9);
  EXPECT_NEAR(r.prefill_scale, 1.2, 1e-9);
}

nlohmann::json steps_body() {
  return nlohmann::json::parse(R"({"object": "engine.steps", "model": "stories260K",
    "kv_layout": {"kv_dtype": "f16", "block_size": 16, "n_layer": 5, "n_head_kv": 4, "head_dim": 8},
    "steps": [{"seq": 7, "end_time": 1.5, "seconds": 0.004, "kind": "prefill", "decodes": 0, "mean_context": 0,
               "chunks": [[64, 16]]},
              {"seq": 8, "end_time": 1.501, "seconds": 0.001, "kind": "decode", "decodes": 2, "mean_context": 81,
               "chunks": []}]})");
}

std::string parse_error(const std::string& text) {
  try {
    parse_engine_steps(text, base(), "http://h:1/engine/steps");
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(PlannerCalibrate, ReadsAnEnginesStepsAndRefusesAnotherLayout) {
  const auto steps = parse_engine_steps(steps_body().dump(), base(), "x");
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0].seq, 7u);
  ASSERT_EQ(steps[0].chunks.size(), 1u);
  EXPECT_EQ(steps[0].chunks[0], std::make_pair(64, 16));
  EXPECT_EQ(steps[1].decodes, 2);
  EXPECT_DOUBLE_EQ(steps[1].mean_context, 81);

  nlohmann::json other = steps_body();
  other["kv_layout"]["n_layer"] = 22;
  other["model"] = "tinyllama";
  const std::string e = parse_error(other.dump());
  EXPECT_NE(e.find("http://h:1/engine/steps: the engine's KV layout (n_layer 22"), std::string::npos) << e;
  EXPECT_NE(e.find("model tinyllama) is not the profile's: stories260K.gguf"), std::string::npos) << e;
  EXPECT_NE(parse_error("<html>").find("not a JSON object"), std::string::npos);
  nlohmann::json bad = steps_body();
  bad["steps"][0].erase("seconds");
  EXPECT_NE(parse_error(bad.dump()).find("malformed steps"), std::string::npos) << parse_error(bad.dump());
}

}  // namespace
}  // namespace pdserve::planner
