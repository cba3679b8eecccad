// `pdserve prefill` and `pdserve decode`: the worker roles of a disaggregated cluster.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "disagg/faults.h"
#include "disagg/grpc_options.h"
#include "engine/engine.h"

namespace pdserve::cli {

struct WorkerArgs {
  engine::EngineConfig engine;
  std::string host = "127.0.0.1";
  int port = 0;             // gRPC
  int metrics_port = 0;     // HTTP: /metrics, /health (and the OpenAI API) when set
  std::string discovery;    // --discovery etcd://HOST:PORT[/PREFIX] | dns://NAME:PORT
  int discovery_ttl = 5;    // --discovery-ttl: etcd lease seconds
  std::string advertise;    // --advertise-address HOST:PORT registered (default host:port)
  double drain_timeout = 30;  // --drain-timeout: SIGTERM ⇒ finish calls for at most this long
  disagg::GrpcTuning grpc;
  // prefill
  disagg::FaultConfig faults;
  // decode
  std::vector<std::string> prefill;
  std::string kv_compression = "none";
  double kv_transfer_timeout = 30;
};

void add_prefill_command(CLI::App& app, WorkerArgs& a);
void add_decode_command(CLI::App& app, WorkerArgs& a);
int run_prefill(WorkerArgs& a);
int run_decode(WorkerArgs& a);

}  // namespace pdserve::cli
