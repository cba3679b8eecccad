// --kv-store's URL checked before the model loads (the engine opens the tier only after
// loading it, so a malformed URL would otherwise cost a model load before its error).
#pragma once

#include <cstdio>

#include "engine/engine.h"
#include "kv/redis_store.h"

namespace pdserve::cli {

/// 0 when `cfg` has no --kv-store or a well-formed one; else prints the one-line
/// "error: --kv-store '…': …" (kv::parse_redis_url's reason) to stderr and returns 1.
inline int check_kv_store_flag(const engine::EngineConfig& cfg) {
  if (cfg.kv_tiers.store_url.empty()) return 0;
  auto url = kv::parse_redis_url(cfg.kv_tiers.store_url);
  if (url.ok()) return 0;
  std::fprintf(stderr, "error: %s\n", url.error().c_str());
  return 1;
}

}  // namespace pdserve::cli
