// `pdserve planner --supervise`: local `pdserve prefill` / `pdserve decode` worker
// processes sized to the plan. Workers get free loopback ports and `--discovery` (etcd),
// so they register themselves and the router (started with the same --discovery) and
// the decode workers find them without other wiring. Scaling down sends SIGTERM: the
// worker deregisters, refuses new calls (the router retries elsewhere), finishes the
// calls in progress within --drain-timeout and exits (disagg/drain.h), so no request is
// lost. Which instances stop: those the plan does not keep (planner/mip_goodput.h keeps
// the ones holding the most prefix cache).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "planner/plan_input.h"

namespace pdserve::planner {

struct SupervisorConfig {
  std::string binary;                    // the pdserve binary (default /proc/self/exe)
  std::string model;                     // --model of every worker
  std::string discovery;                 // etcd://HOST:PORT[/PREFIX] (required)
  std::vector<std::string> worker_args;  // extra flags of every worker (e.g. --threads 1)
  std::string log_dir;                   // worker logs: ROLE-PORT.log ("" ⇒ a temp dir)
  int drain_timeout_s = 30;
};

/// One worker process.
struct Worker {
  InstanceState::Role role = InstanceState::Role::Decode;
  int port = 0, metrics_port = 0;
  pid_t pid = -1;
  bool draining = false;  // SIGTERM sent
  int threshold = 0;      // decode: --remote-prefill-threshold
  std::string id() const { return "127.0.0.1:" + std::to_string(port); }
};

class Supervisor {
 public:
  explicit Supervisor(SupervisorConfig cfg);
  /// Stops every worker (drained) and waits for them.
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  /// Starts and stops workers so that `plan.prefill` / `plan.decode` run (not counting
  /// draining ones). Stops those not in plan.keep first, the least cache first.
  /// New decode workers get --remote-prefill-threshold from plan.threshold. Returns a
  /// line per action for the log.
  std::vector<std::string> apply(const PlanResult& plan);
  /// The running (not draining) workers with their prefix-cache blocks (read from each
  /// worker's /metrics; 0 when it does not answer yet).
  std::vector<InstanceState> instances();
  /// Reaps workers that exited; returns those still alive (draining included).
  const std::vector<Worker>& workers();
  /// Workers that answer /health 200 now, per role.
  int healthy(InstanceState::Role role);
  void stop_all();

 private:
  bool start(InstanceState::Role role, int threshold, std::string* log);
  void reap();

  SupervisorConfig cfg_;
  std::vector<Worker> workers_;
};

/// A loopback port that was free a moment ago (bind to port 0).
int pick_free_port();

}  // namespace pdserve::planner
