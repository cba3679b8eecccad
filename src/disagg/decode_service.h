// The decode worker's gRPC service (DecodeService in proto/pdserve.proto) over any
// engine::Engine: Generate streams one request's output deltas; Health and Load report
// the worker's state to the router.
#pragma once

#include <atomic>

#include <grpcpp/grpcpp.h>

#include "disagg/drain.h"
#include "disagg/proto_convert.h"
#include "disagg/proto/pdserve.grpc.pb.h"
#include "engine/engine.h"

namespace pdserve::disagg {

/// Stream of a Generate call:
///   refused by the engine  → one message {reject_status (the HTTP status of the code:
///                            400, 429, 503, ...), reject_code (the StatusCode's name),
///                            error, finish_reason "error"};
///   accepted               → first an empty "accepted" message (no tokens, no finish,
///                            prompt_tokens set), then one message per engine delta, the
///                            last with finish_reason set.
/// The status is OK in both cases. When the caller cancels (or a write fails) the engine
/// request is aborted before the call returns.
class DecodeServiceImpl final : public DecodeService::Service {
 public:
  /// `drain` (optional, outlives the service): while draining, Generate is refused with
  /// UNAVAILABLE and Health reports draining.
  explicit DecodeServiceImpl(engine::Engine& engine, DrainState* drain = nullptr) : engine_(engine), drain_(drain) {}

  grpc::Status Generate(grpc::ServerContext* ctx, const GenerateRequest* req,
                        grpc::ServerWriter<GenerateResponse>* writer) override;
  /// ok, role "decode", the engine's model name and context length.
  grpc::Status Health(grpc::ServerContext* ctx, const HealthRequest* req, HealthResponse* resp) override;
  /// The engine's request and KV block counters.
  grpc::Status Load(grpc::ServerContext* ctx, const LoadRequest* req, LoadResponse* resp) override;

  /// The sampling level Health reports (default kSamplingLevel): tests act as an older worker.
  void report_sampling_level(int level) { sampling_level_ = level; }

 private:
  engine::Engine& engine_;
  DrainState* drain_;
  std::atomic<int> sampling_level_{kSamplingLevel};
};

}  // namespace pdserve::disagg
