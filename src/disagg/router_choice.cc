#include "disagg/router_choice.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "base/log.h"
#include "disagg/proto_convert.h"

namespace pdserve::disagg {

RoutedChoice::RoutedChoice(ChoiceHost& host, Request req, std::shared_ptr<engine::RequestStream> out,
                           ChoiceLimits limits, std::function<void(const ChoiceOutcome&)> on_done)
    : host_(host), req_(std::move(req)), out_(std::move(out)), limits_(limits), on_done_(std::move(on_done)),
      submitted_(std::chrono::steady_clock::now()),
      output_(host.tokenizer(), req_.params,
              req_.params.max_tokens > 0 ? req_.params.max_tokens : engine::OutputProcessor::kNoLimit) {
  outcome_.prompt_tokens = static_cast<int>(req_.prompt.size());
}

RoutedChoice::~RoutedChoice() {
  join();
  if (reader_) {
    cancel_call();
    close_call();
  }
}

void RoutedChoice::join() {
  std::thread t;
  {
    std::lock_guard<std::mutex> lk(thread_mu_);
    t = std::move(thread_);
  }
  if (t.joinable()) t.join();
}

bool RoutedChoice::stopping() const { return out_->aborted() || host_.shutting_down(); }

double RoutedChoice::since_submit() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - submitted_).count();
}

GenerateRequest RoutedChoice::make_request() const {
  GenerateRequest r;
  r.set_request_id(req_.id);
  r.mutable_prompt_tokens()->Reserve(static_cast<int>(req_.prompt.size() + delivered_.size()));
  r.mutable_prompt_tokens()->Add(req_.prompt.begin(), req_.prompt.end());
  r.mutable_prompt_tokens()->Add(delivered_.begin(), delivered_.end());
  to_proto(req_.params, r.mutable_params());
  if (!delivered_.empty()) {
    r.set_original_prompt_len(static_cast<int>(req_.prompt.size()));
    if (req_.params.max_tokens > 0)
      r.mutable_params()->set_max_tokens(req_.params.max_tokens - static_cast<int>(delivered_.size()));
    r.mutable_params()->set_min_tokens(std::max(0, req_.params.min_tokens - static_cast<int>(delivered_.size())));
  }
  r.set_priority(req_.priority);
  r.set_cache_salt(req_.cache_salt);
  r.set_slo_class(req_.slo_class + 1);
  r.set_ttft_target_s(req_.ttft_target_s);
  r.set_tpot_target_s(req_.tpot_target_s);
  // A resumed choice was scheduled before: no queue time limit on the new worker.
  if (delivered_.empty()) r.set_max_queue_s(req_.max_queue_s);
  return r;
}

bool refusal_may_pass_elsewhere(StatusCode code) {
  return code == StatusCode::RateLimited || code == StatusCode::Unavailable;
}

Status refusal_status(const GenerateResponse& msg) {
  std::optional<StatusCode> code = status_code_from_name(msg.reject_code());
  if (!code || *code == StatusCode::Ok) code = StatusCode::InvalidArgument;  // an older worker: a bad request
  return Status(*code, msg.error().empty() ? "the decode worker refused the request" : msg.error());
}

RoutedChoice::Opened RoutedChoice::start_call(WorkerClient* w, Status* error) {
  GenerateRequest request = make_request();
  request.set_vocab_fingerprint(w->expected().vocab_fingerprint);
  request.set_weights_fingerprint(w->expected().weights_fingerprint);
  auto ctx = std::make_unique<grpc::ClientContext>();
  auto reader = w->stub().Generate(ctx.get(), request);
  {
    std::lock_guard<std::mutex> lk(mu_);
    ctx_ = std::move(ctx);
    reader_ = std::move(reader);
    worker_ = w;
    call_opened_ = std::chrono::steady_clock::now();
    failures_at_open_ = w->consecutive_failures();
    accepted_ = false;
    cancel_sent_ = false;
  }
  GenerateResponse first;
  if (!reader_->Read(&first)) {
    const grpc::Status st = close_call();
    *error = Status::Unavailable(w->address() + ": " +
                                 (st.ok() ? std::string("the call ended without an answer") : st.error_message()));
    if (st.error_code() == grpc::StatusCode::FAILED_PRECONDITION) w->mark_other_model(st.error_message());
    else if (!stopping()) w->mark_failed(error->message());
    return Opened::Failed;
  }
  if (first.reject_status() != 0) {
    *error = refusal_status(first);
    cancel_call();
    close_call();
    return Opened::Rejected;
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    accepted_ = true;
  }
  if (outcome_.queue_s == 0) outcome_.queue_s = since_submit();
  if (first.tokens_size() > 0 || !first.finish_reason().empty())
    pending_first_ = std::make_unique<GenerateResponse>(std::move(first));
  return Opened::Accepted;
}

RoutedChoice::Opened RoutedChoice::open_somewhere(Status* error) {
  // Workers that refused the request for a reason of their own (refusal_may_pass_elsewhere)
  // in this round, and the last such refusal: the answer when no other worker takes it.
  std::vector<WorkerClient*> refused;
  Status refusal;
  while (true) {
    if (stopping()) {
      *error = Status::Cancelled("the request was aborted");
      return Opened::Failed;
    }
    if (attempts_ >= limits_.max_attempts) {
      if (!refusal.ok()) {
        *error = refusal;
        return Opened::Rejected;
      }
      *error = Status::Unavailable("no decode worker could serve the request (" + std::to_string(attempts_) +
                                   " attempts; last error: " + last_error_ + ")");
      return Opened::Failed;
    }
    const std::vector<WorkerClient*> cands = host_.candidates(req_.prompt, failed_, sampling_level(req_.params));
    if (cands.empty()) {
      *error = Status::Unavailable("no decode worker can take requests (every one has left or serves another model)");
      return Opened::Failed;
    }
    WorkerClient* w = nullptr;
    for (WorkerClient* c : cands)
      if (std::find(refused.begin(), refused.end(), c) == refused.end()) {
        w = c;
        break;
      }
    // Every healthy worker refused (the policy ranks healthy ones first): answer with the
    // refusal now rather than wait for workers that are down.
    if (!refusal.ok() && (!w || !w->healthy())) {
      *error = refusal;
      return Opened::Rejected;
    }
    if (attempts_ > 0 && !w->healthy()) {
      // Only failed workers are left: give them a moment to come back.
      const auto until = std::chrono::steady_clock::now() + std::min(std::chrono::milliseconds(250) * attempts_,
                                                                     std::chrono::milliseconds(2000));
      while (std::chrono::steady_clock::now() < until && !stopping())
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      if (stopping()) continue;
    }
    ++attempts_;
    resumed_attempt_ = !delivered_.empty();
    w->note_routed();
    Status err;
    const Opened r = start_call(w, &err);
    if (r == Opened::Accepted) return r;
    if (r == Opened::Rejected) {
      if (!refusal_may_pass_elsewhere(err.code())) {
        *error = err;
        return r;
      }
      PDS_LOG_DEBUG("request {}: decode worker {} refused it ({}: {}); trying another", req_.id, w->address(),
                    name(err.code()), err.message());
      refused.push_back(w);
      refusal = err;
      continue;
    }
    last_error_ = err.message();
    failed_.erase(std::remove(failed_.begin(), failed_.end(), w), failed_.end());
    failed_.push_back(w);
    if (!stopping()) PDS_LOG_WARN("request {}: {}; trying another decode worker", req_.id, last_error_);
  }
}

Status RoutedChoice::open() {
  Status err;
  const Opened r = open_somewhere(&err);
  if (r == Opened::Accepted) return Status::Ok();
  done_.store(true);
  // A refusal is a decode worker's verdict on the request (its code: a bad request, a
  // --max-cache-salts cap, ...); otherwise the choice was aborted, or no decode worker
  // could take it now.
  if (r == Opened::Rejected) return err;
  return stopping() ? Status::Cancelled(err.message()) : Status::Unavailable(err.message());
}

void RoutedChoice::start() {
  std::lock_guard<std::mutex> lk(thread_mu_);
  thread_ = std::thread([this] { run(); });
}

void RoutedChoice::abandon() {
  if (reader_) {
    cancel_call();
    close_call();
  }
  done_.store(true);
}

void RoutedChoice::cancel_call() {
  std::lock_guard<std::mutex> lk(mu_);
  if (ctx_ && !cancel_sent_) {
    cancel_sent_ = true;
    ctx_->TryCancel();
  }
}

grpc::Status RoutedChoice::close_call() {
  grpc::Status st = reader_ ? reader_->Finish() : grpc::Status::OK;
  std::lock_guard<std::mutex> lk(mu_);
  reader_.reset();
  ctx_.reset();
  worker_ = nullptr;
  return st;
}

void RoutedChoice::watch() {
  std::lock_guard<std::mutex> lk(mu_);
  if (!ctx_ || cancel_sent_) return;
  const char* why = nullptr;  // null: the client aborted or the router is stopping
  if (stopping()) {
  } else if (worker_ && worker_->consecutive_failures() >= failures_at_open_ + limits_.dead_after_failures) {
    why = "its decode worker stopped answering health checks";
  } else if (worker_ && worker_->removed() && worker_->consecutive_failures() > failures_at_open_) {
    why = "its decode worker left discovery and stopped answering";
  } else if (!accepted_ && std::chrono::steady_clock::now() - call_opened_ > limits_.accept_timeout) {
    why = "its decode worker did not answer Generate in time";
  } else {
    return;
  }
  if (why) PDS_LOG_WARN("request {}: cutting the call: {}", req_.id, why);
  cancel_sent_ = true;
  ctx_->TryCancel();
}

void RoutedChoice::finish(engine::StreamDelta d, engine::FinishReason reason) {
  d.finish = reason;
  d.prompt_tokens = static_cast<int>(req_.prompt.size());
  d.completion_tokens = static_cast<int>(delivered_.size());
  d.cached_tokens = cached_tokens_;
  outcome_.finish = reason;
  outcome_.completion_tokens = d.completion_tokens;
  outcome_.e2e_s = since_submit();
  out_->push(std::move(d));
}

bool RoutedChoice::handle(const GenerateResponse& msg) {
  using engine::FinishReason;
  engine::StreamDelta d;
  if (msg.reject_status() != 0) {
    d.error = msg.error().empty() ? "the decode worker refused the resumed request" : msg.error();
    finish(std::move(d), FinishReason::Error);
    return true;
  }
  if (!resumed_attempt_ && msg.cached_tokens() > 0) cached_tokens_ = msg.cached_tokens();
  const FinishReason wfinish = finish_reason_from_name(msg.finish_reason());
  const bool worker_done = wfinish == FinishReason::Stop || wfinish == FinishReason::Length;
  FinishReason reason = FinishReason::None;
  const int n = msg.tokens_size();
  // The engine's per-token pipeline on the router's copy of the output, so text and stop
  // strings are right across a resume.
  for (int i = 0; i < n && reason == FinishReason::None; ++i) {
    const int32_t t = msg.tokens(i);
    delivered_.push_back(t);
    if (outcome_.ttft_s < 0) outcome_.ttft_s = since_submit();
    reason = output_.add_token(
        t, i < msg.logprobs_size() ? std::optional<engine::TokenLogprob>(from_proto(msg.logprobs(i))) : std::nullopt, d);
  }
  if (reason == FinishReason::None) {
    if (worker_done) {
      reason = wfinish;  // e.g. the context end
      output_.flush(d);
    } else if (wfinish == FinishReason::Error) {
      d.error = msg.error().empty() ? "generation failed on the decode worker" : msg.error();
      finish(std::move(d), FinishReason::Error);
      return true;
    } else if (wfinish == FinishReason::Abort && stopping()) {
      finish(std::move(d), FinishReason::Abort);
      return true;
    }
    // An abort the router did not ask for (worker shutting down): the call ends and the
    // choice resumes elsewhere.
  }
  if (reason != FinishReason::None) {
    finish(std::move(d), reason);
    return true;
  }
  if (!d.tokens.empty() || !d.text.empty()) {
    d.prompt_tokens = static_cast<int>(req_.prompt.size());
    d.completion_tokens = static_cast<int>(delivered_.size());
    d.cached_tokens = cached_tokens_;
    out_->push(std::move(d));
  }
  return false;
}

void RoutedChoice::run() {
  bool finished = false;
  if (pending_first_) {
    auto first = std::move(pending_first_);
    finished = handle(*first);
  }
  while (!finished) {
    GenerateResponse msg;
    while (reader_->Read(&msg)) {
      if ((finished = handle(msg))) break;
    }
    if (finished) break;
    WorkerClient* w = worker_;
    const grpc::Status st = close_call();
    if (stopping()) {
      finish({}, engine::FinishReason::Abort);
      finished = true;
      break;
    }
    const std::string why =
        w->address() + ": " + (st.ok() ? std::string("the stream ended before the request finished") : st.error_message());
    if (!st.ok()) w->mark_failed(why);
    last_error_ = why;
    failed_.erase(std::remove(failed_.begin(), failed_.end(), w), failed_.end());
    failed_.push_back(w);
    if (!delivered_.empty()) ++outcome_.resumes;
    PDS_LOG_WARN("request {}: decode worker {} failed after {} tokens ({}); {} on another worker", req_.id,
                 w->address(), delivered_.size(), why, delivered_.empty() ? "retrying" : "resuming");
    Status err;
    const Opened r = open_somewhere(&err);
    if (r == Opened::Accepted) {
      if (pending_first_) {
        auto first = std::move(pending_first_);
        finished = handle(*first);
      }
      continue;
    }
    if (stopping()) {
      finish({}, engine::FinishReason::Abort);
    } else {
      engine::StreamDelta d;
      d.error = err.message();
      finish(std::move(d), engine::FinishReason::Error);
    }
    finished = true;
  }
  if (reader_) {
    // Finished by the router or by the worker's last message: end the call either way
    // (cancelling a call whose status is already in is harmless).
    cancel_call();
    close_call();
  }
  if (on_done_) on_done_(outcome_);
  done_.store(true);
}

}  // namespace pdserve::disagg
