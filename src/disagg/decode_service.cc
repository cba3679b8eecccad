#include "disagg/decode_service.h"

#include <chrono>
#include <memory>
#include <utility>
#include <vector>

#include "base/log.h"
#include "disagg/proto_convert.h"
#include "disagg/worker_client.h"
#include "tokenizer/tokenizer.h"
#include "server/api_error.h"

namespace pdserve::disagg {
namespace {

// The synchronous gRPC API has no cancellation event: how often a waiting Generate call
// checks ServerContext::IsCancelled (a delta wakes it at once).
constexpr auto kCancelPoll = std::chrono::milliseconds(50);
// After aborting, how long to wait for the engine's final delta (its blocks are freed then).
constexpr auto kAbortDrain = std::chrono::seconds(5);

/// Aborts the request and waits (bounded) until the engine has ended it.
void abort_and_drain(engine::RequestStream& stream) {
  stream.abort();
  const auto deadline = std::chrono::steady_clock::now() + kAbortDrain;
  engine::StreamDelta d;
  for (auto now = std::chrono::steady_clock::now(); now < deadline; now = std::chrono::steady_clock::now()) {
    if (!stream.next(d, std::chrono::ceil<std::chrono::milliseconds>(deadline - now))) return;
    if (d.finish != engine::FinishReason::None) return;
  }
}

}  // namespace

grpc::Status DecodeServiceImpl::Generate(grpc::ServerContext* ctx, const GenerateRequest* req,
                                         grpc::ServerWriter<GenerateResponse>* writer) {
  DrainState::Call call(drain_);
  if (drain_ && drain_->draining()) return {grpc::StatusCode::UNAVAILABLE, "the decode worker is draining"};
  const ExpectedModel expected{req->vocab_fingerprint(), req->weights_fingerprint()};
  if (std::string why = expected.mismatch(engine_.tokenizer().fingerprint(), engine_.weights_fingerprint()); !why.empty())
    return {grpc::StatusCode::FAILED_PRECONDITION, why};
  std::vector<int32_t> prompt(req->prompt_tokens().begin(), req->prompt_tokens().end());
  const int prompt_len = static_cast<int>(prompt.size());
  engine::RequestOptions opts;
  opts.n = 1;
  opts.priority = req->priority();
  opts.cache_salt = req->cache_salt();
  opts.original_prompt_len = req->original_prompt_len();
  opts.slo_class = req->slo_class() - 1;
  opts.ttft_target_s = req->ttft_target_s();
  opts.tpot_target_s = req->tpot_target_s();
  opts.max_queue_s = req->max_queue_s();
  auto r = engine_.submit_group(std::move(prompt), from_proto(req->params()), opts);
  if (!r.ok()) {
    GenerateResponse resp;
    resp.set_reject_status(server::http_status(r.code()));
    resp.set_reject_code(name(r.code()));
    resp.set_error(r.error());
    resp.set_finish_reason("error");
    writer->Write(resp);
    return grpc::Status::OK;
  }
  std::shared_ptr<engine::RequestStream> stream = std::move(r.value()[0]);
  GenerateResponse accepted;
  accepted.set_prompt_tokens(prompt_len);
  if (!writer->Write(accepted)) {
    abort_and_drain(*stream);
    return grpc::Status(grpc::StatusCode::CANCELLED, "the caller went away");
  }
  while (true) {
    if (ctx->IsCancelled()) {
      PDS_LOG_DEBUG("generate {}: cancelled by the caller", req->request_id());
      abort_and_drain(*stream);
      return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the caller");
    }
    engine::StreamDelta d;
    if (!stream->next(d, kCancelPoll)) continue;
    const bool last = d.finish != engine::FinishReason::None;
    GenerateResponse resp;
    to_proto(d, &resp);
    if (!writer->Write(resp)) {
      if (!last) abort_and_drain(*stream);
      return grpc::Status(grpc::StatusCode::CANCELLED, "the caller went away");
    }
    if (last) return grpc::Status::OK;
  }
}

grpc::Status DecodeServiceImpl::Health(grpc::ServerContext*, const HealthRequest*, HealthResponse* resp) {
  fill_health(engine_, "decode", resp);
  resp->set_sampling_level(sampling_level_.load());
  resp->set_draining(drain_ && drain_->draining());
  return grpc::Status::OK;
}

grpc::Status DecodeServiceImpl::Load(grpc::ServerContext*, const LoadRequest*, LoadResponse* resp) {
  fill_load(engine_, resp);
  return grpc::Status::OK;
}

}  // namespace pdserve::disagg
