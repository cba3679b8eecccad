// `pdserve profile` + `pdserve calibrate` + `pdserve simulate` against a real run (issue
// #15's Done-when): a short Azure-trace slice at its native low rate (about 1 request/s)
// through one real `serve` measured with `pdserve bench`, and the same slice simulated with
// a profile measured here and calibrated with the server's live step timings: TTFT p50 and
// TPOT p50 agree within 25 %. The run uses the synth-llama-small f16 file (decode steps of
// ~1-2 ms at one thread): stories260K's steps (~0.1-0.4 ms) are shorter than the OS's
// wake-up jitter, which then bunches a stream's tokens at the client and moves its TPOT by
// a third.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "planner/profile.h"
#include "planner/profiler.h"
#include "support/server_process.h"
#include "support/pdserve_bin.h"

namespace pdserve {
namespace {

using nlohmann::json;

constexpr const char* kModel = "../shared/models/stories260K.gguf";
constexpr const char* kRunModel = "../shared/models/synth-llama-small-f16.gguf";
constexpr const char* kAzure = "../shared/traces/azure_llm_inference_2023_conv.csv";

struct Cmd {
  int exit_code = -1;
  std::string out;
};

/// Runs `pdserve ARGS` with stderr folded into the output.
Cmd pdserve(const std::string& args) {
  Cmd r;
  FILE* p = ::popen((testing::pdserve_bin() + " " + args + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), p)) > 0;) r.out.append(buf, n);
  const int st = ::pclose(p);
  r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str(), nullptr, false);
}

std::string temp_dir() {
  char tmpl[] = "/tmp/pdserve-plansim-XXXXXX";
  return ::mkdtemp(tmpl) ? tmpl : "/tmp";
}

// The grid the slice needs: prompts <= 128 tokens, contexts <= 160, batches of a few.
std::string profile_flags(const char* model) {
  return std::string("profile -m ") + model + " -t 1 --chunks 16,32,64,128 --cached 0,64 --batches 1,2,4 --contexts 32,128 "
    "--transfer-bytes 65536";
}
const std::string kProfileFlags = profile_flags(kModel);
const std::string kSlice = std::string("--trace azure ") + kAzure +
                           " --max-requests 12 --length-scale 0.25 --max-input 128 --max-output 32";

TEST(PlannerSimVsReal, ProfileDescribesTheModel) {
  const std::string dir = temp_dir();
  Cmd c = pdserve(kProfileFlags + " --repeats 1 -o " + dir + "/p.json");
  ASSERT_EQ(c.exit_code, 0) << c.out;
  planner::Profile p = planner::load_profile(dir + "/p.json");
  engine::EngineConfig ec;
  ec.model_path = kModel;
  planner::ProfileModel m = planner::describe_model(ec);
  EXPECT_NO_THROW(planner::check_profile_matches(p, m));
  EXPECT_EQ(p.model.n_layer, 5);
  EXPECT_EQ(p.model.n_ctx, 512);
  EXPECT_EQ(p.machine.threads, 1);
  EXPECT_DOUBLE_EQ(p.machine.idle_gap_seconds, 0);  // the default: samples back to back
  EXPECT_EQ(p.prefill.size(), 8u);   // 4 chunks x 2 cached prefixes
  EXPECT_EQ(p.decode.size(), 6u);    // 3 batches x 2 contexts
  EXPECT_EQ(p.transfer.size(), 1u);
  // K+V of one token: 5 layers x 4 KV heads x head_dim 8 x 2 (K, V) x 2 bytes (f16).
  EXPECT_DOUBLE_EQ(p.kv_bytes_per_token, 5 * 4 * 8 * 2 * 2);
  for (const auto& x : p.prefill) EXPECT_GT(x.seconds, 0);
  for (const auto& x : p.decode) EXPECT_GT(x.step_seconds, 0);
  // HTTP, tokenisation and SSE cost something (through the real server in process).
  EXPECT_GT(p.frontend_seconds, 0);
  EXPECT_LT(p.frontend_seconds, 1.0);

  // The profile is for stories260K: another model's layout is refused by name.
  Cmd other = pdserve("simulate --profile " + dir + "/p.json -m ../shared/models/synth-llama-small-q8_0.gguf " + kSlice +
                      " --colocated 1");
  EXPECT_EQ(other.exit_code, 1);
  EXPECT_NE(other.out.find("error: profile is for model stories260K.gguf (llama, n_layer 5"), std::string::npos) << other.out;
  EXPECT_NE(other.out.find(", this is synth-llama-small-q8_0.gguf ("), std::string::npos) << other.out;
  // A trace that does not parse.
  std::ofstream(dir + "/bad.csv") << "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,12,3\n";
  Cmd bad = pdserve("simulate --profile " + dir + "/p.json -m " + kModel + " --trace azure " + dir +
                    "/bad.csv --colocated 1");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.out.find("error: "), std::string::npos);
  EXPECT_NE(bad.out.find("bad.csv"), std::string::npos) << bad.out;
  // A profile that does not parse.
  std::ofstream(dir + "/bad.json") << "{\"format\": \"pdserve-profile-v1\"}";
  Cmd badp = pdserve("simulate --profile " + dir + "/bad.json -m " + kModel + " " + kSlice + " --colocated 1");
  EXPECT_EQ(badp.exit_code, 1);
  EXPECT_NE(badp.out.find("error: " + dir + "/bad.json: missing field model"), std::string::npos) << badp.out;
}

// The real `serve` runs its steps slower at a low request rate than `pdserve profile`
// measures them back to back: on an idle machine (2026-12-02, this test's first form) TTFT
// p50 10.8-16.9 ms real vs 7.9-12.7 simulated, TPOT 1.25-1.67 vs 1.05-1.2 ms. The
// server's own debug log showed why: after each idle gap the prefill and the first
// decode steps run up to 3x slower (3.1, 1.9, 1.6, 1.3 ... 1.1 ms), back-to-back requests
// do not (decode p50 1.1 ms, as the profile). So the profile is calibrated the way a
// deployment keeps it calibrated: from the live step timings the server publishes
// (GET /engine/steps, `pdserve calibrate`) during an earlier slice with other prompts;
// then a new slice is run and simulated with the calibrated profile. The machine is
// shared (the TTFT p50 of 12 requests moves by ±15 % between two real runs here): up to 5
// attempts, each calibrated with every step served so far.
TEST(PlannerSimVsReal, ACalibratedSimulationReproducesARealServeRun) {
  const std::string dir = temp_dir();
  testing::ServerProcess::Options so;
  so.model = kRunModel;
  so.extra_args = {"-t", "1"};
  testing::ServerProcess srv(so);
  ASSERT_TRUE(srv.ready()) << srv.error();
  Cmd prof = pdserve(profile_flags(kRunModel) + " --repeats 3 -o " + dir + "/p.json");
  ASSERT_EQ(prof.exit_code, 0) << prof.out;
  auto run_real = [&](int seed) {
    // Other prompt texts each run (--seed): the server's prefix cache holds the earlier ones.
    Cmd real = pdserve("bench --url " + srv.base_url() + " --tokenizer " + kRunModel + " " + kSlice + " --seed " +
                       std::to_string(seed) + " --no-progress --json " + dir + "/real.json");
    EXPECT_EQ(real.exit_code, 0) << real.out;
    const json r = read_json(dir + "/real.json");
    EXPECT_EQ(r["summary"]["completed"], 12) << real.out;
    return r;
  };
  auto simulate = [&](const std::string& profile, int seed) {
    Cmd sim = pdserve("simulate --profile " + profile + " -m " + kRunModel + " " + kSlice + " --seed " +
                      std::to_string(seed) + " --colocated 1 --json " + dir + "/sim.json");
    EXPECT_EQ(sim.exit_code, 0) << sim.out;
    const json s = read_json(dir + "/sim.json");
    EXPECT_EQ(s["summary"]["completed"], 12) << sim.out;
    return s;
  };
  run_real(100);  // the first calibration's steps
  std::string attempts;
  bool agreed = false;
  for (int attempt = 1; attempt <= 5 && !agreed && !HasFailure(); ++attempt) {
    Cmd cal = pdserve("calibrate --profile " + dir + "/p.json --url " + srv.base_url() + " -o " + dir + "/pc.json");
    ASSERT_EQ(cal.exit_code, 0) << cal.out;
    const planner::Profile pc = planner::load_profile(dir + "/pc.json");
    ASSERT_TRUE(pc.calibration.calibrated()) << cal.out;
    EXPECT_GE(pc.calibration.decode_steps, 12) << cal.out;
    if (pc.calibration.prefill_steps < 5) {
      // On a busy machine more prompts join decode steps (mixed steps, not used), so a slice
      // can leave fewer than --min-steps prefill-only steps: serve another slice and calibrate
      // again with every step so far (seen 2026-12-07 with the whole suite and a second job
      // on 2 cores: 4 prefill steps, 6 mixed).
      attempts += "attempt " + std::to_string(attempt) + ": " + std::to_string(pc.calibration.prefill_steps) +
                  " prefill steps (< 5): another slice first\n";
      run_real(200 + attempt);
      continue;
    }
    const json r = run_real(attempt);
    const json s = simulate(dir + "/pc.json", attempt);
    const json u = simulate(dir + "/p.json", attempt);  // uncalibrated, for the record
    ASSERT_EQ(s["summary"]["output_tokens"], r["summary"]["output_tokens"]);
    const double ttft_r = r["summary"]["ttft_ms"]["p50"], ttft_s = s["summary"]["ttft_ms"]["p50"];
    const double tpot_r = r["summary"]["tpot_ms"]["p50"], tpot_s = s["summary"]["tpot_ms"]["p50"];
    char line[512];
    std::snprintf(line, sizeof(line),
                  "attempt %d: TTFT p50 real %.2f ms, simulated %.2f ms (uncalibrated %.2f); TPOT p50 real %.3f ms, "
                  "simulated %.3f ms (uncalibrated %.3f); scales decode %.3f prefill %.3f\n",
                  attempt, ttft_r, ttft_s, u["summary"]["ttft_ms"]["p50"].get<double>(), tpot_r, tpot_s,
                  u["summary"]["tpot_ms"]["p50"].get<double>(), pc.calibration.decode_scale, pc.calibration.prefill_scale);
    attempts += line;
    agreed = std::abs(ttft_s - ttft_r) <= 0.25 * ttft_r && std::abs(tpot_s - tpot_r) <= 0.25 * tpot_r;
  }
  std::fputs(attempts.c_str(), stdout);
  EXPECT_TRUE(agreed) << attempts;
}

}  // namespace
}  // namespace pdserve
