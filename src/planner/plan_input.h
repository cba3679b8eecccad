// The planner's inputs and outputs: what the router observed (per SLO class: arrival
// rate, lengths, cached fraction), each class's SLO, the cost model of one instance,
// the budget, and the plan now in force; and the plan chosen (instance counts, the
// conditional-disaggregation threshold, which class goes to which pool, the goodput the
// model predicts). Units: seconds, requests/s, tokens, bytes.
#pragma once

#include <cstddef>
#include <limits>
#include <string>
#include <vector>

namespace pdserve::planner {

/// What one instance costs (planner/plan_capacity.h reads it; a measured
/// planner::Profile is adapted by ProfileCostModel). All times in seconds of one instance.
class CostModel {
 public:
  virtual ~CostModel() = default;
  /// Forward time of one prefill chunk of `chunk_tokens` after `cached_tokens` in KV.
  virtual double prefill_seconds(int chunk_tokens, int cached_tokens) const = 0;
  /// One decode step of `batch` sequences of `context` tokens each.
  virtual double decode_step_seconds(int batch, int context) const = 0;
  /// Moving `bytes` of KV from a prefill to a decode instance.
  virtual double transfer_seconds(std::size_t bytes) const = 0;
  /// K+V bytes of one token, all layers.
  virtual double kv_bytes_per_token() const = 0;
};

/// One request class as observed at the router (or forecast) with its SLO.
struct ClassDemand {
  std::string name;            // "high", "medium", "low", "none"
  double rate = 0;             // arrivals, requests/s
  double input_tokens = 0;     // prompt length (mean, or a percentile for a safer plan)
  double output_tokens = 0;    // generated tokens per request
  double cached_fraction = 0;  // share of the prompt found in a prefix cache, [0, 1)
  double ttft_slo_s = 1;       // time-to-first-token target
  double tpot_slo_s = 0.1;     // time-per-output-token target
};

/// One instance of the plan now in force (for hysteresis and to keep the instances
/// that hold prefix cache when scaling down).
struct InstanceState {
  enum class Role { Prefill, Decode };
  std::string id;              // e.g. its address
  Role role = Role::Decode;
  double cached_blocks = 0;    // KV blocks held by its prefix cache (kv_blocks_cached)
};

/// Engine settings of every instance that the capacities depend on.
struct InstanceShape {
  int chunk_tokens = 2048;     // prefill tokens per step (--max-batched-tokens / --long-prefill-threshold)
  int max_seqs = 64;           // decode batch bound (--max-seqs)
  double kv_tokens = 0;        // KV tokens an instance holds (0: unbounded)
};

struct PlanInput {
  std::vector<ClassDemand> classes;
  const CostModel* cost = nullptr;  // required
  InstanceShape shape;
  int budget = 1;                   // instances (prefill + decode) at most
  int min_decode = 1;               // the router needs a decode worker
  int min_prefill = 0;              // keep at least this many prefill instances
  /// Candidate conditional-disaggregation thresholds (uncached prompt tokens: a request
  /// with more goes to a prefill worker). Empty ⇒ {0, 32, 128, 512, 2048, +inf}.
  std::vector<double> thresholds;
  std::vector<InstanceState> current;  // the plan in force (empty at start)
  /// Pin the instance counts (-1: free), e.g. to evaluate the plan in force.
  int fixed_prefill = -1, fixed_decode = -1;
};

/// Where a class's requests are prefilled.
enum class PoolChoice { None, Remote, Local };  // none: not served within its SLO
const char* pool_choice_name(PoolChoice p);

/// Derived per-class costs (planner/plan_capacity.h, where the model is written out),
/// kept in the result for the log.
struct ClassCost {
  double uncached_tokens = 0;
  double prefill_s = 0;          // P: instance-seconds of prefill per request
  double transfer_s = 0;         // x: KV transfer per request (remote)
  double cap_remote = 0;         // ρR: prefill-pool utilisation cap meeting TTFT (M/D/1), 0: infeasible
  double rate_remote = 0;        // λ_max: req/s one decode-only instance serves within SLO (0: none)
  double rate_local = 0;         // … one instance that prefills them itself (colocated) (0: none)
  double batch_remote = 0;       // mean running sequences at rate_remote (Little's law)
  double batch_local = 0;        // … at rate_local
  double step_remote_s = 0;      // mean decode step (= mean TPOT) at rate_remote
  double step_local_s = 0;       // … at rate_local, chunk interference included
  double prefill_share_local = 0;  // ρ_p: share of a local instance's time on prompt chunks at rate_local
  /// Decode-pool instance-seconds per request: 1/rate (0 when the mode is infeasible).
  double decode_remote_s() const { return rate_remote > 0 ? 1.0 / rate_remote : 0.0; }
  double decode_local_s() const { return rate_local > 0 ? 1.0 / rate_local : 0.0; }
};

struct PlanResult {
  int prefill = 0, decode = 0;     // instances
  double threshold = 0;            // chosen conditional-disaggregation threshold (tokens; inf: never remote)
  std::vector<PoolChoice> pools;   // per class (input order)
  std::vector<double> goodput;     // per class, requests/s within SLO
  double total_goodput = 0;        // the objective: Σ goodput
  double demand = 0;               // Σ rate
  std::vector<ClassCost> costs;    // per class
  std::vector<std::string> keep;   // ids of current instances kept (cache holders first)
  std::vector<std::string> notes;  // why a class cannot be served, etc.
  /// Predicted SLO attainment: total_goodput / demand (1 when there is no demand).
  double attainment() const { return demand > 0 ? total_goodput / demand : 1.0; }
  int instances() const { return prefill + decode; }
};

constexpr double kNever = std::numeric_limits<double>::infinity();

}  // namespace pdserve::planner
