// Engine: owns the model, tokenizer and KV cache and runs the continuous-batching step
// loop on its own thread (schedule ▸ build batch ▸ forward ▸ sample ▸ stream out).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/request_stream.h"
#include "engine/sampling_params.h"

namespace pdserve::tokenizer {
class Tokenizer;
}

namespace pdserve::engine {

/// Engine settings (CLI flags of `pdserve serve`).
struct EngineConfig {
  std::string model_path;
  std::string model_name;          // id reported by /v1/models; default: file stem
  int threads = 0;                 // 0 ⇒ all cores
  int block_size = 16;             // tokens per KV block
  int64_t num_kv_blocks = 0;       // 0 ⇒ derived from kv_cache_mb
  int64_t kv_cache_mb = 0;         // 0 ⇒ enough for max_seqs full contexts, capped at 1 GiB
  std::string kv_dtype = "f16";    // f16 | f32
  int max_batched_tokens = 2048;   // token budget per step
  int max_seqs = 64;               // running sequences per step
  int ctx_size = 0;                // 0 ⇒ the model's context_length
};

/// Point-in-time counters, safe to read from any thread.
struct EngineStats {
  int64_t kv_blocks_total = 0;
  int64_t kv_blocks_used = 0;   // ref count > 0
  int64_t kv_blocks_free = 0;
  int64_t requests_running = 0;
  int64_t requests_waiting = 0;
  int64_t prompt_tokens_total = 0;
  int64_t generation_tokens_total = 0;
};

class Engine {
 public:
  /// Loads the model and starts the step loop. Errors name the file and the problem.
  static Result<std::unique_ptr<Engine>> create(const EngineConfig& cfg);
  virtual ~Engine() = default;

  /// Enqueues a request. Errors (returned at once, nothing enqueued): empty prompt, a
  /// prompt that does not leave room for one generated token in the context, a token id
  /// outside the vocabulary, a request that could never fit in the KV pool.
  virtual Result<std::shared_ptr<RequestStream>> submit(std::vector<int32_t> prompt,
                                                        const SamplingParams& params) = 0;

  virtual const tokenizer::Tokenizer& tokenizer() const = 0;
  virtual const std::string& model_name() const = 0;
  /// Context length in tokens (prompt + generated).
  virtual int context_length() const = 0;
  virtual EngineStats stats() const = 0;
  /// Stops the step loop; outstanding requests finish with FinishReason::Abort.
  virtual void shutdown() = 0;
};

}  // namespace pdserve::engine
