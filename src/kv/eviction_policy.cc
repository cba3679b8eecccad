#include "kv/eviction_policy.h"

namespace pdserve::kv {

Result<EvictionPolicy> parse_eviction_policy(const std::string& s) {
  if (s == "lru") return EvictionPolicy::kLru;
  if (s == "lfu") return EvictionPolicy::kLfu;
  return Status::Error("unknown eviction policy '" + s + "' (use lru or lfu)");
}

}  // namespace pdserve::kv
