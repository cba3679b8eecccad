// Graceful drain of a worker (SIGTERM): the state its gRPC services share. Once draining,
// Health says so (the router and decode workers stop sending new work), new calls are
// refused with UNAVAILABLE (the caller retries elsewhere), and calls in progress are
// counted so the process can wait for them (up to --drain-timeout).
#pragma once

#include <atomic>
#include <chrono>
#include <thread>

namespace pdserve::disagg {

class DrainState {
 public:
  void start() { draining_.store(true); }
  bool draining() const { return draining_.load(); }
  /// Calls in progress (Generate or Prefill).
  int active() const { return active_.load(); }
  /// Waits until no call is in progress or `timeout` passed; true when none is left.
  bool wait_idle(std::chrono::milliseconds timeout) const {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (active_.load() > 0) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
  }

  /// Counts one call for its lifetime.
  class Call {
   public:
    explicit Call(DrainState* s) : s_(s) {
      if (s_) s_->active_.fetch_add(1);
    }
    ~Call() {
      if (s_) s_->active_.fetch_sub(1);
    }
    Call(const Call&) = delete;
    Call& operator=(const Call&) = delete;

   private:
    DrainState* s_;
  };

 private:
  std::atomic<bool> draining_{false};
  std::atomic<int> active_{0};
};

}  // namespace pdserve::disagg
