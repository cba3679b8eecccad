// Integration-test helper: one pdserve role (prefill, decode, router) as a child process
// with free ports, found through --discovery (unlike cluster.h's static lists), bound to
// a given host and optionally run under a command prefix (e.g. {"ip", "netns", "exec",
// NS}). Its output goes to a temp file (log()). Construct on a thread that outlives it
// (PR_SET_PDEATHSIG, like ServerProcess).
//
//   PdNode d("decode", {"--discovery", url, "--discovery-ttl", "2"});
//   ASSERT_TRUE(d.start()) << d.error();     // waits for /health 200
//   d.kill(); d.term();                       // SIGKILL (reaped) / SIGTERM
#pragma once

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <httplib.h>

#include "support/child_process.h"
#include "support/ports.h"
#include "support/server_process.h"
#include "support/wait.h"
#include "support/pdserve_bin.h"

namespace pdserve::testing {

class PdNode {
 public:
  struct Options {
    std::string role;                      // prefill | decode | router
    std::vector<std::string> args;         // extra flags (e.g. --discovery URL)
    std::string host = "127.0.0.1";        // --host (and where /health is polled)
    std::vector<std::string> prefix;       // command prefix
    std::string model = kStoriesModel;
    std::string binary = testing::pdserve_bin();
    int port = 0, metrics_port = 0;        // 0: free ports
    std::chrono::milliseconds startup_timeout{60000};
  };

  explicit PdNode(Options o) : o_(std::move(o)) {
    char tmpl[] = "/tmp/pdserve-node-XXXXXX";
    const int fd = ::mkstemp(tmpl);
    if (fd >= 0) ::close(fd);
    log_path_ = tmpl;
  }
  PdNode(std::string role, std::vector<std::string> args) : PdNode(make_options(std::move(role), std::move(args))) {}
  ~PdNode() {
    proc_.kill_now();
    ::unlink(log_path_.c_str());
  }
  PdNode(const PdNode&) = delete;
  PdNode& operator=(const PdNode&) = delete;

  /// Spawns the process; with `wait`, until its /health answers 200 (false with error()).
  bool start(bool wait = true) {
    for (int attempt = 0; attempt < 3; ++attempt) {
      if (o_.port == 0 || attempt > 0) o_.port = free_port();
      if (o_.role != "router" && (o_.metrics_port == 0 || attempt > 0)) o_.metrics_port = free_port();
      std::vector<std::string> a = o_.prefix;
      a.insert(a.end(), {o_.binary, o_.role, "--model", o_.model, "--host", o_.host, "--port", std::to_string(o_.port)});
      if (o_.role != "router") a.insert(a.end(), {"--metrics-port", std::to_string(o_.metrics_port)});
      a.insert(a.end(), o_.args.begin(), o_.args.end());
      if (!proc_.spawn(a, log_path_)) {
        error_ = proc_.error();
        return false;
      }
      if (!wait) return true;
      if (wait_healthy(o_.startup_timeout)) return true;
      const bool clash = lost_port_race(log());
      proc_.stop(std::chrono::milliseconds(2000));
      if (!clash) break;
    }
    std::string out = log();
    if (out.size() > 4000) out = out.substr(out.size() - 4000);
    error_ = o_.role + " did not become healthy (exit " + std::to_string(proc_.exit_code()) + "):\n" + out;
    return false;
  }
  bool wait_healthy(std::chrono::milliseconds timeout) {
    return wait_until(
               [&] {
                 if (!proc_.running()) return true;
                 return health_status() == 200;
               },
               timeout, std::chrono::milliseconds(50)) &&
           proc_.running();
  }
  /// GET /health's status and body (-1 when it does not answer).
  int health_status(std::string* body = nullptr) {
    httplib::Client c(o_.host, http_port());
    c.set_connection_timeout(1, 0);
    c.set_read_timeout(2, 0);
    auto res = c.Get("/health");
    if (!res) return -1;
    if (body) *body = res->body;
    return res->status;
  }
  std::string metrics_text() {
    httplib::Client c(o_.host, http_port());
    c.set_connection_timeout(1, 0);
    c.set_read_timeout(3, 0);
    auto res = c.Get("/metrics");
    return res && res->status == 200 ? res->body : std::string();
  }

  void kill() { proc_.kill_now(); }
  void term() { proc_.signal(SIGTERM); }
  bool running() { return proc_.running(); }
  int exit_code() const { return proc_.exit_code(); }
  ChildProcess& proc() { return proc_; }
  /// The gRPC address other roles use ("HOST:PORT").
  std::string address() const { return o_.host + ":" + std::to_string(o_.port); }
  const std::string& host() const { return o_.host; }
  int port() const { return o_.port; }
  /// The router's API port or a worker's metrics port.
  int http_port() const { return o_.role == "router" ? o_.port : o_.metrics_port; }
  const std::string& error() const { return error_; }
  std::string log() const {
    std::ifstream in(log_path_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

 private:
  static Options make_options(std::string role, std::vector<std::string> args) {
    Options o;
    o.role = std::move(role);
    o.args = std::move(args);
    return o;
  }

  Options o_;
  ChildProcess proc_;
  std::string log_path_, error_;
};

}  // namespace pdserve::testing
