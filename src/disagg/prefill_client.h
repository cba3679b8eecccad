// The decode worker's KV source: asks a prefill worker to run a prompt and writes the
// streamed CacheBlocks straight into the sequence's pre-allocated blocks. Failure rules
// (../shared/DESIGN.md §1): a checksum mismatch, a broken stream, a timeout or a dead
// worker ⇒ try another healthy prefill worker; when none is left, report failure so the
// engine recomputes locally — it never decodes over unfilled KV.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <condition_variable>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "disagg/proto/pdserve.grpc.pb.h"
#include "engine/kv_transfer.h"

namespace pdserve::disagg {

/// The failure label (pdserve_kv_transfer_failures_total{reason=...}) of a Prefill call
/// that ended with `code` (from_grpc of its status): "timeout" (DeadlineExceeded),
/// "handshake" (FailedPrecondition: the KV layouts differ), "rejected" (InvalidArgument,
/// ResourceExhausted: the prefill engine refused the request), "rate_limited"
/// (RateLimited: the prefill worker's --max-cache-salts salts are in use; another prefill
/// worker or the decode worker itself computes the prompt), "cancelled", else "stream".
const char* prefill_call_failure_reason(StatusCode code);

/// Whether a KV transfer that failed with `code` is worth trying on another prefill
/// worker: false when the cause holds for every worker of the cluster (FailedPrecondition,
/// a KV layout mismatch), true otherwise.
bool retry_on_other_prefill_worker(StatusCode code);

struct KvSourceConfig {
  std::vector<std::string> prefill_addrs;  // host:port
  std::string codec = "none";              // none | zstd | auto (per link: none for loopback, else zstd)
  int zstd_level = 1;
  double transfer_timeout_s = 30;          // per attempt (--kv-transfer-timeout)
};

class GrpcKvSource final : public engine::KvSource {
 public:
  GrpcKvSource(KvSourceConfig cfg, std::shared_ptr<engine::TransferMetrics> metrics);
  ~GrpcKvSource() override;

  bool available(const engine::SamplingParams& params) override;
  /// The prefill workers found by discovery now (added to the static list; those no
  /// longer listed get no new transfers). Thread-safe.
  void set_peers(const std::vector<std::string>& addrs);
  void start(engine::RemotePrefillTask task, engine::KvBlockAccess& blocks,
             std::function<void(engine::RemotePrefillResult)> done) override;
  void cancel(int64_t seq_id) override;
  /// Transfers whose cancellation flag is kept: started and not yet reported. 0 when no
  /// transfer runs (a cancel() after the report keeps nothing); for leak checks.
  size_t transfers_tracked() const;

 private:
  struct Worker {
    std::string addr;
    std::unique_ptr<PrefillService::Stub> stub;
    std::atomic<bool> healthy{false};
    std::atomic<int> sampling_level{0};  // its Health's (proto_convert.h kSamplingLevel)
    bool discovered = false;
    std::atomic<bool> removed{false};
    std::string codec;  // the link's codec (auto resolved)
  };
  std::vector<Worker*> live_workers();
  void add_worker(const std::string& addr, bool discovered);
  struct Attempt;  // outcome of one Prefill call
  void health_loop();
  void check_health(Worker& w);
  void run(engine::RemotePrefillTask task, engine::KvBlockAccess* blocks,
           std::function<void(engine::RemotePrefillResult)> done);
  Attempt attempt(Worker& w, const engine::RemotePrefillTask& task, engine::KvBlockAccess& blocks);
  /// cancel() was called for the running transfer `seq_id` (caller holds mu_).
  bool is_cancelled(int64_t seq_id) const;

  KvSourceConfig cfg_;
  std::shared_ptr<engine::TransferMetrics> metrics_;
  std::mutex workers_mu_;
  std::vector<std::unique_ptr<Worker>> workers_;  // grows only (guarded by workers_mu_)
  std::atomic<size_t> rr_{0};

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::map<int64_t, grpc::ClientContext*> live_;  // seq id → its current call
  std::map<int64_t, bool> cancelled_;  // seq id → cancel() called; from start() until run() reports
  struct Transfer {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> finished;
  };
  std::list<Transfer> threads_;  // finished ones are joined at the next start()
  std::thread health_;
};

}  // namespace pdserve::disagg
