// `pdserve planner`: sizes the prefill/decode pools from the router's observed load and
// a measured profile (planner/mip_goodput.h), every --interval, and acts on the plan:
// --dry-run logs it, --supervise runs local workers (planner/supervisor.h), --kubernetes
// prints (or with --apply runs) `kubectl scale` for deploy/k8s/overlays/disaggregated.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace pdserve::cli {

struct PlannerArgs {
  std::string router;       // http://HOST:PORT of the router
  std::string profile;      // pdserve-profile-v1 JSON
  std::string model;        // GGUF the workers serve (--supervise)
  double interval_s = 10;
  int budget = 4;
  int min_prefill = 0, min_decode = 1;
  double headroom = 0.2;
  int scale_down_after = 3;
  int window = 5;
  int metrics_port = 0;
  std::string metrics_host = "127.0.0.1";
  bool dry_run = false, supervise = false, kubernetes = false, apply = false;
  std::string namespace_;   // --namespace (kubernetes)
  std::string kubectl = "kubectl";
  std::string discovery;    // etcd://… (supervise: workers register there)
  std::string worker_args;  // extra flags of every supervised worker (space-separated)
  std::string log_dir;
  int drain_timeout = 30;
  double slo_ttft = 1.0, slo_tpot = 0.1;  // targets of requests without an SLO class
  int chunk_tokens = 2048, max_seqs = 64;
  int iterations = 0;       // 0: until SIGINT/SIGTERM
  std::string decision_log; // JSON lines file ("" ⇒ the log only)
};

void add_planner_command(CLI::App& app, PlannerArgs& a);
int run_planner(const PlannerArgs& a);

}  // namespace pdserve::cli
