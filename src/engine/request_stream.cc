#include "engine/request_stream.h"

#include "base/clock.h"

namespace pdserve::engine {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Abort: return "abort";
    case FinishReason::Error: return "error";
    case FinishReason::None: break;
  }
  return "";
}

void RequestStream::push(StreamDelta d) {
  d.pushed_at = now_seconds();
  std::shared_ptr<AutoResetEvent> event;
  {
    std::lock_guard<std::mutex> lk(mu_);
    queue_.push_back(std::move(d));
    event = push_event_;
  }
  cv_.notify_one();
  if (event) event->set();
}

bool RequestStream::next(StreamDelta& out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  if (!cv_.wait_for(lk, timeout, [&] { return !queue_.empty(); })) return false;
  out = std::move(queue_.front());
  queue_.pop_front();
  return true;
}

void RequestStream::abort() {
  aborted_.store(true);
  std::shared_ptr<AutoResetEvent> event;
  {
    std::lock_guard<std::mutex> lk(mu_);
    event = abort_event_;
  }
  if (event) event->set();
}

void RequestStream::set_abort_event(std::shared_ptr<AutoResetEvent> e) {
  std::lock_guard<std::mutex> lk(mu_);
  abort_event_ = std::move(e);
}

void RequestStream::set_push_event(std::shared_ptr<AutoResetEvent> e) {
  std::lock_guard<std::mutex> lk(mu_);
  push_event_ = std::move(e);
}

}  // namespace pdserve::engine
