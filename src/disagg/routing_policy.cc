#include "disagg/routing_policy.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <tuple>

namespace pdserve::disagg {
namespace {

uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// Healthy indices first, then unhealthy ones, each group keeping the order of `order`.
std::vector<int> healthy_first(const std::vector<int>& order, const std::vector<WorkerView>& w) {
  std::vector<int> out;
  out.reserve(order.size());
  for (int i : order)
    if (w[static_cast<size_t>(i)].healthy) out.push_back(i);
  for (int i : order)
    if (!w[static_cast<size_t>(i)].healthy) out.push_back(i);
  return out;
}

}  // namespace

uint64_t hash_bytes(const void* data, size_t n, uint64_t seed) {
  uint64_t h = 0xcbf29ce484222325ull ^ mix64(seed);
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return mix64(h);
}

const char* name(RoutingPolicyKind k) {
  switch (k) {
    case RoutingPolicyKind::kRoundRobin: return "round_robin";
    case RoutingPolicyKind::kLeastLoad: return "least_load";
    case RoutingPolicyKind::kPrefixAffinity: return "prefix_affinity";
    case RoutingPolicyKind::kLength: return "length";
  }
  return "unknown";
}

Result<std::unique_ptr<RoutingPolicy>> make_routing_policy(const PolicyConfig& cfg) {
  switch (cfg.kind) {
    case RoutingPolicyKind::kRoundRobin: return std::unique_ptr<RoutingPolicy>(new RoundRobinPolicy());
    case RoutingPolicyKind::kLeastLoad: return std::unique_ptr<RoutingPolicy>(new LeastLoadPolicy());
    case RoutingPolicyKind::kPrefixAffinity:
      if (cfg.prefix_blocks < 1 || cfg.block_size < 1 || cfg.virtual_nodes < 1)
        return Status::InvalidArgument("prefix_affinity needs prefix blocks, block size and virtual nodes >= 1");
      return std::unique_ptr<RoutingPolicy>(
          new PrefixAffinityPolicy(cfg.prefix_blocks, cfg.block_size, cfg.virtual_nodes));
    case RoutingPolicyKind::kLength: return std::unique_ptr<RoutingPolicy>(new LengthPolicy(cfg.long_prompt_threshold));
  }
  return Status::Internal("routing policy kind " + std::to_string(static_cast<int>(cfg.kind)) + " has no implementation");
}

// ---- round_robin ----------------------------------------------------------------------

std::vector<int> RoundRobinPolicy::rank(const std::vector<int32_t>&, const std::vector<WorkerView>& workers) {
  const size_t n = workers.size();
  if (n == 0) return {};
  // Rotate over the healthy workers only, so a dead one does not double its successor's share.
  std::vector<int> healthy, unhealthy;
  for (size_t i = 0; i < n; ++i) (workers[i].healthy ? healthy : unhealthy).push_back(static_cast<int>(i));
  std::vector<int> out;
  out.reserve(n);
  const uint64_t start = next_.fetch_add(1);
  for (size_t j = 0; j < healthy.size(); ++j) out.push_back(healthy[(start + j) % healthy.size()]);
  for (size_t j = 0; j < unhealthy.size(); ++j) out.push_back(unhealthy[(start + j) % unhealthy.size()]);
  return out;
}

// ---- least_load -----------------------------------------------------------------------

std::vector<int> LeastLoadPolicy::rank(const std::vector<int32_t>&, const std::vector<WorkerView>& workers) {
  return least_load_order(workers, next_.fetch_add(1));
}

std::vector<int> least_load_order(const std::vector<WorkerView>& workers, uint64_t rotation) {
  const size_t n = workers.size();
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  const uint64_t start = n ? rotation % n : 0;
  auto key = [&](int i) {
    const WorkerView& w = workers[static_cast<size_t>(i)];
    return std::make_tuple(!w.healthy, w.load, w.kv_usage, (static_cast<uint64_t>(i) + n - start) % n);
  };
  std::sort(order.begin(), order.end(), [&](int a, int b) { return key(a) < key(b); });
  return order;
}

// ---- prefix_affinity ------------------------------------------------------------------

PrefixAffinityPolicy::PrefixAffinityPolicy(int prefix_blocks, int block_size, int virtual_nodes)
    : prefix_blocks_(prefix_blocks), block_size_(block_size), virtual_nodes_(virtual_nodes) {}

uint64_t PrefixAffinityPolicy::prefix_key(const std::vector<int32_t>& prompt) const {
  const size_t full_blocks = std::min<size_t>(static_cast<size_t>(prefix_blocks_), prompt.size() / static_cast<size_t>(block_size_));
  const size_t n = full_blocks > 0 ? full_blocks * static_cast<size_t>(block_size_) : prompt.size();
  return hash_bytes(prompt.data(), n * sizeof(int32_t), /*seed=*/1);
}

void PrefixAffinityPolicy::build_ring(const std::vector<WorkerView>& workers) {
  ring_addresses_.clear();
  ring_.clear();
  for (size_t w = 0; w < workers.size(); ++w) {
    ring_addresses_.push_back(workers[w].address);
    for (int v = 0; v < virtual_nodes_; ++v) {
      const std::string point = workers[w].address + "#" + std::to_string(v);
      ring_.push_back({hash_bytes(point.data(), point.size(), /*seed=*/2), static_cast<int>(w)});
    }
  }
  std::sort(ring_.begin(), ring_.end(), [](const Point& a, const Point& b) {
    return a.hash != b.hash ? a.hash < b.hash : a.worker < b.worker;
  });
}

std::vector<int> PrefixAffinityPolicy::rank(const std::vector<int32_t>& prompt, const std::vector<WorkerView>& workers) {
  if (workers.empty()) return {};
  const uint64_t key = prefix_key(prompt);
  std::vector<int> order;
  {
    std::lock_guard<std::mutex> lk(mu_);
    bool same = ring_addresses_.size() == workers.size();
    for (size_t i = 0; same && i < workers.size(); ++i) same = ring_addresses_[i] == workers[i].address;
    if (!same) build_ring(workers);
    // Walk clockwise from the key; each worker appears at its first point.
    auto it = std::lower_bound(ring_.begin(), ring_.end(), key, [](const Point& p, uint64_t k) { return p.hash < k; });
    std::vector<bool> seen(workers.size(), false);
    for (size_t j = 0; j < ring_.size() && order.size() < workers.size(); ++j) {
      if (it == ring_.end()) it = ring_.begin();
      if (!seen[static_cast<size_t>(it->worker)]) {
        seen[static_cast<size_t>(it->worker)] = true;
        order.push_back(it->worker);
      }
      ++it;
    }
  }
  return healthy_first(order, workers);
}

// ---- length ---------------------------------------------------------------------------

std::vector<int> LengthPolicy::rank(const std::vector<int32_t>& prompt, const std::vector<WorkerView>& workers) {
  const bool want_long = static_cast<int64_t>(prompt.size()) > threshold_;
  std::vector<int> preferred, other;  // indices into workers
  for (size_t i = 0; i < workers.size(); ++i)
    (workers[i].long_group == want_long ? preferred : other).push_back(static_cast<int>(i));
  // Ties rotate per group; only the preferred group's rotation advances.
  auto ranked = [&](const std::vector<int>& idx, bool is_long, bool advance) {
    std::vector<WorkerView> sub;
    for (int i : idx) sub.push_back(workers[static_cast<size_t>(i)]);
    auto& next = next_[is_long ? 1 : 0];
    std::vector<int> out;
    for (int j : least_load_order(sub, advance ? next.fetch_add(1) : next.load())) out.push_back(idx[static_cast<size_t>(j)]);
    return out;
  };
  std::vector<int> order = ranked(preferred, want_long, true);
  for (int i : ranked(other, !want_long, false)) order.push_back(i);
  return healthy_first(order, workers);  // a group without healthy workers yields to the other
}

}  // namespace pdserve::disagg
