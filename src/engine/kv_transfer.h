// The engine's side of prefill/decode disaggregation (../shared/DESIGN.md §1):
//   * a decode worker's engine asks a KvSource to fill a sequence's prompt KV blocks
//     (from a prefill worker) instead of computing them;
//   * a prefill worker's engine hands each layer's finished blocks to a request's KvSink
//     as soon as that layer's forward pass is done (layer-wise streaming).
// The transport (gRPC, compression, checksums) lives in disagg/; this header is
// transport-free.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/metrics.h"
#include "engine/request_stream.h"
#include "engine/sampling_params.h"

namespace pdserve::engine {

/// The decode side's KV layout; both sides must agree byte for byte.
struct KvLayout {
  std::string kv_dtype;       // kv::kv_dtype_name: "f32" | "f16" | "bf16" | "q8_0" | "q4_0"
  int block_size = 0;
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  size_t block_bytes = 0;     // bytes of K (= of V) of one block in one layer
  std::string model_fingerprint;
};

/// Raw access to the KV blocks of the engine's cache. Writing a block is safe from any
/// thread while the engine has handed that block to a transfer (nobody else touches it).
class KvBlockAccess {
 public:
  virtual ~KvBlockAccess() = default;
  virtual const KvLayout& layout() const = 0;
  /// Copies one block's K and V (layout().block_bytes each) into layer `layer`.
  virtual void write(int layer, int32_t block_id, const void* k, const void* v) = 0;
};

/// A decode-side request to fill blocks from a prefill worker.
struct RemotePrefillTask {
  int64_t seq_id = 0;
  std::vector<int32_t> prompt;
  SamplingParams params;
  std::string cache_salt;
  int num_cached_blocks = 0;      // leading blocks already filled (decode's prefix cache)
  std::vector<int32_t> block_ids; // the sequence's blocks covering the whole prompt
};

/// How a remote prefill ended. On success every block from num_cached_blocks on was
/// written and verified in every layer, and `first` is the first sampled token.
struct RemotePrefillResult {
  int64_t seq_id = 0;
  bool ok = false;
  std::string error;
  TokenLogprob first;
};

/// Where a decode worker gets prompt KV from (implemented over gRPC in disagg/).
class KvSource {
 public:
  virtual ~KvSource() = default;
  /// True when at least one prefill worker is healthy and applies every sampling field of
  /// `params` (it samples the first token).
  virtual bool available(const SamplingParams& params) = 0;
  /// Starts a transfer. Must call `done` exactly once, from any thread, also after
  /// cancel(); after calling it, it must not touch the blocks again.
  virtual void start(RemotePrefillTask task, KvBlockAccess& blocks,
                     std::function<void(RemotePrefillResult)> done) = 0;
  /// Asks a running transfer to stop soon (its `done` reports failure).
  virtual void cancel(int64_t seq_id) = 0;
};

/// Receives a prefill worker request's blocks, layer by layer, on the engine thread.
/// Implementations copy what they need before returning (the blocks may be reused after).
class KvSink {
 public:
  virtual ~KvSink() = default;
  /// Blocks the other side already has: never reported.
  virtual int skip_blocks() const = 0;
  /// Blocks [first_block, first_block + count) of the sequence are complete in `layer`;
  /// k[i] / v[i] point at block first_block + i (layout().block_bytes each).
  virtual void on_blocks(int layer, int first_block, const std::vector<const uint8_t*>& k,
                         const std::vector<const uint8_t*>& v, size_t block_bytes) = 0;
};

/// KV-transfer and disaggregation counters shared by the transport and the engine,
/// exported at /metrics.
class TransferMetrics {
 public:
  void add_bytes(const std::string& codec, int64_t bytes);
  void add_transfer_seconds(double s);
  void add_failure(const std::string& reason);
  void add_remote_prefill() { std::lock_guard<std::mutex> lk(mu_); remote_++; }
  void add_local_prefill() { std::lock_guard<std::mutex> lk(mu_); local_++; }
  void add_recompute_fallback() { std::lock_guard<std::mutex> lk(mu_); fallback_++; }
  void fill(MetricsSnapshot& out) const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, int64_t> bytes_, failures_;
  int64_t remote_ = 0, local_ = 0, fallback_ = 0;
  Histogram seconds_{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0}};
};

}  // namespace pdserve::engine
