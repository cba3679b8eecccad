// Integration-test helper: runs `pdserve serve` as a child process on a free loopback
// port and waits until GET /health answers 200. The destructor stops it (SIGTERM, then
// SIGKILL). If the test process dies first, the kernel kills the child (PR_SET_PDEATHSIG;
// note: tied to the *thread* that constructs the ServerProcess — construct it on a thread
// that outlives it, e.g. the test's main thread or SetUpTestSuite).
//
//   pdserve::testing::ServerProcess srv;               // stories260K, default flags
//   ASSERT_TRUE(srv.ready()) << srv.error();
//   auto cli = srv.client();
//   auto res = cli.Post("/v1/completions", R"({"prompt":"Hi"})", "application/json");
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <httplib.h>

#include "support/child_process.h"
#include "support/ports.h"
#include "support/wait.h"
#include "support/pdserve_bin.h"

namespace pdserve::testing {

inline constexpr const char* kStoriesModel = "../shared/models/stories260K.gguf";

/// Polls GET http://127.0.0.1:`port`/health until it answers 200 (true), `proc` exits or
/// `timeout` passes (false).
inline bool wait_http_healthy(ChildProcess& proc, int port, std::chrono::milliseconds timeout) {
  bool exited = false;
  const bool healthy = wait_until(
      [&] {
        if (!proc.running()) return exited = true;
        httplib::Client c("127.0.0.1", port);
        c.set_connection_timeout(1, 0);
        c.set_read_timeout(2, 0);
        auto res = c.Get("/health");
        return res && res->status == 200;
      },
      timeout, std::chrono::milliseconds(50));
  return healthy && !exited;
}

class ServerProcess {
 public:
  struct Options {
    std::string model = kStoriesModel;
    std::vector<std::string> extra_args;  // e.g. {"--api-key", "k"}; "--port" is added
    std::string binary = testing::pdserve_bin();
    std::chrono::milliseconds startup_timeout{30000};
  };

  explicit ServerProcess(std::vector<std::string> extra_args = {}) {
    Options o;
    o.extra_args = std::move(extra_args);
    start(std::move(o));
  }
  explicit ServerProcess(Options opts) { start(std::move(opts)); }
  ~ServerProcess() {
    stop();
    if (!log_path_.empty()) ::unlink(log_path_.c_str());
  }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  /// True once GET /health answered 200 (and the process is still running).
  bool ready() const { return ready_; }
  /// Why the server is not ready, with the tail of its output.
  const std::string& error() const { return error_; }
  int port() const { return port_; }
  pid_t pid() const { return proc_.pid(); }
  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  /// A client for this server with generous timeouts.
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_connection_timeout(5, 0);
    c.set_read_timeout(120, 0);
    c.set_write_timeout(30, 0);
    return c;
  }

  /// Everything the server wrote to stdout/stderr so far.
  std::string log() const {
    std::ifstream in(log_path_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  /// True while the child has not exited.
  bool running() { return proc_.running(); }

  /// SIGTERM, wait up to `grace`, then SIGKILL. Returns the exit code (128 + signal when
  /// killed by a signal), or -1 if there was no process.
  int stop(std::chrono::milliseconds grace = std::chrono::milliseconds(10000)) { return proc_.stop(grace); }
  /// Sends `sig` (the server keeps running until it acts on it).
  void signal(int sig) { proc_.signal(sig); }
  /// Waits up to `grace` for the server to exit by itself, then SIGKILLs it. Returns the
  /// exit code as stop() does.
  int wait_exit(std::chrono::milliseconds grace) { return proc_.wait_or_kill(grace); }

 private:
  void start(Options opts) {
    opts_ = std::move(opts);
    char tmpl[] = "/tmp/pdserve-test-XXXXXX";
    int log_fd = ::mkstemp(tmpl);
    if (log_fd < 0) {
      error_ = std::string("mkstemp: ") + std::strerror(errno);
      return;
    }
    ::close(log_fd);
    log_path_ = tmpl;
    // The port may be taken between free_port() and the child's bind: retry a few times.
    for (int attempt = 0; attempt < 3 && !ready_; ++attempt) {
      port_ = free_port();
      if (!spawn()) return;
      ready_ = wait_healthy();
      if (ready_) break;
      const bool port_clash = lost_port_race(log());
      stop();
      if (!port_clash) break;
    }
    if (!ready_) {
      const std::string out = log();
      error_ = "pdserve did not become healthy on port " + std::to_string(port_) + " within " +
               std::to_string(opts_.startup_timeout.count()) + " ms (exit code " +
               std::to_string(proc_.exit_code()) + "). Output:\n" +
               (out.size() > 4000 ? out.substr(out.size() - 4000) : out);
    }
  }

  bool spawn() {
    std::vector<std::string> args = {opts_.binary, "serve", "--model", opts_.model, "--port",
                                     std::to_string(port_)};
    args.insert(args.end(), opts_.extra_args.begin(), opts_.extra_args.end());
    if (proc_.spawn(std::move(args), log_path_)) return true;
    error_ = proc_.error();
    return false;
  }

  bool wait_healthy() { return wait_http_healthy(proc_, port_, opts_.startup_timeout); }

  Options opts_;
  std::string log_path_;
  std::string error_;
  int port_ = 0;
  ChildProcess proc_;
  bool ready_ = false;
};

}  // namespace pdserve::testing
