#include "disagg/prefill_service.h"

#include <unistd.h>

#include <algorithm>
#include <deque>
#include <limits>
#include <mutex>
#include <thread>

#include "base/auto_reset_event.h"
#include "base/clock.h"
#include "base/log.h"
#include "disagg/grpc_status.h"
#include "disagg/kv_codec.h"
#include "disagg/proto_convert.h"
#include "tokenizer/tokenizer.h"

namespace pdserve::disagg {

namespace {

// The synchronous gRPC API has no cancellation event: how often a waiting Prefill call
// checks ServerContext::IsCancelled (blocks and deltas wake it at once).
constexpr auto kCancelPoll = std::chrono::milliseconds(50);

/// Copies blocks handed over on the engine thread into a queue the RPC thread drains
/// (compression and network writes happen there, overlapping the next layers' compute).
/// Every queued job raises `ready`.
class QueueSink final : public engine::KvSink {
 public:
  struct Job {
    int layer = 0, first_block = 0, count = 0;
    std::string k, v;  // count × block_bytes each
  };
  QueueSink(int skip, std::shared_ptr<AutoResetEvent> ready) : skip_(skip), ready_(std::move(ready)) {}
  int skip_blocks() const override { return skip_; }
  void on_blocks(int layer, int first_block, const std::vector<const uint8_t*>& k, const std::vector<const uint8_t*>& v,
                 size_t block_bytes) override {
    Job j;
    j.layer = layer;
    j.first_block = first_block;
    j.count = static_cast<int>(k.size());
    for (const uint8_t* p : k) j.k.append(reinterpret_cast<const char*>(p), block_bytes);
    for (const uint8_t* p : v) j.v.append(reinterpret_cast<const char*>(p), block_bytes);
    {
      std::lock_guard<std::mutex> lk(mu_);
      jobs_.push_back(std::move(j));
    }
    ready_->set();
  }
  /// Takes the oldest queued job; false when none is queued.
  bool try_pop(Job& out) {
    std::lock_guard<std::mutex> lk(mu_);
    if (jobs_.empty()) return false;
    out = std::move(jobs_.front());
    jobs_.pop_front();
    return true;
  }

 private:
  int skip_;
  std::shared_ptr<AutoResetEvent> ready_;
  std::mutex mu_;
  std::deque<Job> jobs_;
};

}  // namespace

KvSpec to_spec(const engine::KvLayout& l) {
  KvSpec s;
  s.set_kv_dtype(l.kv_dtype);
  s.set_block_size(l.block_size);
  s.set_n_layers(l.n_layers);
  s.set_n_kv_heads(l.n_kv_heads);
  s.set_head_dim(l.head_dim);
  s.set_model_fingerprint(l.model_fingerprint);
  return s;
}

std::string layout_mismatch(const KvSpec& spec, const engine::KvLayout& mine) {
  auto diff = [](const char* what, const std::string& theirs, const std::string& ours) {
    return std::string(what) + " " + theirs + " (decode) vs " + ours + " (prefill)";
  };
  if (spec.model_fingerprint() != mine.model_fingerprint) return diff("model", spec.model_fingerprint(), mine.model_fingerprint);
  if (spec.kv_dtype() != mine.kv_dtype) return diff("KV dtype", spec.kv_dtype(), mine.kv_dtype);
  if (spec.block_size() != mine.block_size)
    return diff("block size", std::to_string(spec.block_size()), std::to_string(mine.block_size));
  if (spec.n_layers() != mine.n_layers || spec.n_kv_heads() != mine.n_kv_heads || spec.head_dim() != mine.head_dim)
    return "KV shape differs";
  return "";
}

PrefillServiceImpl::PrefillServiceImpl(engine::Engine& engine, FaultConfig faults,
                                       std::shared_ptr<engine::TransferMetrics> metrics, DrainState* drain)
    : engine_(engine), faults_(faults), metrics_(std::move(metrics)), drain_(drain) {}

grpc::Status PrefillServiceImpl::Prefill(grpc::ServerContext* ctx, const PrefillRequest* req,
                                         grpc::ServerWriter<PrefillResponse>* writer) {
  DrainState::Call call(drain_);
  if (drain_ && drain_->draining()) return {grpc::StatusCode::UNAVAILABLE, "the prefill worker is draining"};
  const engine::KvLayout layout = engine_.kv_layout();
  if (std::string why = layout_mismatch(req->spec(), layout); !why.empty())
    return {grpc::StatusCode::FAILED_PRECONDITION, "KV layout mismatch: " + why};
  std::string codec;
  int level = 1;
  if (!parse_codec(req->codec().empty() ? "none" : req->codec(), codec, level).ok())
    return {grpc::StatusCode::INVALID_ARGUMENT, "unknown codec '" + req->codec() + "'"};
  if (req->zstd_level() > 0) level = req->zstd_level();

  engine::SamplingParams params = from_proto(req->params());
  // min_tokens: the first token is the first generated, so what it bans is banned outright —
  // as -inf biases, since the engine's own ban follows ignore_eos, which is forced on below.
  if (params.min_tokens > 0) {
    std::vector<int32_t> banned = params.stop_token_ids;
    const std::vector<int32_t>& eog = engine_.tokenizer().vocab().eog_ids;
    if (!params.ignore_eos) banned.insert(banned.end(), eog.begin(), eog.end());
    for (int32_t id : banned) params.logit_bias.emplace_back(id, -std::numeric_limits<float>::infinity());
    params.min_tokens = 0;
  }
  params.max_tokens = 1;     // the decode side checks the first token against stops/EOS/max_tokens
  params.stop.clear();
  params.stop_token_ids.clear();
  params.ignore_eos = true;
  // Raised by every queued block and every delta: the call sleeps on it between them.
  auto ready = std::make_shared<AutoResetEvent>();
  auto sink = std::make_shared<QueueSink>(req->num_cached_blocks(), ready);
  engine::RequestOptions opts;
  opts.cache_salt = req->cache_salt();
  opts.kv_sink = sink;
  auto submitted = engine_.submit_group(std::vector<int32_t>(req->prompt_tokens().begin(), req->prompt_tokens().end()),
                                        params, opts);
  if (!submitted.ok()) return to_grpc(submitted.status());
  std::shared_ptr<engine::RequestStream> stream = submitted.value()[0];
  stream->set_push_event(ready);  // a delta pushed before this is already queued: the loop sees it

  const double t0 = now_seconds();
  int sent = 0;
  engine::StreamDelta final_delta;
  std::vector<engine::TokenLogprob> logprobs;
  std::vector<int32_t> tokens;
  bool finished = false;
  auto send_jobs = [&]() -> grpc::Status {
    QueueSink::Job job;
    while (sink->try_pop(job)) {
      // The injected delay models a slow link: a cancelled call stops waiting at once.
      for (int waited = 0; waited < faults_.delay_ms; waited += 10) {
        if (ctx->IsCancelled()) return {grpc::StatusCode::CANCELLED, "cancelled by the decode worker"};
        std::this_thread::sleep_for(std::chrono::milliseconds(std::min(10, faults_.delay_ms - waited)));
      }
      if (sent == faults_.drop_after_blocks) return {grpc::StatusCode::UNAVAILABLE, "fault injection: stream dropped"};
      std::vector<const uint8_t*> k, v;
      for (int i = 0; i < job.count; ++i) {
        k.push_back(reinterpret_cast<const uint8_t*>(job.k.data()) + i * layout.block_bytes);
        v.push_back(reinterpret_cast<const uint8_t*>(job.v.data()) + i * layout.block_bytes);
      }
      PrefillResponse res;
      *res.mutable_block() = encode_blocks(req->request_id(), job.layer, job.first_block, k, v, layout.block_bytes, codec, level);
      if (sent == faults_.corrupt_block) {
        std::string* payload = res.mutable_block()->mutable_k();
        if (!payload->empty()) (*payload)[payload->size() / 2] ^= 0x5a;
      }
      if (metrics_) metrics_->add_bytes(codec, static_cast<int64_t>(res.block().k().size() + res.block().v().size()));
      if (!writer->Write(res)) return {grpc::StatusCode::CANCELLED, "the decode worker went away"};
      ++sent;
      if (sent == faults_.exit_after_blocks) {
        PDS_LOG_WARN("fault injection: exiting after {} blocks", sent);
        std::fflush(nullptr);
        _exit(3);
      }
    }
    return grpc::Status::OK;
  };

  grpc::Status status;
  while (!finished) {
    if (ctx->IsCancelled()) {
      status = {grpc::StatusCode::CANCELLED, "cancelled by the decode worker"};
      break;
    }
    engine::StreamDelta d;
    while (!finished && stream->next(d, std::chrono::milliseconds(0))) {
      tokens.insert(tokens.end(), d.tokens.begin(), d.tokens.end());
      logprobs.insert(logprobs.end(), d.logprobs.begin(), d.logprobs.end());
      if (d.finish != engine::FinishReason::None) {
        finished = true;
        final_delta = d;
      }
    }
    // Every block was queued before the final delta was pushed: draining now sends all.
    status = send_jobs();
    if (!status.ok() || finished) break;
    ready->wait_until(std::chrono::steady_clock::now() + kCancelPoll);
  }
  if (!status.ok() || !finished) {
    stream->abort();
    engine::StreamDelta d;
    while (!finished && stream->next(d, std::chrono::milliseconds(100)))
      if (d.finish != engine::FinishReason::None) finished = true;
    if (metrics_) metrics_->add_failure(status.error_code() == grpc::StatusCode::CANCELLED ? "cancelled" : "send");
    return status.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "prefill aborted") : status;
  }
  if (final_delta.finish != engine::FinishReason::Length || tokens.empty())
    return {grpc::StatusCode::UNAVAILABLE, "prefill did not complete: " + final_delta.error};

  PrefillResponse res;
  FirstToken* first = res.mutable_first();
  engine::TokenLogprob tl;
  tl.token = tokens[0];
  if (!logprobs.empty()) tl = logprobs[0];
  to_proto(tl, first->mutable_token());
  first->set_cached_tokens(final_delta.cached_tokens);
  if (!writer->Write(res)) return {grpc::StatusCode::CANCELLED, "the decode worker went away"};
  if (metrics_) metrics_->add_transfer_seconds(now_seconds() - t0);
  return grpc::Status::OK;
}

grpc::Status PrefillServiceImpl::Health(grpc::ServerContext*, const HealthRequest*, HealthResponse* res) {
  fill_health(engine_, "prefill", res);
  res->set_sampling_level(sampling_level_.load());
  res->set_draining(drain_ && drain_->draining());
  return grpc::Status::OK;
}

grpc::Status PrefillServiceImpl::Load(grpc::ServerContext*, const LoadRequest*, LoadResponse* res) {
  fill_load(engine_, res);
  return grpc::Status::OK;
}

}  // namespace pdserve::disagg
