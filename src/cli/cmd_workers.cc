// The prefill and decode worker processes: an Engine, a gRPC server for the role's
// service, and optionally an HTTP port for /metrics and /health.
#include <pthread.h>
#include <signal.h>

#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <thread>

#include "base/log.h"
#include "cli/commands.h"
#include "cli/worker_commands.h"
#include "disagg/decode_service.h"
#include "disagg/grpc_options.h"
#include "disagg/kv_codec.h"
#include "disagg/prefill_client.h"
#include "disagg/prefill_service.h"
#include "server/http_server.h"

namespace pdserve::cli {

namespace {

void add_common(CLI::App* cmd, WorkerArgs& a) {
  add_engine_options(*cmd, a.engine);
  cmd->add_option("--host", a.host, "bind address")->default_val("127.0.0.1");
  cmd->add_option("--port", a.port, "gRPC port")->required()->check(CLI::Range(1, 65535));
  cmd->add_option("--metrics-port", a.metrics_port, "HTTP port for /metrics and /health (0 = none)")
      ->check(CLI::Range(0, 65535));
}

/// Runs `service` on host:port until SIGINT/SIGTERM, with the HTTP side port if asked.
int serve_worker(WorkerArgs& a, engine::Engine& eng, grpc::Service& service, const char* role) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // every thread started from here on inherits it

  grpc::ServerBuilder b;
  disagg::configure_server(b);
  int bound = 0;
  b.AddListeningPort(a.host + ":" + std::to_string(a.port), grpc::InsecureServerCredentials(), &bound);
  b.RegisterService(&service);
  std::unique_ptr<grpc::Server> grpc_server = b.BuildAndStart();
  if (!grpc_server || bound == 0) {
    std::fprintf(stderr, "error: cannot listen on %s:%d (gRPC)\n", a.host.c_str(), a.port);
    return 1;
  }
  PDS_LOG_INFO("{} worker listening on {}:{} (gRPC), model '{}'", role, a.host, bound, eng.model_name());

  std::unique_ptr<server::HttpServer> http;
  std::thread http_thread;
  int http_rc = 0;
  if (a.metrics_port > 0) {
    server::ServerConfig sc;
    sc.host = a.host;
    sc.port = a.metrics_port;
    sc.metrics_only = true;
    http = std::make_unique<server::HttpServer>(eng, sc);
    http_thread = std::thread([&] { http_rc = http->run(); });
  }
  int sig = 0;
  sigwait(&set, &sig);
  PDS_LOG_INFO("{} worker: signal {}, shutting down", role, sig);
  if (http) {
    http->stop();
    http_thread.join();
  }
  grpc_server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  eng.shutdown();
  return http_rc;
}

}  // namespace

void add_prefill_command(CLI::App& app, WorkerArgs& a) {
  CLI::App* cmd = app.add_subcommand("prefill", "run a prefill worker (streams KV blocks to decode workers)");
  add_common(cmd, a);
  cmd->add_option("--fault-drop-after", a.faults.drop_after_blocks, "testing: end each stream after N blocks");
  cmd->add_option("--fault-corrupt-block", a.faults.corrupt_block, "testing: corrupt block message N of each stream");
  cmd->add_option("--fault-delay-ms", a.faults.delay_ms, "testing: delay each block message");
  cmd->add_option("--fault-exit-after-blocks", a.faults.exit_after_blocks, "testing: exit after sending N blocks");
}

void add_decode_command(CLI::App& app, WorkerArgs& a) {
  CLI::App* cmd = app.add_subcommand("decode", "run a decode worker (owns requests; prompts prefilled remotely)");
  add_common(cmd, a);
  cmd->add_option("--prefill", a.prefill, "prefill workers HOST:PORT (comma-separated)")->delimiter(',');
  cmd->add_option("--remote-prefill-threshold", a.engine.remote_prefill_threshold,
                  "prefill locally when at most this many prompt tokens are not cached")
      ->default_val(32)
      ->check(CLI::Range(0, 1 << 30));
  cmd->add_option("--kv-compression", a.kv_compression, "KV transfer codec: none, zstd or zstd:LEVEL")->default_val("none");
  cmd->add_option("--kv-transfer-timeout", a.kv_transfer_timeout, "seconds per KV transfer attempt")
      ->default_val(30)
      ->check(kFinite & CLI::Range(0.001, 3600.0));
}

int run_prefill(WorkerArgs& a) {
  a.engine.transfer_metrics = std::make_shared<engine::TransferMetrics>();
  auto eng = engine::Engine::create(a.engine);
  if (!eng.ok()) {
    std::fprintf(stderr, "error: %s\n", eng.error().c_str());
    return 1;
  }
  if (a.faults.any()) PDS_LOG_WARN("fault injection is on");
  disagg::PrefillServiceImpl service(*eng.value(), a.faults, a.engine.transfer_metrics);
  return serve_worker(a, *eng.value(), service, "prefill");
}

int run_decode(WorkerArgs& a) {
  disagg::KvSourceConfig kc;
  kc.prefill_addrs = a.prefill;
  kc.transfer_timeout_s = a.kv_transfer_timeout;
  Status s = disagg::parse_codec(a.kv_compression, kc.codec, kc.zstd_level);
  if (!s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.message().c_str());
    return 1;
  }
  a.engine.transfer_metrics = std::make_shared<engine::TransferMetrics>();
  std::shared_ptr<disagg::GrpcKvSource> source;
  if (!a.prefill.empty()) {
    source = std::make_shared<disagg::GrpcKvSource>(kc, a.engine.transfer_metrics);
    a.engine.kv_source = source;
  }
  auto eng = engine::Engine::create(a.engine);
  if (!eng.ok()) {
    std::fprintf(stderr, "error: %s\n", eng.error().c_str());
    return 1;
  }
  disagg::DecodeServiceImpl service(*eng.value());
  const int rc = serve_worker(a, *eng.value(), service, "decode");
  eng.value().reset();  // the engine (and its transfers) go before the source
  return rc;
}

}  // namespace pdserve::cli
