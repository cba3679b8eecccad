// RedisKvStore: the shared tier (--kv-store redis://HOST:PORT[/DB]) through hiredis'
// blocking API with a timeout (--kv-store-timeout-ms). Keys are "pdserve:kv:<hex key>";
// Redis' own maxmemory policy bounds it. A failed call drops the connection; the next
// connect waits a backoff (100 ms doubling to 2 s; a connection of the same URL that got back in ends it) during which calls fail at once
// (Unavailable), so an unreachable server costs recompute, not a stall. An outage is
// logged once when it starts and once when it ends (a RedisHealth shared by the
// connections of one URL).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "kv/kv_store.h"

struct redisContext;

namespace pdserve::kv {

/// A parsed redis://HOST:PORT[/DB] URL.
struct RedisUrl {
  std::string host;
  int port = 6379;
  int db = 0;
  std::string text;  // as given
};

/// Parses `url`; InvalidArgument with a one-line reason when malformed.
Result<RedisUrl> parse_redis_url(const std::string& url);

/// Shared by a URL's connections: whether the server is in an outage (for the logs).
struct RedisHealth {
  std::atomic<bool> down{false};
};

/// One connection; not thread-safe (each KvTiers thread has its own).
class RedisKvStore final : public KvStore {
 public:
  RedisKvStore(RedisUrl url, int timeout_ms, std::shared_ptr<RedisHealth> health);
  ~RedisKvStore() override;

  const char* tier() const override { return "redis"; }
  Result<std::optional<std::string>> get(const BlockKey& key) override;
  Status put(const BlockKey& key, const std::string& value) override;
  bool up() const override { return !health_->down; }
  void probe() override { (void)connect(); }

 private:
  /// A live connection, or Unavailable (during the backoff, or when connecting fails).
  Status connect();
  /// After a command failed on a live connection: drops it and connects again at once.
  Status reconnect();
  /// Drops the connection after a failure; logs when an outage starts.
  Status fail(const std::string& what);

  RedisUrl url_;
  int timeout_ms_;
  std::shared_ptr<RedisHealth> health_;
  redisContext* ctx_ = nullptr;
  std::chrono::steady_clock::time_point retry_at_{};
  std::chrono::milliseconds backoff_{0};
};

}  // namespace pdserve::kv
