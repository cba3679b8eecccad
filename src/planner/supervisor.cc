#include "planner/supervisor.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <thread>

#include "base/log.h"
#include "planner/plan_observer.h"

namespace pdserve::planner {

int pick_free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  int port = 0;
  socklen_t len = sizeof a;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

Supervisor::Supervisor(SupervisorConfig cfg) : cfg_(std::move(cfg)) {
  if (cfg_.binary.empty()) {
    std::error_code ec;
    cfg_.binary = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  }
  if (cfg_.log_dir.empty()) {
    char tmpl[] = "/tmp/pdserve-planner-XXXXXX";
    if (::mkdtemp(tmpl)) cfg_.log_dir = tmpl;
  }
}

Supervisor::~Supervisor() { stop_all(); }

bool Supervisor::start(InstanceState::Role role, int threshold, std::string* log) {
  Worker w;
  w.role = role;
  w.port = pick_free_port();
  w.metrics_port = pick_free_port();
  w.threshold = threshold;
  const bool prefill = role == InstanceState::Role::Prefill;
  std::vector<std::string> args = {cfg_.binary, prefill ? "prefill" : "decode", "--model", cfg_.model,
                                   "--host", "127.0.0.1", "--port", std::to_string(w.port),
                                   "--metrics-port", std::to_string(w.metrics_port), "--discovery", cfg_.discovery,
                                   "--drain-timeout", std::to_string(cfg_.drain_timeout_s)};
  if (!prefill) {
    args.push_back("--remote-prefill-threshold");
    args.push_back(std::to_string(threshold));
  }
  args.insert(args.end(), cfg_.worker_args.begin(), cfg_.worker_args.end());
  const std::string log_path = cfg_.log_dir + "/" + (prefill ? "prefill-" : "decode-") + std::to_string(w.port) + ".log";
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    *log = std::string("fork failed: ") + std::strerror(errno);
    return false;
  }
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // the planner died: drain and stop
    if (::getppid() != parent) ::_exit(126);
    sigset_t none;  // the planner blocks SIGINT/SIGTERM (it sigwaits); the worker must not inherit that
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    const int fd = ::open(log_path.c_str(), O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd >= 0) {
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
      ::close(fd);
    }
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  w.pid = pid;
  workers_.push_back(w);
  *log = std::string("started ") + (prefill ? "prefill" : "decode") + " worker " + w.id() + " (pid " + std::to_string(pid) +
         ", metrics :" + std::to_string(w.metrics_port) + (prefill ? "" : ", threshold " + std::to_string(threshold)) +
         ", log " + log_path + ")";
  return true;
}

void Supervisor::reap() {
  for (auto it = workers_.begin(); it != workers_.end();) {
    int status = 0;
    const pid_t r = ::waitpid(it->pid, &status, WNOHANG);
    if (r == it->pid || (r < 0 && errno == ECHILD)) {
      if (!it->draining) PDS_LOG_WARN("planner: worker {} (pid {}) exited unexpectedly (status {})", it->id(), it->pid, status);
      else PDS_LOG_INFO("planner: worker {} drained and exited", it->id());
      it = workers_.erase(it);
    } else {
      ++it;
    }
  }
}

const std::vector<Worker>& Supervisor::workers() {
  reap();
  return workers_;
}

namespace {
double cached_blocks(int metrics_port) {
  auto page = http_get("http://127.0.0.1:" + std::to_string(metrics_port) + "/metrics", 1.0);
  if (!page.ok()) return 0;
  return sum_metric(parse_prometheus(page.value()), "pdserve_kv_blocks_cached");
}
}  // namespace

std::vector<InstanceState> Supervisor::instances() {
  reap();
  std::vector<InstanceState> out;
  for (const auto& w : workers_)
    if (!w.draining) out.push_back({w.id(), w.role, cached_blocks(w.metrics_port)});
  return out;
}

int Supervisor::healthy(InstanceState::Role role) {
  reap();
  int n = 0;
  for (const auto& w : workers_) {
    if (w.draining || w.role != role) continue;
    auto r = http_get("http://127.0.0.1:" + std::to_string(w.metrics_port) + "/health", 1.0);
    if (r.ok()) ++n;
  }
  return n;
}

std::vector<std::string> Supervisor::apply(const PlanResult& plan) {
  reap();
  std::vector<std::string> log;
  const int threshold = std::isinf(plan.threshold) ? (1 << 30) : static_cast<int>(std::min<double>(plan.threshold, 1 << 30));
  for (auto role : {InstanceState::Role::Prefill, InstanceState::Role::Decode}) {
    const int target = role == InstanceState::Role::Prefill ? plan.prefill : plan.decode;
    std::vector<Worker*> live;
    for (auto& w : workers_)
      if (!w.draining && w.role == role) live.push_back(&w);
    if (static_cast<int>(live.size()) > target) {
      // Stop the ones the plan does not keep; among those, the least cache first.
      std::vector<std::pair<std::pair<int, double>, Worker*>> order;
      for (Worker* w : live) {
        const auto k = std::find(plan.keep.begin(), plan.keep.end(), w->id());
        const int rank = k == plan.keep.end() ? 0 : 1;
        order.push_back({{rank, cached_blocks(w->metrics_port)}, w});
      }
      std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      for (int i = 0; i < static_cast<int>(live.size()) - target; ++i) {
        Worker* w = order[i].second;
        ::kill(w->pid, SIGTERM);
        w->draining = true;
        log.push_back(std::string("draining ") + (role == InstanceState::Role::Prefill ? "prefill" : "decode") + " worker " +
                      w->id() + " (" + std::to_string(static_cast<int64_t>(order[i].first.second)) + " cached blocks)");
      }
    }
    for (int i = static_cast<int>(live.size()); i < target; ++i) {
      std::string line;
      start(role, threshold, &line);
      log.push_back(line);
    }
  }
  return log;
}

void Supervisor::stop_all() {
  for (auto& w : workers_)
    if (!w.draining) {
      ::kill(w.pid, SIGTERM);
      w.draining = true;
    }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(cfg_.drain_timeout_s + 5);
  while (!workers().empty() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  for (auto& w : workers_) ::kill(w.pid, SIGKILL);
  while (!workers().empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

}  // namespace pdserve::planner
