// Test helper: "every request has ended and the KV pool is whole again" — no block in use,
// free + cached == total, no request running or waiting — read from an Engine's stats or
// from a server's GET /health, and waited for with a deadline (stats are published after
// each engine step, so they trail the last delta a client sees).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "support/wait.h"

namespace pdserve::testing {

/// KV pool and request counts as EngineStats and /health report them.
struct PoolState {
  int64_t total = 0, used = 0, free = 0, cached = 0;  // KV blocks
  int64_t running = 0, waiting = 0;                   // requests
};

/// True when nothing holds a block and no request is left: used == 0, free + cached ==
/// total, running == waiting == 0.
inline bool pool_free(const PoolState& s) {
  return s.used == 0 && s.free + s.cached == s.total && s.running == 0 && s.waiting == 0;
}

inline PoolState pool_state(const engine::EngineStats& s) {
  return {s.kv_blocks_total, s.kv_blocks_used, s.kv_blocks_free, s.kv_blocks_cached, s.requests_running,
          s.requests_waiting};
}

/// The pool state in GET http://127.0.0.1:`port`/health (serve, a worker's metrics port;
/// also from a 503 "unavailable" answer, which carries the counts too); nullopt when it
/// does not answer with the counts.
inline std::optional<PoolState> health_pool_state(int port) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(2, 0);
  c.set_read_timeout(5, 0);
  auto res = c.Get("/health");
  if (!res) return std::nullopt;
  const auto h = nlohmann::json::parse(res->body, nullptr, false);
  if (!h.is_object()) return std::nullopt;
  PoolState s;
  for (auto [key, out] : {std::pair<const char*, int64_t*>{"kv_blocks_total", &s.total},
                          {"kv_blocks_used", &s.used},
                          {"kv_blocks_free", &s.free},
                          {"kv_blocks_cached", &s.cached},
                          {"requests_running", &s.running},
                          {"requests_waiting", &s.waiting}}) {
    if (!h.contains(key) || !h[key].is_number_integer()) return std::nullopt;
    *out = h[key].get<int64_t>();
  }
  return s;
}

/// Waits up to `timeout` until `e`'s pool is free (pool_free).
inline bool wait_pool_free(const engine::Engine& e, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  return wait_until([&] { return pool_free(pool_state(e.stats())); }, timeout);
}

/// Waits up to `timeout` until the pool of the server on `port` is free (via /health).
inline bool wait_pool_free(int port, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  return wait_until([&] {
    const auto s = health_pool_state(port);
    return s && pool_free(*s);
  }, timeout);
}

}  // namespace pdserve::testing
