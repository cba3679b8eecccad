// One choice of a routed request: a Generate call on a decode worker whose responses are
// pumped into the client's RequestStream, with failover. A worker failing before the
// first token ⇒ the request is retried on another worker; a worker failing mid-stream ⇒
// the request is resumed on another worker from prompt + the tokens already delivered
// (original_prompt_len marks the prompt), so the client sees one unbroken stream.
//
// The router is the source of truth for the stream it delivers: it re-derives text from
// the tokens with the engine's own OutputProcessor (so nothing a failed worker held back
// is lost at a resume), counts completion tokens itself (from the original prompt) and
// enforces max_tokens over all attempts.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "disagg/proto/pdserve.grpc.pb.h"
#include "disagg/worker_client.h"
#include "engine/output_processor.h"
#include "engine/request_stream.h"
#include "engine/sampling_params.h"
#include "tokenizer/tokenizer.h"

namespace pdserve::disagg {

/// What a routed choice needs from the router.
class ChoiceHost {
 public:
  virtual ~ChoiceHost() = default;
  /// Every worker that applies SamplingParams fields up to `sampling_level`
  /// (proto_convert.h), best first for `prompt`; those in `failed` go last (least recent last).
  virtual std::vector<WorkerClient*> candidates(const std::vector<int32_t>& prompt,
                                                const std::vector<WorkerClient*>& failed, int sampling_level) = 0;
  virtual const tokenizer::Tokenizer& tokenizer() const = 0;
  virtual bool shutting_down() const = 0;
};

/// Whether a decode worker's refusal with `code` is about that worker, so that another may
/// accept the request: RateLimited (its --max-cache-salts salts are in use) and Unavailable
/// (it is shutting down). Other refusals are verdicts on the request itself.
bool refusal_may_pass_elsewhere(StatusCode code);
/// The Status of a refusal message (reject_status set): the code named by reject_code
/// (InvalidArgument when it names none: an older worker) and the worker's message.
Status refusal_status(const GenerateResponse& msg);

/// Timing and counts of a finished choice (for the router's metrics).
struct ChoiceOutcome {
  engine::FinishReason finish = engine::FinishReason::None;
  int prompt_tokens = 0, completion_tokens = 0;
  double queue_s = 0, ttft_s = -1, e2e_s = 0;  // from submit; ttft < 0: no token
  int resumes = 0;
};

struct ChoiceLimits {
  int max_attempts = 6;                                // Generate calls over the choice's life
  int dead_after_failures = 3;                         // failed health checks ⇒ cut the call
  std::chrono::milliseconds accept_timeout{30000};     // no answer to Generate ⇒ try another
};

class RoutedChoice {
 public:
  struct Request {
    std::string id;
    std::vector<int32_t> prompt;
    engine::SamplingParams params;  // this choice's seed already applied
    int priority = 0;
    std::string cache_salt;
    int slo_class = -1;  // engine::RequestOptions' class and targets, passed on to the decode worker
    double ttft_target_s = 0, tpot_target_s = 0, max_queue_s = 0;
  };

  RoutedChoice(ChoiceHost& host, Request req, std::shared_ptr<engine::RequestStream> out, ChoiceLimits limits,
               std::function<void(const ChoiceOutcome&)> on_done);
  ~RoutedChoice();
  RoutedChoice(const RoutedChoice&) = delete;
  RoutedChoice& operator=(const RoutedChoice&) = delete;

  /// Opens the call on the first worker (in policy order) that accepts it. A refusal that
  /// may pass elsewhere (refusal_may_pass_elsewhere) moves on to the next worker. Errors:
  /// a worker's refusal with its code and message (InvalidArgument for a bad request,
  /// RateLimited when every healthy worker is at its --max-cache-salts, ...), Cancelled
  /// when the choice was aborted meanwhile, Unavailable when no worker could be reached.
  Status open();
  /// Starts the pump thread (after open() succeeded); the stream gets its final delta.
  void start();
  /// Gives up an opened choice that will not be started (a sibling was refused).
  void abandon();
  /// Periodic check (router's watcher thread): cancels the current call when the client
  /// aborted, the router is stopping, the worker is declared dead or the accept is overdue.
  void watch();
  /// True once the pump has delivered the final delta (or the choice was abandoned).
  bool done() const { return done_.load(); }
  /// Waits for the pump thread to end.
  void join();

 private:
  enum class Opened { Accepted, Rejected, Failed };
  /// Rejected: `error` is the worker's refusal; Failed: why the call failed (Unavailable).
  Opened start_call(WorkerClient* w, Status* error);
  /// Tries workers until one accepts (bounded attempts); Rejected/Failed with `error`.
  Opened open_somewhere(Status* error);
  GenerateRequest make_request() const;
  void run();
  /// Applies one worker message; true when the choice is finished.
  bool handle(const GenerateResponse& msg);
  void finish(engine::StreamDelta d, engine::FinishReason reason);
  grpc::Status close_call();  // Finish() the reader and forget the context
  void cancel_call();
  bool stopping() const;
  double since_submit() const;

  ChoiceHost& host_;
  const Request req_;
  std::shared_ptr<engine::RequestStream> out_;
  const ChoiceLimits limits_;
  std::function<void(const ChoiceOutcome&)> on_done_;
  const std::chrono::steady_clock::time_point submitted_;

  // Output state (pump thread; open() before the thread starts).
  std::vector<int32_t> delivered_;
  engine::OutputProcessor output_;  // over all attempts
  int cached_tokens_ = 0;
  bool resumed_attempt_ = false;  // the current call continues delivered_ tokens
  int attempts_ = 0;
  std::vector<WorkerClient*> failed_;
  std::string last_error_;
  std::unique_ptr<GenerateResponse> pending_first_;  // a first message that was not an "accepted"
  ChoiceOutcome outcome_;

  // The current call. mu_ guards ctx_/worker_ against the watcher.
  std::mutex mu_;
  std::unique_ptr<grpc::ClientContext> ctx_;
  std::unique_ptr<grpc::ClientReader<GenerateResponse>> reader_;
  WorkerClient* worker_ = nullptr;
  std::chrono::steady_clock::time_point call_opened_;
  int failures_at_open_ = 0;  // the worker's failed health checks when the call opened
  bool accepted_ = false;
  bool cancel_sent_ = false;

  std::atomic<bool> done_{false};
  // The pump thread. thread_mu_ guards the handle: a pump that ends at once can make the
  // watcher join() while start() is still storing it.
  std::mutex thread_mu_;
  std::thread thread_;
};

}  // namespace pdserve::disagg
