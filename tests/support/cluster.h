// Integration-test helper: a disaggregated cluster on loopback, as child processes —
// N prefill workers, M decode workers (each told about every prefill worker) and one
// router in front of the decode workers — on free ports. The constructor waits until
// every worker's /health (on its --metrics-port) and the router's /health answer 200; the
// destructor stops everything (SIGTERM, then SIGKILL). Tests can SIGKILL any node.
// Like ServerProcess, children die with the thread that constructs the Cluster
// (PR_SET_PDEATHSIG): construct it on a thread that outlives it.
//
//   pdserve::testing::ClusterOptions o;
//   o.decode_workers = 2;
//   o.router_args = {"--policy", "round_robin"};
//   pdserve::testing::Cluster cluster(o);
//   ASSERT_TRUE(cluster.ready()) << cluster.error();
//   auto cli = cluster.router_client();
//   cluster.kill(pdserve::testing::Role::Decode, 0);   // SIGKILL decode worker 0
#pragma once

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <httplib.h>

#include "support/child_process.h"
#include "support/ports.h"
#include "support/prometheus.h"
#include "support/server_process.h"
#include "support/pdserve_bin.h"

namespace pdserve::testing {

enum class Role { Prefill, Decode, Router };

inline const char* role_name(Role r) {
  return r == Role::Prefill ? "prefill" : r == Role::Decode ? "decode" : "router";
}

struct ClusterOptions {
  std::string model = kStoriesModel;
  int prefill_workers = 1;
  int decode_workers = 1;
  std::vector<std::string> prefill_args;  // extra flags of every prefill worker
  std::vector<std::string> decode_args;   // extra flags of every decode worker
  std::vector<std::string> router_args;   // extra flags of the router (e.g. --policy)
  std::string binary = testing::pdserve_bin();
  std::chrono::milliseconds startup_timeout{60000};  // per node
};

class Cluster {
 public:
  struct Node {
    Role role = Role::Router;
    int index = 0;
    int port = 0;          // gRPC for workers, HTTP for the router
    int metrics_port = 0;  // workers: HTTP /health and /metrics
    std::string log_path;
    ChildProcess proc;

    /// "127.0.0.1:port" (the gRPC address of a worker).
    std::string address() const { return "127.0.0.1:" + std::to_string(port); }
    /// The HTTP port: the router's API port, a worker's metrics port.
    int http_port() const { return role == Role::Router ? port : metrics_port; }
    std::string log() const {
      std::ifstream in(log_path);
      std::stringstream ss;
      ss << in.rdbuf();
      return ss.str();
    }
  };

  explicit Cluster(ClusterOptions opts = {}) : opts_(std::move(opts)) { start(); }
  ~Cluster() {
    stop_all();
    for (auto& n : nodes_)
      if (!n->log_path.empty()) ::unlink(n->log_path.c_str());
  }
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  /// True once every node answered /health with 200.
  bool ready() const { return ready_; }
  /// Why the cluster is not ready, with the failing node's output.
  const std::string& error() const { return error_; }

  int count(Role r) const {
    int n = 0;
    for (const auto& node : nodes_) n += node->role == r;
    return n;
  }
  Node& node(Role r, int i = 0) {
    for (auto& n : nodes_)
      if (n->role == r && n->index == i) return *n;
    std::fprintf(stderr, "cluster: no %s node %d\n", role_name(r), i);
    std::abort();
  }
  Node& router() { return node(Role::Router, 0); }
  int router_port() { return router().port; }
  pid_t pid(Role r, int i = 0) { return node(r, i).proc.pid(); }

  /// A client for the router's OpenAI API with generous timeouts.
  httplib::Client router_client() { return http_client(router().port); }
  /// A client for a node's HTTP port (router API or worker metrics port).
  httplib::Client client(Role r, int i = 0) { return http_client(node(r, i).http_port()); }

  /// Sends `sig` to a node; SIGKILL also waits until it is gone.
  void kill(Role r, int i = 0, int sig = SIGKILL) {
    Node& n = node(r, i);
    if (sig == SIGKILL) n.proc.kill_now();
    else n.proc.signal(sig);
  }
  bool running(Role r, int i = 0) { return node(r, i).proc.running(); }
  /// Starts a stopped (e.g. killed) node again on its ports and waits until it is healthy.
  bool restart(Role r, int i = 0) {
    Node& n = node(r, i);
    n.proc.stop(std::chrono::milliseconds(2000));
    if (!n.proc.spawn(args_for(n), n.log_path)) {
      error_ = n.proc.error();
      return false;
    }
    return wait_healthy(n);
  }

  /// The samples of a worker's (or the router's) /metrics; nullopt when the node does not
  /// answer 200.
  std::optional<std::vector<MetricSample>> metrics(Role r, int i = 0) {
    auto c = http_client(node(r, i).http_port());
    c.set_read_timeout(2, 0);
    auto res = c.Get("/metrics");
    if (!res || res->status != 200) return std::nullopt;
    return parse_prometheus_text(res->body);
  }
  /// The first sample of gauge/counter `name` in a node's /metrics, or -1 when the node
  /// does not answer or has no such metric.
  double metric(Role r, int i, const std::string& name) {
    const auto m = metrics(r, i);
    return m ? first_sample(*m, name).value_or(-1) : -1;
  }

  /// The last `max_bytes` of every node's output, labelled (for failure messages).
  std::string logs(size_t max_bytes = 3000) const {
    std::string out;
    for (const auto& n : nodes_) {
      std::string l = n->log();
      if (l.size() > max_bytes) l = l.substr(l.size() - max_bytes);
      out += "---- " + std::string(role_name(n->role)) + " " + std::to_string(n->index) + " (port " +
             std::to_string(n->port) + ") ----\n" + l + "\n";
    }
    return out;
  }

  /// SIGTERM to every node (router first), then waits for each, SIGKILL after `grace`.
  void stop_all(std::chrono::milliseconds grace = std::chrono::milliseconds(10000)) {
    for (Role r : {Role::Router, Role::Decode, Role::Prefill})
      for (auto& n : nodes_)
        if (n->role == r) n->proc.signal(SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + grace;
    for (auto& n : nodes_) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      n->proc.wait_or_kill(std::max(left, std::chrono::milliseconds(0)));
    }
  }

 private:
  static httplib::Client http_client(int port) {
    httplib::Client c("127.0.0.1", port);
    c.set_connection_timeout(5, 0);
    c.set_read_timeout(120, 0);
    c.set_write_timeout(30, 0);
    return c;
  }

  void start() {
    for (int i = 0; i < opts_.prefill_workers; ++i)
      if (!start_node(Role::Prefill, i)) return;
    for (int i = 0; i < opts_.decode_workers; ++i)
      if (!start_node(Role::Decode, i)) return;
    ready_ = start_node(Role::Router, 0);
  }

  std::vector<std::string> args_for(const Node& n) const {
    std::vector<std::string> a = {opts_.binary, role_name(n.role), "--model", opts_.model, "--port", std::to_string(n.port)};
    if (n.role != Role::Router) a.insert(a.end(), {"--metrics-port", std::to_string(n.metrics_port)});
    auto join = [&](Role r) {
      std::string list;
      for (const auto& o : nodes_)
        if (o->role == r) list += (list.empty() ? "" : ",") + o->address();
      return list;
    };
    const std::vector<std::string>* extra = &opts_.router_args;
    if (n.role == Role::Prefill) extra = &opts_.prefill_args;
    if (n.role == Role::Decode) {
      extra = &opts_.decode_args;
      if (opts_.prefill_workers > 0) a.insert(a.end(), {"--prefill", join(Role::Prefill)});
    }
    if (n.role == Role::Router) {
      a.insert(a.end(), {"--decode", join(Role::Decode)});
      if (opts_.prefill_workers > 0) a.insert(a.end(), {"--prefill", join(Role::Prefill)});
    }
    a.insert(a.end(), extra->begin(), extra->end());
    return a;
  }

  bool start_node(Role role, int index) {
    auto n = std::make_unique<Node>();
    n->role = role;
    n->index = index;
    char tmpl[] = "/tmp/pdserve-cluster-XXXXXX";
    const int fd = ::mkstemp(tmpl);
    if (fd < 0) {
      error_ = std::string("mkstemp: ") + std::strerror(errno);
      return false;
    }
    ::close(fd);
    n->log_path = tmpl;
    Node& node = *n;
    nodes_.push_back(std::move(n));
    // A port may be taken between free_port() and the child's bind: retry a few times.
    for (int attempt = 0; attempt < 3; ++attempt) {
      node.port = free_port();
      node.metrics_port = role == Role::Router ? 0 : free_port();
      if (!node.proc.spawn(args_for(node), node.log_path)) {
        error_ = node.proc.error();
        return false;
      }
      if (wait_healthy(node)) return true;
      const bool port_clash = lost_port_race(node.log());
      node.proc.stop(std::chrono::milliseconds(2000));
      if (!port_clash) break;
    }
    std::string out = node.log();
    if (out.size() > 4000) out = out.substr(out.size() - 4000);
    error_ = std::string(role_name(role)) + " " + std::to_string(index) + " did not become healthy within " +
             std::to_string(opts_.startup_timeout.count()) + " ms (exit code " + std::to_string(node.proc.exit_code()) +
             "). Output:\n" + out;
    return false;
  }

  bool wait_healthy(Node& n) { return wait_http_healthy(n.proc, n.http_port(), opts_.startup_timeout); }

  ClusterOptions opts_;
  std::vector<std::unique_ptr<Node>> nodes_;
  bool ready_ = false;
  std::string error_;
};

}  // namespace pdserve::testing
