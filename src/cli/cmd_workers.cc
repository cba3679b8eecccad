// The prefill and decode worker processes: an Engine, a gRPC server for the role's
// service, and optionally an HTTP port for /metrics and /health.
#include <pthread.h>
#include <signal.h>

#include <grpcpp/grpcpp.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <thread>

#include "base/log.h"
#include "cli/commands.h"
#include "cli/worker_commands.h"
#include "disagg/decode_service.h"
#include "disagg/discovery.h"
#include "disagg/drain.h"
#include "disagg/grpc_options.h"
#include "disagg/kv_codec.h"
#include "disagg/prefill_client.h"
#include "disagg/prefill_service.h"
#include "disagg/worker_client.h"
#include "server/http_server.h"

namespace pdserve::cli {

namespace {

void add_common(CLI::App* cmd, WorkerArgs& a) {
  add_engine_options(*cmd, a.engine);
  cmd->add_option("--host", a.host, "bind address")->default_val("127.0.0.1");
  cmd->add_option("--port", a.port, "gRPC port")->required()->check(CLI::Range(1, 65535));
  cmd->add_option("--metrics-port", a.metrics_port, "HTTP port for /metrics and /health (0 = none)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--discovery", a.discovery,
                  "register in (and find peers through) etcd://HOST:PORT[/PREFIX], or find peers at dns://NAME:PORT");
  cmd->add_option("--discovery-ttl", a.discovery_ttl, "etcd lease TTL in seconds (a dead worker is dropped after it)")
      ->default_val(5)
      ->check(CLI::Range(2, 3600));
  cmd->add_option("--advertise-address", a.advertise, "HOST:PORT registered in etcd (default: --host and --port)");
  cmd->add_option("--drain-timeout", a.drain_timeout, "SIGTERM: seconds to finish calls in progress before exiting")
      ->default_val(30)
      ->check(kFinite & CLI::Range(0.0, 3600.0));
  add_grpc_tuning_options(*cmd, a.grpc);
}

/// The address other roles reach this worker at: --advertise-address, else host:port
/// (a wildcard host is replaced by this machine's first IPv4 address).
std::string advertised_address(const WorkerArgs& a, int bound) {
  if (!a.advertise.empty()) return a.advertise;
  std::string host = a.host;
  if (host == "0.0.0.0" || host == "::" || host.empty()) {
    char name[256] = {0};
    ::gethostname(name, sizeof name - 1);
    auto ips = disagg::resolve_all(name, bound);
    if (ips.ok() && !ips.value().empty()) return ips.value().front();
    host = name;
  }
  return host + ":" + std::to_string(bound);
}

/// The JSON a worker registers: role, address, model, KV layout and current load.
std::string registration_value(engine::Engine& eng, const char* role, const std::string& address) {
  const engine::KvLayout l = eng.kv_layout();
  const engine::EngineStats st = eng.stats();
  nlohmann::json j{{"role", role},
                   {"address", address},
                   {"model", eng.model_name()},
                   {"context_length", eng.context_length()},
                   {"kv",
                    {{"kv_dtype", l.kv_dtype},
                     {"block_size", l.block_size},
                     {"n_layers", l.n_layers},
                     {"n_kv_heads", l.n_kv_heads},
                     {"head_dim", l.head_dim}}},
                   {"load",
                    {{"requests_running", st.requests_running},
                     {"requests_waiting", st.requests_waiting},
                     {"kv_blocks_used", st.kv_blocks_used},
                     {"kv_blocks_total", st.kv_blocks_total}}}};
  return j.dump();
}

/// Runs `service` on host:port until SIGINT/SIGTERM, with the HTTP side port if asked.
/// With --discovery etcd the worker registers once listening. On SIGTERM it drains:
/// deregisters, reports draining (gRPC Health and HTTP /health), refuses new calls and
/// waits up to --drain-timeout for the calls in progress; then it stops (cutting what is
/// left, which the router resumes on another decode worker).
int serve_worker(WorkerArgs& a, engine::Engine& eng, grpc::Service& service, const char* role,
                 disagg::DrainState& drain, const disagg::DiscoveryUrl& disc) {
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
  std::atomic<int> http_rc{-1};  // run()'s result once it returned
  if (a.metrics_port > 0) {
    server::ServerConfig sc;
    sc.host = a.host;
    sc.port = a.metrics_port;
    sc.metrics_only = true;
    http = std::make_unique<server::HttpServer>(eng, sc);
    http_thread = std::thread([&] { http_rc = http->run(); });
    // A metrics port that cannot be bound ends the worker at start, as `serve` does (it kept
    // running without /health or /metrics).
    while (http->port() <= 0 && http_rc.load() < 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    if (http->port() <= 0) {
      http_thread.join();
      std::fprintf(stderr, "error: cannot listen on %s:%d (--metrics-port)\n", a.host.c_str(), a.metrics_port);
      grpc_server->Shutdown(std::chrono::system_clock::now());
      eng.shutdown();
      return 1;
    }
  }
  std::unique_ptr<disagg::Registration> reg;
  if (disc.kind == disagg::DiscoveryUrl::Kind::Etcd) {
    const std::string addr = advertised_address(a, bound);
    reg = std::make_unique<disagg::Registration>(disc, role, addr, a.discovery_ttl,
                                                 [&eng, role, addr] { return registration_value(eng, role, addr); });
  }

  int sig = 0;
  sigwait(&set, &sig);
  if (sig == SIGTERM) {
    PDS_LOG_INFO("{} worker: SIGTERM, draining ({} call(s) in progress, at most {} s)", role, drain.active(), a.drain_timeout);
    drain.start();
    if (http) http->set_draining();
    if (reg) reg->deregister();
    const bool idle = drain.wait_idle(std::chrono::milliseconds(static_cast<int64_t>(a.drain_timeout * 1000)));
    if (idle) PDS_LOG_INFO("{} worker: drained", role);
    else PDS_LOG_WARN("{} worker: drain timeout, cutting {} call(s)", role, drain.active());
  } else {
    PDS_LOG_INFO("{} worker: signal {}, shutting down", role, sig);
  }
  if (reg) reg->deregister();
  if (http) {
    http->stop();
    http_thread.join();
  }
  grpc_server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  eng.shutdown();
  return std::max(0, http_rc.load());
}

}  // namespace

void add_grpc_tuning_options(CLI::App& cmd, disagg::GrpcTuning& t) {
  cmd.add_option("--grpc-keepalive-ms", t.keepalive_time_ms, "ping a gRPC connection after this long without traffic (0: never)")
      ->default_val(t.keepalive_time_ms)
      ->check(CLI::Range(0, 3600000));
  cmd.add_option("--grpc-keepalive-timeout-ms", t.keepalive_timeout_ms, "drop a gRPC connection whose ping is not answered in this long")
      ->default_val(t.keepalive_timeout_ms)
      ->check(CLI::Range(100, 3600000));
  cmd.add_option("--grpc-stream-window", t.stream_window_bytes, "HTTP/2 stream flow-control window in bytes (KV transfer pacing)")
      ->default_val(t.stream_window_bytes)
      ->check(CLI::Range(65535, 1 << 30));
  cmd.add_option("--grpc-bdp-probe", t.bdp_probe, "let gRPC grow the window to the link's bandwidth-delay product (true/false)")
      ->default_val(t.bdp_probe);
}

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
  cmd->add_option("--kv-compression", a.kv_compression,
                  "KV transfer codec: none, zstd, zstd:LEVEL or auto (per link: none for a loopback prefill worker, else zstd)")
      ->default_val("none");
  cmd->add_option("--kv-transfer-timeout", a.kv_transfer_timeout, "seconds per KV transfer attempt")
      ->default_val(30)
      ->check(kFinite & CLI::Range(0.001, 3600.0));
}

int run_prefill(WorkerArgs& a) {
  auto disc = disagg::parse_discovery_url(a.discovery);
  if (!disc.ok()) {
    std::fprintf(stderr, "error: %s\n", disc.error().c_str());
    return 2;
  }
  disagg::set_grpc_tuning(a.grpc);
  a.engine.transfer_metrics = std::make_shared<engine::TransferMetrics>();
  auto eng = engine::Engine::create(a.engine);
  if (!eng.ok()) {
    std::fprintf(stderr, "error: %s\n", eng.error().c_str());
    return 1;
  }
  if (a.faults.any()) PDS_LOG_WARN("fault injection is on");
  disagg::DrainState drain;
  disagg::PrefillServiceImpl service(*eng.value(), a.faults, a.engine.transfer_metrics, &drain);
  return serve_worker(a, *eng.value(), service, "prefill", drain, disc.value());
}

int run_decode(WorkerArgs& a) {
  auto disc = disagg::parse_discovery_url(a.discovery);
  if (!disc.ok()) {
    std::fprintf(stderr, "error: %s\n", disc.error().c_str());
    return 2;
  }
  disagg::set_grpc_tuning(a.grpc);
  disagg::KvSourceConfig kc;
  for (const auto& item : a.prefill) {
    auto parsed = disagg::parse_address_list(item);
    if (!parsed.ok()) {
      std::fprintf(stderr, "error: --prefill: %s\n", parsed.error().c_str());
      return 2;
    }
    kc.prefill_addrs.insert(kc.prefill_addrs.end(), parsed.value().begin(), parsed.value().end());
  }
  kc.transfer_timeout_s = a.kv_transfer_timeout;
  Status s = a.kv_compression == "auto" ? Status::Ok() : disagg::parse_codec(a.kv_compression, kc.codec, kc.zstd_level);
  if (a.kv_compression == "auto") kc.codec = "auto";
  if (!s.ok()) {
    std::fprintf(stderr, "error: %s (or auto)\n", s.message().c_str());
    return 1;
  }
  a.engine.transfer_metrics = std::make_shared<engine::TransferMetrics>();
  std::shared_ptr<disagg::GrpcKvSource> source;
  const bool discover = disc.value().kind != disagg::DiscoveryUrl::Kind::None;
  if (!kc.prefill_addrs.empty() || discover) {
    source = std::make_shared<disagg::GrpcKvSource>(kc, a.engine.transfer_metrics);
    a.engine.kv_source = source;
  } else {
    PDS_LOG_WARN("decode worker without --prefill or --discovery: every prompt is prefilled here (no remote prefill)");
  }
  auto eng = engine::Engine::create(a.engine);
  if (!eng.ok()) {
    std::fprintf(stderr, "error: %s\n", eng.error().c_str());
    return 1;
  }
  // Prefill peers from discovery (etcd: the registered prefill workers; dns: the name's
  // addresses) join the static --prefill list.
  std::unique_ptr<disagg::PeerWatcher> peers;
  if (discover)
    peers = std::make_unique<disagg::PeerWatcher>(disc.value(), "prefill", [source](const std::vector<disagg::PeerInfo>& ps) {
      std::vector<std::string> addrs;
      for (const auto& p : ps) addrs.push_back(p.address);
      source->set_peers(addrs);
    });
  disagg::DrainState drain;
  disagg::DecodeServiceImpl service(*eng.value(), &drain);
  const int rc = serve_worker(a, *eng.value(), service, "decode", drain, disc.value());
  if (peers) peers->stop();
  eng.value().reset();  // the engine (and its transfers) go before the source
  return rc;
}

}  // namespace pdserve::cli
