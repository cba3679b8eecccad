// Subcommands of the planner layer (src/planner): `pdserve profile` measures an engine's
// cost model, `pdserve calibrate` scales it to a running engine's live step timings,
// `pdserve simulate` replays a workload through simulated instances with it.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "loadgen/bench.h"
#include "planner/profiler.h"
#include "planner/simulator.h"

namespace pdserve::cli {

struct ProfileArgs {
  planner::ProfileOptions opts;
  std::string output;  // -o FILE ("" or "-": stdout)
  bool quick = false;  // --quick: a small grid (seconds)
};
void add_profile_command(CLI::App& app, ProfileArgs& a);
int run_profile(ProfileArgs& a);

/// `pdserve calibrate`: scales a profile to a running engine's live step timings.
struct CalibrateArgs {
  std::string profile;    // --profile IN
  std::string url;        // --url http://HOST:PORT of serve / a worker's metrics port
  std::string output;     // -o OUT ("" or "-": stdout)
  uint64_t since = 0;     // --since SEQ: only steps after this one
  int min_steps = 5;      // --min-steps
};
void add_calibrate_command(CLI::App& app, CalibrateArgs& a);
int run_calibrate(CalibrateArgs& a);

struct SimulateArgs {
  std::string profile;
  loadgen::BenchConfig bench;      // workload and SLO flags as `pdserve bench` takes them
  std::vector<std::string> trace;  // --trace FORMAT FILE
  planner::SimConfig sim;
  kernels::KvDtype kv_dtype = kernels::KvDtype::F16;  // the instances' --kv-dtype (checked against the profile)
  std::string json_out;
  // --plan BUDGET: the planner (GLPK MIP) chooses the fleet (planner/sim_planner.h).
  int plan_budget = 0;          // 0: the fleet is given by --colocated / --prefill --decode
  double replan_interval = 0;   // > 0: re-plan every S virtual seconds (elastic fleet)
  double report_interval = 0;   // > 0: per-interval SLO attainment table (default: the re-plan interval)
  double headroom = 0.2;        // elastic: plan for the forecast x (1 + headroom)
  int scale_down_after = 3, window = 5, min_prefill = 0, min_decode = 1;
};
void add_simulate_command(CLI::App& app, SimulateArgs& a);
int run_simulate(SimulateArgs& a);

}  // namespace pdserve::cli
