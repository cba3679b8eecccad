#include "engine/request_stream.h"

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
  {
    std::lock_guard<std::mutex> lk(mu_);
    queue_.push_back(std::move(d));
  }
  cv_.notify_one();
}

bool RequestStream::next(StreamDelta& out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  if (!cv_.wait_for(lk, timeout, [&] { return !queue_.empty(); })) return false;
  out = std::move(queue_.front());
  queue_.pop_front();
  return true;
}

}  // namespace pdserve::engine
