// Test helper: a throw-away redis-server (Debian's redis-server, installed by
// scripts/install-deps.sh) on a free loopback port, without persistence, in its own
// temp dir; killed by the destructor (and by the kernel if the test dies first). A
// missing binary is a failure (ready() false with the reason), never a skip.
//
//   pdserve::testing::RedisServer redis;
//   ASSERT_TRUE(redis.ready()) << redis.error();
//   redis.cli({"DBSIZE"});             // redis-cli's output
#pragma once

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "support/child_process.h"
#include "support/ports.h"
#include "support/raw_http.h"
#include "support/wait.h"

namespace pdserve::testing {

class RedisServer {
 public:
  RedisServer() {
    char tmpl[] = "/tmp/pdserve-redis-XXXXXX";
    if (!::mkdtemp(tmpl)) {
      error_ = "mkdtemp failed";
      return;
    }
    dir_ = tmpl;
    port_ = free_port();
    start();
  }
  ~RedisServer() {
    proc_.kill_now();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  bool ready() const { return ready_; }
  const std::string& error() const { return error_; }
  int port() const { return port_; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

  /// SIGKILL (an outage: nothing flushed, every key lost).
  void kill() {
    proc_.kill_now();
    ready_ = false;
  }
  /// (Re)starts the server on the same port, empty; true once it answers PING.
  bool start() {
    for (const char* bin : {"/usr/bin/redis-server", "/usr/local/bin/redis-server"})
      if (::access(bin, X_OK) == 0) binary_ = bin;
    if (binary_.empty()) {
      error_ = "redis-server not found (scripts/install-deps.sh installs it)";
      return false;
    }
    if (!proc_.spawn({binary_, "--port", std::to_string(port_), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                      "--dir", dir_, "--protected-mode", "no", "--enable-debug-command", "local"},
                     dir_ + "/redis.log")) {
      error_ = proc_.error();
      return false;
    }
    ready_ = wait_until([&] { return proc_.running() && cli({"PING"}).find("PONG") != std::string::npos; },
                        std::chrono::seconds(10), std::chrono::milliseconds(20));
    if (!ready_) error_ = "redis-server did not answer PING on port " + std::to_string(port_);
    return ready_;
  }

  /// Runs redis-cli against this server with `args` (each shell-quoted); its stdout.
  std::string cli(const std::vector<std::string>& args) const {
    std::string cmd = "redis-cli -p " + std::to_string(port_);
    for (const std::string& a : args) cmd += " '" + a + "'";
    cmd += " 2>/dev/null";
    std::string out;
    if (FILE* f = ::popen(cmd.c_str(), "r")) {
      std::array<char, 4096> buf;
      size_t n;
      while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) out.append(buf.data(), n);
      ::pclose(f);
    }
    return out;
  }

  /// True when the server does not answer a PING within `timeout` on a fresh connection
  /// (the kernel accepts it while Redis is busy): e.g. a `DEBUG SLEEP` has begun.
  bool unresponsive(int timeout_ms = 200) const {
    RawConnection c(port_);
    return c.ok() && c.send("PING\r\n") && c.read_until("\r\n", std::chrono::milliseconds(timeout_ms)).empty();
  }

 private:
  std::string dir_, binary_, error_;
  int port_ = 0;
  bool ready_ = false;
  ChildProcess proc_;
};

}  // namespace pdserve::testing
