// KvStore: one tier of KV blocks below the pool (L1 = the block pool and its radix
// cache): a local disk directory (kv/disk_store.h) or a Redis server (kv/redis_store.h).
// Values are encode_stored_block() strings under BlockKey content keys; a tier moves
// bytes and never decides a hit (decode_stored_block checks the value).
//
// A tier's calls block (disk I/O, a network round trip): only kv::KvTiers's background
// threads make them, never the engine step.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include "base/status.h"
#include "kv/block_key.h"

namespace pdserve::kv {

class KvStore {
 public:
  virtual ~KvStore() = default;
  /// The tier's metric label: "disk" or "redis".
  virtual const char* tier() const = 0;
  /// The value stored under `key`; nullopt when the tier does not have it. Errors
  /// (Unavailable, DeadlineExceeded, Internal) when the tier cannot answer.
  virtual Result<std::optional<std::string>> get(const BlockKey& key) = 0;
  /// Stores `value` under `key` (replacing any). Errors as for get, ResourceExhausted
  /// when the tier is full and cannot evict.
  virtual Status put(const BlockKey& key, const std::string& value) = 0;
  /// Whether this tier knows it holds `key` without asking anyone (false when it cannot
  /// tell cheaply, e.g. Redis).
  virtual bool has_local(const BlockKey& key) const { (void)key; return false; }
  /// Drops `key`'s value, which a reader found unusable (corrupt, truncated), so that the
  /// next put() stores the recomputed block again (a no-op where put() replaces anyway).
  virtual void forget(const BlockKey& key) { (void)key; }
  /// Whether the tier answered its last call (false during an outage).
  virtual bool up() const { return true; }
  /// During an outage: tries to reconnect (respecting the backoff), so hits resume
  /// without waiting for traffic to find the tier back.
  virtual void probe() {}
  /// Persists the tier's index (warm restart); a no-op for tiers that keep their own.
  virtual void snapshot() {}
  /// Blocks and bytes the tier holds, when it knows (-1 when not).
  virtual int64_t num_blocks() const { return -1; }
  virtual int64_t num_bytes() const { return -1; }
};

}  // namespace pdserve::kv
