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

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>

namespace pdserve::testing {

inline constexpr const char* kStoriesModel = "../shared/models/stories260K.gguf";

/// A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0, read it, close).
inline int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    socklen_t len = sizeof(addr);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

/// Polls `pred` every 20 ms until it holds or `timeout` passes; returns pred().
template <typename Pred>
bool wait_for(Pred pred, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

class ServerProcess {
 public:
  struct Options {
    std::string model = kStoriesModel;
    std::vector<std::string> extra_args;  // e.g. {"--api-key", "k"}; "--port" is added
#ifdef PDSERVE_BIN
    std::string binary = PDSERVE_BIN;
#else
    std::string binary = "build/pdserve";
#endif
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
  pid_t pid() const { return pid_; }
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
  bool running() {
    reap(false);
    return pid_ > 0;
  }

  /// SIGTERM, wait up to `grace`, then SIGKILL. Returns the exit code (128 + signal when
  /// killed by a signal), or -1 if there was no process.
  int stop(std::chrono::milliseconds grace = std::chrono::milliseconds(10000)) {
    if (pid_ <= 0) return exit_code_;
    ::kill(pid_, SIGTERM);
    if (!wait_for([&] { return !running(); }, grace)) {
      ::kill(pid_, SIGKILL);
      reap(true);
    }
    return exit_code_;
  }

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
      const std::string out = log();
      const bool port_clash = out.find("Address already in use") != std::string::npos ||
                              out.find("could not listen") != std::string::npos;
      stop();
      if (!port_clash) break;
    }
    if (!ready_) {
      const std::string out = log();
      error_ = "pdserve did not become healthy on port " + std::to_string(port_) + " within " +
               std::to_string(opts_.startup_timeout.count()) + " ms (exit code " +
               std::to_string(exit_code_) + "). Output:\n" +
               (out.size() > 4000 ? out.substr(out.size() - 4000) : out);
    }
  }

  bool spawn() {
    std::vector<std::string> args = {opts_.binary, "serve", "--model", opts_.model, "--port",
                                     std::to_string(port_)};
    args.insert(args.end(), opts_.extra_args.begin(), opts_.extra_args.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t parent = ::getpid();
    exit_code_ = -1;
    pid_ = ::fork();
    if (pid_ < 0) {
      error_ = std::string("fork: ") + std::strerror(errno);
      pid_ = -1;
      return false;
    }
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(126);
      int fd = ::open(log_path_.c_str(), O_WRONLY | O_APPEND);
      if (fd >= 0) {
        ::dup2(fd, STDOUT_FILENO);
        ::dup2(fd, STDERR_FILENO);
        ::close(fd);
      }
      ::execv(argv[0], argv.data());
      std::fprintf(stderr, "execv %s: %s\n", argv[0], std::strerror(errno));
      ::_exit(127);
    }
    return true;
  }

  bool wait_healthy() {
    const auto deadline = std::chrono::steady_clock::now() + opts_.startup_timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (!running()) return false;
      httplib::Client c("127.0.0.1", port_);
      c.set_connection_timeout(1, 0);
      c.set_read_timeout(2, 0);
      auto res = c.Get("/health");
      if (res && res->status == 200) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  void reap(bool block) {
    if (pid_ <= 0) return;
    int status = 0;
    pid_t r = ::waitpid(pid_, &status, block ? 0 : WNOHANG);
    if (r == pid_) {
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status)
                   : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                                         : -1;
      pid_ = -1;
    } else if (r < 0 && errno == ECHILD) {
      pid_ = -1;
    }
  }

  Options opts_;
  std::string log_path_;
  std::string error_;
  int port_ = 0;
  pid_t pid_ = -1;
  int exit_code_ = -1;
  bool ready_ = false;
};

}  // namespace pdserve::testing
