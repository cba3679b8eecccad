// Discrete-event simulation of a pdserve cluster: requests replayed through N prefill +
// M decode instances (disaggregated) or K colocated instances, on a virtual clock.
//
// What is real and what is modelled:
//   * real code: each instance's engine::Scheduler (continuous batching, chunked prefill,
//     prefix cache matching, preemption) over a real kv::KvCacheManager (block pool and
//     radix cache; its K/V storage is a 1-float stub, nothing is computed), and the
//     router's disagg::RoutingPolicy ranking the decode (or colocated) instances.
//   * modelled: a step's duration comes from the Profile (its prefill chunks and decode
//     batch, see step_seconds); generated tokens are placeholders; a remote prefill goes
//     to the prefill instances in turn (as disagg::GrpcKvSource does) and its KV
//     arrives transfer_seconds(uncached prompt bytes) after the prefill step ends;
//     HTTP, tokenisation and SSE are one measured delay per request (the profile's
//     frontend_seconds, before the engine sees it); the router's own hop is not modelled.
// The decode side follows engine::EngineImpl: a prompt whose uncached part is longer
// than remote_prefill_threshold (and prefill instances exist) is prefilled remotely,
// the decode instance holding its blocks meanwhile; the first token comes from the
// prefill instance.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "disagg/routing_policy.h"
#include "engine/scheduler.h"
#include "loadgen/stream_client.h"
#include "planner/plan_input.h"
#include "planner/profile.h"

namespace pdserve::tokenizer {
class Tokenizer;
}

namespace pdserve::planner {

/// One request to replay: arrival on the virtual clock, prompt token ids (equal leading
/// ids ⇒ prefix-cache hits), tokens to generate (ignore_eos: exactly that many).
struct SimRequest {
  double arrival_s = 0;
  std::vector<int32_t> prompt;
  int max_tokens = 1;
};

/// The engine flags of every simulated instance (as `pdserve serve` takes them).
struct SimInstanceConfig {
  int block_size = 16;
  int64_t num_kv_blocks = 0;  // 0 ⇒ as the engine derives it (max_seqs contexts, capped at 512 MiB)
  int ctx_size = 0;           // context length (0 ⇒ the profile's n_ctx)
  int max_batched_tokens = 2048;
  int max_seqs = 64;
  int long_prefill_threshold = 0;
  bool prefix_cache = true;
  engine::SchedulingPolicy policy = engine::SchedulingPolicy::kFcfs;
};

/// What the elastic hook (SimConfig::replan) sees at an interval boundary.
struct SimInterval {
  int index = 0;      // 0: the first arrival (nothing runs yet), then 1, 2, …
  double time_s = 0;  // virtual seconds
  /// Every request's record so far (input order; a request not yet arrived has
  /// send_s < 0, one not finished done_marker false): the router's view of the load.
  const std::vector<loadgen::RequestRecord>* records = nullptr;
  int64_t prefix_queries = 0, prefix_hits = 0;  // Σ over all instances since the start
  /// The instances routed to now (draining ones are not listed): id, role, and
  /// cached_blocks = KV blocks held only by its prefix cache.
  std::vector<InstanceState> active;
};

/// The fleet the elastic hook wants from now on.
struct SimFleet {
  int prefill = 0, decode = 1;       // instances (decode >= 1; prefill 0: decode prefills locally)
  int remote_prefill_threshold = 0;  // as SimConfig's
  /// Ids (SimInterval::active) to keep, per role up to its count; the other active
  /// instances of that role drain (no new requests; they finish what they hold), and new
  /// empty instances make up the count.
  std::vector<std::string> keep;
};

struct SimConfig {
  int colocated = 0;           // K colocated instances (then prefill/decode must be 0)
  int prefill = 0, decode = 0;  // N prefill + M decode instances (M >= 1; N = 0: decode prefills locally)
  SimInstanceConfig instance;
  disagg::PolicyConfig routing;      // the router's policy over the decode/colocated instances
  int remote_prefill_threshold = 0;  // decode: uncached prompt tokens at or below ⇒ local prefill
  /// Elastic fleet: when set, colocated/prefill/decode are ignored; `replan` is called at
  /// the first arrival and then every `replan_interval_s` virtual seconds until every
  /// request has finished, and the fleet follows what it returns (it may throw
  /// std::invalid_argument, which ends the run).
  std::function<SimFleet(const SimInterval&)> replan;
  double replan_interval_s = 0;
};

/// Per-instance counters of a run.
struct SimInstanceStats {
  std::string role;  // "colocated", "prefill", "decode"
  int64_t steps = 0;
  double busy_s = 0;  // virtual seconds spent in steps
  int64_t requests = 0, preemptions = 0, prefix_queries = 0, prefix_hits = 0;
};

struct SimResult {
  /// Per request, in input order, in loadgen's form (times in virtual seconds from 0,
  /// send = arrival, one chunk per generated token, usage set): loadgen::summarize_run
  /// turns them into the bench report.
  std::vector<loadgen::RequestRecord> records;
  std::vector<SimInstanceStats> instances;
  int64_t remote_prefills = 0, local_prefills = 0;
  double kv_bytes_transferred = 0;
  int64_t events = 0;
};

/// A step's duration: decode_step_seconds(decodes, their mean context) plus
/// prefill_seconds(chunk, cached) of every prefill chunk, less the fixed per-forward
/// cost (the decode curve's intercept at batch 0) for every part after the first, as
/// the step is one forward pass. `chunks`: (chunk tokens, tokens before it) pairs.
double step_seconds(const Profile& p, int decodes, double mean_context, const std::vector<std::pair<int, int>>& chunks);

/// Runs the simulation. `tok` only backs the engine's Sequence objects (nothing is
/// detokenised). Throws std::invalid_argument for a bad configuration (no instance,
/// colocated mixed with prefill/decode, a prompt that does not fit an instance's pool or
/// context) naming the problem.
SimResult simulate(const Profile& profile, const SimConfig& cfg, const std::vector<SimRequest>& requests,
                   const tokenizer::Tokenizer& tok);

/// Token ids for the prompts of a workload (loadgen::Workload, as `pdserve bench` builds
/// it): position 0 is `bos`; a position inside the k-th hash block (block_tokens each) is
/// a function of (hash_ids[k], offset), so prompts sharing hash ids share those tokens as
/// the synthesised prompts share text; the rest is unique to the request. Ids are in
/// [3, n_vocab).
std::vector<int32_t> synth_prompt(int64_t request_index, int64_t input_len, const std::vector<int64_t>& hash_ids,
                                  int64_t block_tokens, int n_vocab, int32_t bos);

}  // namespace pdserve::planner
