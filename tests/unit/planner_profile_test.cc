// The profile format (planner/profile.h): loader errors, model checks, interpolation.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "planner/profile.h"

namespace pdserve::planner {
namespace {

nlohmann::json good_json() {
  return nlohmann::json::parse(R"({
    "format": "pdserve-profile-v1",
    "model": {"file": "stories260K.gguf", "architecture": "llama", "n_layer": 5, "n_embd": 64, "n_head": 8,
              "n_head_kv": 4, "head_dim": 8, "n_vocab": 512, "weight_type": "f32", "kv_dtype": "f16",
              "block_size": 16, "n_ctx": 512},
    "machine": {"threads": 1, "cpu": "test"},
    "prefill": [{"chunk_tokens": 10, "cached_tokens": 0, "seconds": 0.010},
                {"chunk_tokens": 20, "cached_tokens": 0, "seconds": 0.030},
                {"chunk_tokens": 10, "cached_tokens": 100, "seconds": 0.020},
                {"chunk_tokens": 20, "cached_tokens": 100, "seconds": 0.050}],
    "decode": [{"batch": 1, "context": 10, "step_seconds": 0.001},
               {"batch": 3, "context": 10, "step_seconds": 0.002}],
    "transfer": [{"bytes": 1000, "seconds": 0.001}, {"bytes": 3000, "seconds": 0.002}],
    "kv_bytes_per_token": 640
  })");
}

std::string error_of(const std::string& text) {
  try {
    parse_profile(text, "p.json");
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(PlannerProfile, ParsesAndRoundTrips) {
  Profile p = parse_profile(good_json().dump());
  EXPECT_EQ(p.model.file, "stories260K.gguf");
  EXPECT_EQ(p.model.n_ctx, 512);
  EXPECT_EQ(p.prefill.size(), 4u);
  EXPECT_DOUBLE_EQ(p.kv_bytes_per_token, 640);
  EXPECT_DOUBLE_EQ(p.frontend_seconds, 0);  // optional: older profiles have none
  EXPECT_DOUBLE_EQ(p.machine.idle_gap_seconds, 0);  // optional too: back-to-back samples
  p.frontend_seconds = 0.0025;
  p.machine.idle_gap_seconds = 0.5;
  Profile q = parse_profile(profile_to_json(p));
  EXPECT_EQ(profile_to_json(q), profile_to_json(p));
  EXPECT_DOUBLE_EQ(q.frontend_seconds, 0.0025);
  EXPECT_DOUBLE_EQ(q.machine.idle_gap_seconds, 0.5);
  EXPECT_DOUBLE_EQ(q.prefill_seconds(15, 50), p.prefill_seconds(15, 50));
}

TEST(PlannerProfile, LoaderErrorsNameTheProblem) {
  EXPECT_EQ(error_of("{\"format\": "), std::string("p.json: bad JSON: ") + [] {
              try {
                [[maybe_unused]] const auto j = nlohmann::json::parse("{\"format\": ");
              } catch (const nlohmann::json::parse_error& e) {
                return std::string(e.what());
              }
              return std::string();
            }());
  auto j = good_json();
  j["format"] = "pdserve-profile-v0";
  EXPECT_EQ(error_of(j.dump()), "p.json: format is \"pdserve-profile-v0\", expected \"pdserve-profile-v1\"");
  j = good_json();
  j.erase("format");
  EXPECT_EQ(error_of(j.dump()), "p.json: missing field format");
  j = good_json();
  j["model"].erase("n_layer");
  EXPECT_EQ(error_of(j.dump()), "p.json: missing field model.n_layer");
  j = good_json();
  j["prefill"][2].erase("seconds");
  EXPECT_EQ(error_of(j.dump()), "p.json: missing field prefill[2].seconds");
  j = good_json();
  j["decode"][1]["step_seconds"] = "fast";
  EXPECT_EQ(error_of(j.dump()), "p.json: field decode[1].step_seconds is not a number");
  j = good_json();
  j["transfer"] = nlohmann::json::array();
  EXPECT_EQ(error_of(j.dump()), "p.json: field transfer is empty");
  j = good_json();
  j["decode"][0]["batch"] = -1;
  EXPECT_EQ(error_of(j.dump()), "p.json: field decode[0].batch is out of range");
  EXPECT_EQ(error_of("[1, 2]"), "p.json: not a JSON object");
}

TEST(PlannerProfile, LoadFileErrors) {
  try {
    load_profile("/nonexistent/profile.json");
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "/nonexistent/profile.json: cannot read the profile");
  }
  const std::string path = ::testing::TempDir() + "planner_profile_bad.json";
  std::ofstream(path) << "not json";
  try {
    load_profile(path);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(path + ": bad JSON: ", 0), 0u) << e.what();
  }
  std::remove(path.c_str());
}

TEST(PlannerProfile, OtherModelIsRejected) {
  Profile p = parse_profile(good_json().dump());
  ProfileModel same = p.model;
  same.file = "renamed.gguf";  // the same layout under another name is fine
  EXPECT_NO_THROW(check_profile_matches(p, same));
  ProfileModel other = p.model;
  other.file = "synth-llama-small-q8_0.gguf";
  other.n_layer = 4;
  other.weight_type = "q8_0";
  try {
    check_profile_matches(p, other);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()),
              "profile is for model stories260K.gguf (llama, n_layer 5, n_embd 64, n_head 8, n_head_kv 4, head_dim 8, "
              "n_vocab 512, weights f32, kv f16, block_size 16), this is synth-llama-small-q8_0.gguf (llama, n_layer 4, "
              "n_embd 64, n_head 8, n_head_kv 4, head_dim 8, n_vocab 512, weights q8_0, kv f16, block_size 16)");
  }
  ProfileModel kv = p.model;
  kv.kv_dtype = "f32";
  EXPECT_THROW(check_profile_matches(p, kv), std::runtime_error);
  ProfileModel bs = p.model;
  bs.block_size = 32;
  EXPECT_THROW(check_profile_matches(p, bs), std::runtime_error);
}

TEST(PlannerProfile, Interpolation) {
  // Inside a segment, at the points, and linear extrapolation past both ends.
  std::vector<std::pair<double, double>> pts = {{10, 1}, {20, 3}, {40, 4}};
  EXPECT_DOUBLE_EQ(interpolate(pts, 10), 1);
  EXPECT_DOUBLE_EQ(interpolate(pts, 15), 2);
  EXPECT_DOUBLE_EQ(interpolate(pts, 30), 3.5);
  EXPECT_DOUBLE_EQ(interpolate(pts, 60), 5);    // slope of the last segment: 1/20
  EXPECT_DOUBLE_EQ(interpolate(pts, 5), 0);     // slope 0.2 below 10: 1 - 1 = 0
  EXPECT_DOUBLE_EQ(interpolate(pts, 0), 0);     // clamped at 0 (would be -1)
  EXPECT_DOUBLE_EQ(interpolate({{4, 2}}, 8), 4);  // one point: through the origin
  EXPECT_DOUBLE_EQ(interpolate({}, 8), 0);

  Profile p = parse_profile(good_json().dump());
  // Prefill: rows by cached tokens (0, 100), each by chunk size.
  EXPECT_DOUBLE_EQ(p.prefill_seconds(10, 0), 0.010);
  EXPECT_DOUBLE_EQ(p.prefill_seconds(15, 0), 0.020);
  EXPECT_DOUBLE_EQ(p.prefill_seconds(15, 100), 0.035);
  EXPECT_NEAR(p.prefill_seconds(15, 50), 0.0275, 1e-12);
  EXPECT_NEAR(p.prefill_seconds(30, 0), 0.050, 1e-12);    // past the largest chunk
  EXPECT_NEAR(p.prefill_seconds(20, 200), 0.070, 1e-12);  // past the largest cached prefix
  EXPECT_EQ(p.prefill_seconds(0, 0), 0);
  // Decode: one context row ⇒ no dependence on context.
  EXPECT_DOUBLE_EQ(p.decode_step_seconds(2, 10), 0.0015);
  EXPECT_DOUBLE_EQ(p.decode_step_seconds(2, 500), 0.0015);
  EXPECT_NEAR(p.decode_step_seconds(5, 10), 0.003, 1e-12);
  EXPECT_EQ(p.decode_step_seconds(0, 10), 0);
  EXPECT_NEAR(p.transfer_seconds(2000), 0.0015, 1e-12);
  EXPECT_NEAR(p.transfer_seconds(5000), 0.003, 1e-12);
}

}  // namespace
}  // namespace pdserve::planner
