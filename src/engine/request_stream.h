// The consumer side of a running request: a queue of output deltas that the engine
// thread pushes to and an API handler pops from.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "base/auto_reset_event.h"

namespace pdserve::engine {

enum class FinishReason { None, Stop, Length, Abort, Error };

/// "stop", "length", "abort", "error" (OpenAI finish_reason spelling), "" for None.
const char* finish_reason_name(FinishReason r);

/// Log-probability of one generated token plus the top alternatives, all from the raw
/// model distribution (log-softmax of the logits, before temperature/top-k/top-p).
struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.f;
  std::vector<std::pair<int32_t, float>> top;  // best first, up to SamplingParams::top_logprobs
};

/// One increment of output. `text` holds only complete UTF-8 and never any part of a
/// matched stop string. `tokens`/`logprobs` are the tokens generated since the previous
/// delta (usage counts every generated token, including those of a stop string).
struct StreamDelta {
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> logprobs;  // empty unless top_logprobs >= 0
  std::string text;
  FinishReason finish = FinishReason::None;  // set on the last delta only
  std::string error;                         // set when finish == Error
  int prompt_tokens = 0;
  int completion_tokens = 0;                 // cumulative
  int cached_tokens = 0;                     // prompt tokens served from the prefix cache
  double pushed_at = 0;                      // now_seconds() when the engine pushed it (set by push)
};

/// Thread-safe delta queue for one request. The engine pushes; one consumer pops.
class RequestStream {
 public:
  explicit RequestStream(std::string id) : id_(std::move(id)) {}
  const std::string& id() const { return id_; }

  /// Engine side: appends a delta and wakes the consumer (and raises its push event).
  void push(StreamDelta d);
  /// Consumer side: waits up to `timeout` for the next delta (returning as soon as one is
  /// pushed); false on timeout. A zero timeout only takes a delta already queued.
  bool next(StreamDelta& out, std::chrono::milliseconds timeout);
  /// Consumer side: asks the engine to stop this request (client gone, timeout). Raises
  /// the abort event, so the engine frees its KV blocks at once and pushes a final Abort
  /// delta.
  void abort();
  bool aborted() const { return aborted_.load(); }

  /// Engine side, before the stream is handed out: the event every abort() raises (the
  /// engine thread sleeps on it).
  void set_abort_event(std::shared_ptr<AutoResetEvent> e);
  /// Consumer side: an event every later push() raises, so that one thread can wait for
  /// the next delta of any of several streams (then take it with next(out, 0ms)).
  void set_push_event(std::shared_ptr<AutoResetEvent> e);

 private:
  std::string id_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<StreamDelta> queue_;
  std::shared_ptr<AutoResetEvent> push_event_, abort_event_;  // guarded by mu_
  std::atomic<bool> aborted_{false};
};

}  // namespace pdserve::engine
