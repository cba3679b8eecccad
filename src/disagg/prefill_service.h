// The prefill worker role: PrefillService over an Engine. Each Prefill call runs the
// prompt (reusing the worker's own prefix cache), streams every layer's newly finished
// KV blocks as CacheBlock messages as soon as that layer's forward pass is done, then the
// first sampled token (../shared/DESIGN.md §1).
#pragma once

#include <atomic>

#include <grpcpp/grpcpp.h>

#include <memory>

#include "disagg/drain.h"
#include "disagg/faults.h"
#include "disagg/proto_convert.h"
#include "disagg/proto/pdserve.grpc.pb.h"
#include "engine/engine.h"

namespace pdserve::disagg {

class PrefillServiceImpl final : public PrefillService::Service {
 public:
  /// `drain` (optional, outlives the service): while draining, Prefill is refused with
  /// UNAVAILABLE and Health reports draining.
  PrefillServiceImpl(engine::Engine& engine, FaultConfig faults, std::shared_ptr<engine::TransferMetrics> metrics,
                     DrainState* drain = nullptr);

  /// Errors: FAILED_PRECONDITION when the decode side's KV layout differs (named); the
  /// engine's refusal as to_grpc of its Status (INVALID_ARGUMENT for a bad prompt,
  /// RESOURCE_EXHAUSTED naming RateLimited when its --max-cache-salts salts are in use, ...;
  /// disagg/grpc_status.h); UNAVAILABLE when the engine aborts.
  grpc::Status Prefill(grpc::ServerContext* ctx, const PrefillRequest* req,
                       grpc::ServerWriter<PrefillResponse>* writer) override;
  grpc::Status Health(grpc::ServerContext* ctx, const HealthRequest* req, HealthResponse* res) override;
  grpc::Status Load(grpc::ServerContext* ctx, const LoadRequest* req, LoadResponse* res) override;

  /// The sampling level Health reports (default kSamplingLevel): tests act as an older worker.
  void report_sampling_level(int level) { sampling_level_ = level; }

 private:
  engine::Engine& engine_;
  std::atomic<int> sampling_level_{kSamplingLevel};
  FaultConfig faults_;
  std::shared_ptr<engine::TransferMetrics> metrics_;
  DrainState* drain_;
};

/// Why a layout differs ("block_size 16 vs 32"), or "" when `spec` matches `mine`.
std::string layout_mismatch(const KvSpec& spec, const engine::KvLayout& mine);

/// The KvSpec message for a layout.
KvSpec to_spec(const engine::KvLayout& l);

}  // namespace pdserve::disagg
