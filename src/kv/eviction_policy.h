// Which unreferenced prefix-cache blocks go first when blocks are needed.
#pragma once

namespace pdserve::kv {

enum class EvictionPolicy {
  kLru,  // least recently used leaf first
  kLfu,  // fewest uses first, counts halving every 4096 accesses (LFU with aging)
};

/// The --eviction spelling: "lru" / "lfu".
inline const char* eviction_policy_name(EvictionPolicy p) { return p == EvictionPolicy::kLfu ? "lfu" : "lru"; }

}  // namespace pdserve::kv
