// Engine: owns the model, tokenizer and KV cache and runs the continuous-batching step
// loop on its own thread (schedule ▸ build batch ▸ forward ▸ sample ▸ stream out).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/kv_transfer.h"
#include "engine/metrics.h"
#include "engine/step_timings.h"
#include "engine/request_stream.h"
#include "engine/sampling_params.h"
#include "engine/spec_config.h"
#include "kernels/attention.h"  // KvDtype
#include "kv/eviction_policy.h"
#include "kv/kv_tier_options.h"
#include "kv/token_eviction.h"

namespace pdserve::tokenizer {
class Tokenizer;
}
// Declared (opaque, int-based) here so that the engine's users need not include the
// scheduler; defined in engine/scheduler.h.
namespace pdserve::engine {
enum class SchedulingPolicy;
}

namespace pdserve::engine {

/// Engine settings (CLI flags of `pdserve serve`).
struct EngineConfig {
  std::string model_path;
  std::string model_name;          // id reported by /v1/models; default: file stem
  int threads = 0;                 // 0 ⇒ all cores
  bool mmap = false;               // --mmap: weights stay memory-mapped, not copied to huge pages (gguf::FileMemory)
  int block_size = 16;             // tokens per KV block
  int64_t num_kv_blocks = 0;       // 0 ⇒ derived from kv_cache_mb
  int64_t kv_cache_mb = 0;         // 0 ⇒ enough for max_seqs full contexts, capped at 512 MiB
  kernels::KvDtype kv_dtype = kernels::KvDtype::F16;  // --kv-dtype f16 | f32
  int max_batched_tokens = 2048;   // token budget per step
  int max_seqs = 64;               // running sequences per step
  int ctx_size = 0;                // 0 ⇒ the model's context_length
  bool prefix_cache = true;        // radix prefix cache (--no-prefix-cache turns it off)
  kv::EvictionPolicy eviction = kv::EvictionPolicy::kLru;  // --eviction
  // --max-cache-salts: distinct non-empty cache_salt values of unfinished requests that use
  // the prefix cache (a new one beyond is refused with RateLimited; one with a kv_budget uses
  // none and is not counted), and salted prefix-cache namespaces kept (a new
  // one beyond evicts idle ones, least recently used first). 0 = no cap; engine/cache_salt_gate.h.
  int64_t max_cache_salts = 4096;
  int long_prefill_threshold = 0;  // max prompt tokens of one request per step (0 = budget)
  SchedulingPolicy scheduling_policy{};  // --scheduling-policy; value-initialised: kFcfs (checked in engine.cc)
  double request_timeout_s = 0;    // abort requests running longer (0 = never)
  // Per-sequence token eviction (kv/token_eviction.h): --kv-budget tokens kept per sequence
  // (0 = keep all), --kv-evict, --kv-sinks, --kv-recent.
  int kv_budget = 0;
  kv::TokenEvictionConfig kv_evict;
  // Decode worker: where prompt KV can come from, and the uncached prompt length (tokens)
  // at or below which the prompt is prefilled locally anyway (conditional disaggregation).
  std::shared_ptr<KvSource> kv_source;
  int remote_prefill_threshold = 0;
  // Disaggregation counters, shared with the transport; exported at /metrics when set.
  std::shared_ptr<TransferMetrics> transfer_metrics;
  // Speculative decoding (--speculative, --spec-k, ...; engine/spec_proposer.h).
  SpecConfig spec;
  // KV store tiers below the pool (kv/kv_tiers.h): --kv-offload-dir, --kv-offload-gb,
  // --kv-store, --kv-store-timeout-ms, --kv-restore, --kv-snapshot-interval.
  kv::KvTierOptions kv_tiers;
  // Testing (--fault-step-delay-ms): the engine thread sleeps this long after each step that
  // computed, so that a test of failover, draining or aborts mid-stream finds its stream still
  // running however late its own thread is. The sleep is not cut short: an abort or a
  // shutdown waits for it (the flag allows at most 1,000 ms). 0 = off.
  int fault_step_delay_ms = 0;
};

/// Per-request options beyond sampling.
struct RequestOptions {
  int n = 1;               // choices; they share the prompt's KV blocks
  int priority = 0;        // lower is served first under --scheduling-policy priority
  std::string cache_salt;  // separates prefix-cache namespaces (e.g. per tenant)
  /// Decode SLO class (gateway/slo_class.h: 0 high, 1 medium, 2 low; -1 none) and its
  /// targets in seconds (0 = none). A classed request is scheduled by class, then by
  /// deadline (arrival + ttft target); see Scheduler. `max_queue_s` > 0: a request not
  /// scheduled within it ends with an Error whose message starts with "server_overloaded".
  int slo_class = -1;
  double ttft_target_s = 0, tpot_target_s = 0, max_queue_s = 0;
  /// A resumed stream: prompt = original prompt + tokens already generated elsewhere;
  /// tokens at positions >= original_prompt_len are computed as generated tokens, so the
  /// continuation is bit-identical to the interrupted one, and a seeded sampled stream
  /// skips the random draws those tokens used. 0 = the whole prompt.
  int original_prompt_len = 0;
  /// Tokens of KV this request's sequences keep (--kv-budget for one request; 0 = the
  /// server's). At least the server's minimum (sinks + recent), at most its budget when it
  /// has one.
  int kv_budget = 0;
  /// Prefill worker: receives the request's KV blocks layer by layer as they are computed.
  std::shared_ptr<KvSink> kv_sink;
};

/// Point-in-time counters, safe to read from any thread.
struct EngineStats {
  int64_t kv_blocks_total = 0;
  int64_t kv_blocks_used = 0;   // ref count > 0
  int64_t kv_blocks_cached = 0; // held only by the prefix cache (reusable, evictable)
  int64_t kv_blocks_free = 0;
  int64_t kv_block_bytes = 0;   // K+V of one block, all layers, in the KV dtype (0: not known, e.g. the router)
  std::string kv_dtype;         // kv::kv_dtype_name of the cache ("" when not known)
  int64_t requests_running = 0;
  int64_t requests_waiting = 0;
  /// Admitted, holding blocks, waiting for their prompt KV from a prefill worker
  /// (decode worker); counted in neither running nor waiting.
  int64_t requests_awaiting_kv = 0;
  int64_t prefix_cache_namespaces = 0;  // radix-cache namespaces (cache_salt values) holding blocks or locks
  int64_t cache_salts_in_use = 0;       // distinct non-empty salts of unfinished requests (the --max-cache-salts gate)
  int64_t prompt_tokens_total = 0;
  int64_t generation_tokens_total = 0;
};

class Engine {
 public:
  /// Loads the model and starts the step loop. Errors name the file and the problem.
  static Result<std::unique_ptr<Engine>> create(const EngineConfig& cfg);
  virtual ~Engine() = default;

  /// Enqueues a request. Errors (returned at once, nothing enqueued): InvalidArgument for
  /// an empty prompt, a prompt that does not leave room for one generated token in the
  /// context or a token id outside the vocabulary; ResourceExhausted for a request that
  /// could never fit in the KV pool; RateLimited for a new cache_salt while
  /// --max-cache-salts others have unfinished requests (not for a request with a kv_budget,
  /// which uses no prefix-cache namespace); Unavailable when the engine cannot
  /// serve (shutting down, a router without a reachable decode worker).
  virtual Result<std::shared_ptr<RequestStream>> submit(std::vector<int32_t> prompt,
                                                        const SamplingParams& params) = 0;

  /// Enqueues a request with `opts.n` choices (one stream each, in choice order). Choice
  /// k of a request with seed s produces exactly what a one-choice request with seed
  /// s + k produces. The default implementation submits the choices separately (no
  /// block sharing, no priority or cache salt); the real engine shares the prompt's
  /// blocks between choices (copy-on-write of the last partial block).
  virtual Result<std::vector<std::shared_ptr<RequestStream>>> submit_group(std::vector<int32_t> prompt,
                                                                           const SamplingParams& params,
                                                                           const RequestOptions& opts);

  virtual const tokenizer::Tokenizer& tokenizer() const = 0;
  virtual const std::string& model_name() const = 0;
  /// Context length in tokens (prompt + generated).
  virtual int context_length() const = 0;
  virtual EngineStats stats() const = 0;
  /// Counters and histograms for /metrics (the default: stats() only).
  virtual MetricsSnapshot metrics() const;
  /// The KV cache layout (for KV transfer handshakes); empty for engines without a cache.
  virtual KvLayout kv_layout() const { return {}; }
  /// gguf::weights_fingerprint of the model served (16 hex digits); "" for engines that run
  /// no model (the router).
  virtual std::string weights_fingerprint() const { return {}; }
  /// The engine's recent steps with seq > `since`, oldest first (engine/step_timings.h);
  /// empty for engines that run no model (the router).
  virtual std::vector<StepSample> recent_steps(uint64_t since) const {
    (void)since;
    return {};
  }
  /// "" when a request may ask for `kv_budget` (> 0) tokens of KV per sequence
  /// (RequestOptions::kv_budget), else why not, naming the field.
  virtual std::string kv_budget_error(int kv_budget) const {
    (void)kv_budget;
    return "kv_budget is not supported by this server";
  }
  /// Whether a request submitted now can be served (a router: some worker is healthy).
  /// Empty when ready, else the reason (shown by /health, which then answers 503).
  virtual std::string not_ready_reason() const { return {}; }
  /// Stops the step loop; outstanding requests finish with FinishReason::Abort.
  virtual void shutdown() = 0;
};

}  // namespace pdserve::engine
