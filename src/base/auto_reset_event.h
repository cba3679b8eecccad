// AutoResetEvent: a level-triggered wake-up signal between threads.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace pdserve {

/// An auto-reset event: set() raises it and wakes a waiter; a wait returns as soon as it
/// is raised and lowers it again. A set() before the wait is never lost (the wait returns
/// at once); several set()s before one wait count as one. Thread-safe.
///
/// The usual pattern is "check the state, then wait": producers change the state and
/// then set(); the consumer checks the state and waits only when there is nothing to do.
/// A change that lands between the check and the wait leaves the event raised, so the
/// wait returns and the consumer checks again.
class AutoResetEvent {
 public:
  void set() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      raised_ = true;
    }
    cv_.notify_all();
  }

  /// Waits until the event is raised, then lowers it.
  void wait() {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return raised_; });
    raised_ = false;
  }

  /// Waits until the event is raised or `deadline` passes; true (and lowered) if raised.
  bool wait_until(std::chrono::steady_clock::time_point deadline) {
    std::unique_lock<std::mutex> lk(mu_);
    if (!cv_.wait_until(lk, deadline, [&] { return raised_; })) return false;
    raised_ = false;
    return true;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool raised_ = false;
};

}  // namespace pdserve
