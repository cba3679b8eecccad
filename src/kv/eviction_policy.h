// Which unreferenced prefix-cache blocks go first when blocks are needed.
#pragma once

#include <string>

#include "base/status.h"

namespace pdserve::kv {

enum class EvictionPolicy {
  kLru,  // least recently used leaf first
  kLfu,  // fewest uses first, counts halving every 4096 accesses (LFU with aging)
};

/// Parses "lru" / "lfu"; an error naming the choices otherwise.
Result<EvictionPolicy> parse_eviction_policy(const std::string& s);

}  // namespace pdserve::kv
