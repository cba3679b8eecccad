// Test helper: a child process (fork + execv) whose stdout and stderr go to a file (for
// server_process.h and cluster.h; ports.h picks their ports). The child gets SIGKILL if
// the thread that spawned it dies (PR_SET_PDEATHSIG): spawn on a thread that outlives
// the ChildProcess.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "support/ports.h"
#include "support/wait.h"

namespace pdserve::testing {

/// A child process whose stdout/stderr go to a file.
class ChildProcess {
 public:
  ChildProcess() = default;
  ~ChildProcess() { stop(std::chrono::milliseconds(5000)); }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  /// fork + execv(args[0], args); false (with error()) if fork failed.
  bool spawn(std::vector<std::string> args, const std::string& log_path) {
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
      int fd = ::open(log_path.c_str(), O_WRONLY | O_APPEND | O_CREAT, 0644);
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

  pid_t pid() const { return pid_; }
  /// 128 + signal when killed by one; -1 while running or never started.
  int exit_code() const { return exit_code_; }
  const std::string& error() const { return error_; }

  /// True while the child has not exited.
  bool running() {
    reap(false);
    return pid_ > 0;
  }
  void signal(int sig) {
    if (pid_ > 0) ::kill(pid_, sig);
  }
  /// SIGKILL and reap.
  void kill_now() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    reap(true);
  }
  /// SIGTERM, wait up to `grace`, then SIGKILL. Returns the exit code.
  int stop(std::chrono::milliseconds grace = std::chrono::milliseconds(10000)) {
    if (pid_ <= 0) return exit_code_;
    ::kill(pid_, SIGTERM);
    return wait_or_kill(grace);
  }
  /// Waits up to `grace` for the child to exit, then SIGKILLs it.
  int wait_or_kill(std::chrono::milliseconds grace) {
    if (!wait_until([&] { return !running(); }, grace, std::chrono::milliseconds(20))) kill_now();
    return exit_code_;
  }

 private:
  void reap(bool block) {
    if (pid_ <= 0) return;
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, block ? 0 : WNOHANG);
    if (r == pid_) {
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
      pid_ = -1;
    } else if (r < 0 && errno == ECHILD) {
      pid_ = -1;
    }
  }

  pid_t pid_ = -1;
  int exit_code_ = -1;
  std::string error_;
};

}  // namespace pdserve::testing
