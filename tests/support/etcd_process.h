// Integration-test helper: a real etcd (Debian's etcd-server) as a child process, with its
// data in a fresh temp dir and its client (and peer) URL on free loopback ports — or on a
// given host (e.g. a network namespace's address, run through a command prefix such as
// {"ip", "netns", "exec", NS}). ready() once GET /health answers {"health":"true"}. The
// destructor kills it and removes the data dir. A missing etcd binary is an error (the
// caller's test fails; no skip).
//
//   pdserve::testing::EtcdProcess etcd;
//   ASSERT_TRUE(etcd.ready()) << etcd.error();
//   std::string url = etcd.discovery_url("/t1");   // etcd://127.0.0.1:PORT/t1
#pragma once

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <httplib.h>

#include "support/child_process.h"
#include "support/ports.h"
#include "support/wait.h"

namespace pdserve::testing {

class EtcdProcess {
 public:
  struct Options {
    std::string binary = "/usr/bin/etcd";
    std::string host = "127.0.0.1";        // listen address
    std::vector<std::string> prefix;        // command prefix (e.g. ip netns exec NS)
    int client_port = 0, peer_port = 0;     // 0: free loopback ports
    std::chrono::milliseconds startup_timeout{20000};
  };

  EtcdProcess() : EtcdProcess(Options{}) {}
  explicit EtcdProcess(Options o) : opts_(std::move(o)) { start(); }
  ~EtcdProcess() {
    proc_.kill_now();
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  EtcdProcess(const EtcdProcess&) = delete;
  EtcdProcess& operator=(const EtcdProcess&) = delete;

  bool ready() const { return ready_; }
  const std::string& error() const { return error_; }
  int port() const { return opts_.client_port; }
  const std::string& host() const { return opts_.host; }
  /// "etcd://HOST:PORT" + prefix.
  std::string discovery_url(const std::string& prefix = "") const {
    return "etcd://" + opts_.host + ":" + std::to_string(opts_.client_port) + prefix;
  }
  void kill() { proc_.kill_now(); }
  std::string log() const {
    std::ifstream in(dir_ + "/etcd.log");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

 private:
  void start() {
    if (::access(opts_.binary.c_str(), X_OK) != 0) {
      error_ = opts_.binary + " not found: install etcd-server (scripts/install-deps.sh)";
      return;
    }
    char tmpl[] = "/tmp/pdserve-etcd-XXXXXX";
    if (!::mkdtemp(tmpl)) {
      error_ = "mkdtemp failed";
      return;
    }
    dir_ = tmpl;
    for (int attempt = 0; attempt < 3 && !ready_; ++attempt) {
      if (opts_.client_port == 0 || attempt > 0) opts_.client_port = free_port();
      if (opts_.peer_port == 0 || attempt > 0) opts_.peer_port = free_port();
      const std::string client = "http://" + opts_.host + ":" + std::to_string(opts_.client_port);
      const std::string peer = "http://" + opts_.host + ":" + std::to_string(opts_.peer_port);
      std::vector<std::string> args = opts_.prefix;
      args.insert(args.end(), {opts_.binary, "--name", "t", "--data-dir", dir_ + "/data", "--listen-client-urls", client,
                               "--advertise-client-urls", client, "--listen-peer-urls", peer,
                               "--initial-advertise-peer-urls", peer, "--initial-cluster", "t=" + peer,
                               "--log-level", "warn"});
      if (!proc_.spawn(args, dir_ + "/etcd.log")) {
        error_ = proc_.error();
        return;
      }
      ready_ = wait_until(
          [&] {
            if (!proc_.running()) return true;
            httplib::Client c(opts_.host, opts_.client_port);
            c.set_connection_timeout(1, 0);
            auto res = c.Get("/health");
            return res && res->status == 200 && res->body.find("true") != std::string::npos;
          },
          opts_.startup_timeout, std::chrono::milliseconds(50)) &&
               proc_.running();
      if (!ready_) {
        proc_.kill_now();
        std::error_code ec;
        std::filesystem::remove_all(dir_ + "/data", ec);
      }
    }
    if (!ready_) error_ = "etcd did not become healthy. Output:\n" + log();
  }

  Options opts_;
  ChildProcess proc_;
  std::string dir_;
  bool ready_ = false;
  std::string error_;
};

}  // namespace pdserve::testing
