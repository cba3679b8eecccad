// Routing policies of the router: which decode worker gets a tokenized prompt.
//   round_robin      healthy workers in turn
//   least_load       fewest requests (running, waiting, awaiting KV), then lowest KV usage
//   prefix_affinity  consistent hashing (a ring with virtual nodes) of the prompt's first
//                    blocks, so requests sharing a prefix meet that worker's prefix cache
//   length           prompts longer than a threshold to the "long" group, others to the
//                    normal group (least_load inside a group; the other group if empty)
// Policies are pure (no network): they rank a snapshot of the workers.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"

namespace pdserve::disagg {

/// What a policy knows about one decode worker.
struct WorkerView {
  std::string address;      // stable identity (the hash ring's key)
  bool healthy = false;
  bool long_group = false;  // listed under --decode-long
  int64_t load = 0;         // running + waiting + awaiting-KV requests (as last reported, plus routed since)
  double kv_usage = 0;      // used KV blocks / total, in [0, 1]
};

class RoutingPolicy {
 public:
  virtual ~RoutingPolicy() = default;
  /// Every worker index exactly once, best first: the healthy workers in the policy's
  /// order of preference, then the unhealthy ones (last resorts, in the same spirit).
  virtual std::vector<int> rank(const std::vector<int32_t>& prompt, const std::vector<WorkerView>& workers) = 0;
  virtual const char* name() const = 0;
};

/// The routing policies (see the top of this file).
enum class RoutingPolicyKind { kRoundRobin, kLeastLoad, kPrefixAffinity, kLength };

/// Every RoutingPolicyKind, in the order --help lists them.
inline constexpr RoutingPolicyKind kRoutingPolicyKinds[] = {RoutingPolicyKind::kRoundRobin, RoutingPolicyKind::kLeastLoad,
                                                            RoutingPolicyKind::kPrefixAffinity, RoutingPolicyKind::kLength};

/// The policy's name as --policy spells it ("round_robin", "least_load", "prefix_affinity", "length").
const char* name(RoutingPolicyKind k);

struct PolicyConfig {
  RoutingPolicyKind kind = RoutingPolicyKind::kRoundRobin;
  int long_prompt_threshold = 1024;   // length: prompts longer than this (tokens) are long
  int prefix_blocks = 2;              // prefix_affinity: blocks of the prompt that form the key
  int block_size = 16;                // prefix_affinity: tokens per block
  int virtual_nodes = 100;            // prefix_affinity: ring points per worker
};

/// The policy of kind cfg.kind. Errors: InvalidArgument for prefix_affinity with a
/// parameter below 1.
Result<std::unique_ptr<RoutingPolicy>> make_routing_policy(const PolicyConfig& cfg);

/// Healthy workers in turn (a shared counter advances once per request).
class RoundRobinPolicy final : public RoutingPolicy {
 public:
  std::vector<int> rank(const std::vector<int32_t>& prompt, const std::vector<WorkerView>& workers) override;
  const char* name() const override { return "round_robin"; }

 private:
  std::atomic<uint64_t> next_{0};
};

/// Worker indices by (unhealthy last, load, KV usage), ties in rotation starting at
/// index `rotation % size`.
std::vector<int> least_load_order(const std::vector<WorkerView>& workers, uint64_t rotation);

/// Lowest load, then lowest KV usage; ties are broken in rotation.
class LeastLoadPolicy final : public RoutingPolicy {
 public:
  std::vector<int> rank(const std::vector<int32_t>& prompt, const std::vector<WorkerView>& workers) override;
  const char* name() const override { return "least_load"; }

 private:
  std::atomic<uint64_t> next_{0};
};

/// Consistent hashing of the first prefix_blocks * block_size prompt tokens (fewer full
/// blocks when the prompt is shorter; the whole prompt when it has no full block). The
/// owner is the first ring point at or after the key; failover walks on clockwise.
class PrefixAffinityPolicy final : public RoutingPolicy {
 public:
  explicit PrefixAffinityPolicy(int prefix_blocks = 2, int block_size = 16, int virtual_nodes = 100);
  std::vector<int> rank(const std::vector<int32_t>& prompt, const std::vector<WorkerView>& workers) override;
  const char* name() const override { return "prefix_affinity"; }
  /// The key hashed for `prompt`.
  uint64_t prefix_key(const std::vector<int32_t>& prompt) const;

 private:
  struct Point {
    uint64_t hash;
    int worker;
  };
  void build_ring(const std::vector<WorkerView>& workers);  // caller holds mu_

  int prefix_blocks_, block_size_, virtual_nodes_;
  std::mutex mu_;
  std::vector<std::string> ring_addresses_;  // the worker set the ring was built for
  std::vector<Point> ring_;                  // sorted by hash
};

/// Prompts longer than `threshold` tokens prefer the long group, others the normal group;
/// least_load inside the group; the other group's workers follow.
class LengthPolicy final : public RoutingPolicy {
 public:
  explicit LengthPolicy(int threshold) : threshold_(threshold) {}
  std::vector<int> rank(const std::vector<int32_t>& prompt, const std::vector<WorkerView>& workers) override;
  const char* name() const override { return "length"; }

 private:
  int threshold_;
  std::atomic<uint64_t> next_[2] = {0, 0};  // tie rotation per group (normal, long)
};

/// 64-bit hash of a byte string (FNV-1a, then a splitmix64 finaliser).
uint64_t hash_bytes(const void* data, size_t n, uint64_t seed = 0);

}  // namespace pdserve::disagg
