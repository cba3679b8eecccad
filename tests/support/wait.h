// Test helper: waiting on a polled condition with a deadline — for state that offers no
// event to wait on (another process's /health or /metrics, engine stats published after
// a step). Prefer waiting on an event (a stream's next delta, a future) where one exists.
#pragma once

#include <chrono>
#include <thread>

namespace pdserve::testing {

/// Calls `pred` every `poll` until it returns true (→ true) or `timeout` has passed
/// (→ false, after one last call).
template <typename Pred>
bool wait_until(Pred pred, std::chrono::milliseconds timeout = std::chrono::seconds(10),
                std::chrono::milliseconds poll = std::chrono::milliseconds(5)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline) return pred();
    std::this_thread::sleep_for(poll);
  }
  return true;
}

}  // namespace pdserve::testing
