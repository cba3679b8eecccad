// CacheSaltGate: the admission cap on live cache_salt namespaces (--max-cache-salts).
// Each unfinished request with a non-empty cache_salt that uses the prefix cache holds its
// salt (the engine asks for none for a request with a kv_budget: it uses no namespace); a
// request whose salt no unfinished request holds yet is refused (RateLimited, HTTP 429)
// while `max` other salts are held. Salts whose requests have all finished are not counted: their cached
// blocks stay in the prefix cache until the radix cache's own cap (the same `max`,
// kv::RadixCache::set_max_namespaces) evicts them, least recently used first, to make
// room for a new salt. Since at most `max` salts are held, a new namespace over the cap
// always finds an idle one to evict.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "base/status.h"

namespace pdserve::engine {

/// Thread-safe: submit threads acquire, the engine thread drops holds.
class CacheSaltGate {
 public:
  /// A request's hold on its salt; released when the last copy is destroyed.
  class Hold;

  /// `max_salts` distinct salts may be held at once; 0 = no cap (acquire always succeeds).
  explicit CacheSaltGate(size_t max_salts);
  ~CacheSaltGate();
  CacheSaltGate(const CacheSaltGate&) = delete;
  CacheSaltGate& operator=(const CacheSaltGate&) = delete;

  /// A hold on `salt` (null for "" or without a cap: nothing to count). RateLimited,
  /// naming --max-cache-salts, when `salt` is not held and `max_salts` others are. A hold
  /// may outlive the gate.
  Result<std::shared_ptr<Hold>> acquire(const std::string& salt);
  /// Distinct salts held now.
  size_t held() const;
  size_t max_salts() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace pdserve::engine
