// Rate limits of the gateway: per API key and per tenant, requests/min, tokens/min
// (prompt + completion) and concurrent requests. Requests and tokens are token buckets
// (capacity = the per-minute limit, refilled continuously at limit/60 per second, full at
// first use), as OpenAI's limits behave; concurrency is a counter. One mutex makes every
// check-and-debit atomic, so limits are exact across HTTP threads.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>

namespace pdserve::gateway {

/// Seconds on some monotonic clock (injectable for tests).
using Clock = std::function<double()>;
/// The process's monotonic clock (base/clock.h now_seconds).
Clock steady_clock_seconds();

/// The limits of one key or tenant; 0 = unlimited.
struct Limits {
  double requests_per_minute = 0;
  double tokens_per_minute = 0;
  int max_concurrent = 0;
  bool any() const { return requests_per_minute > 0 || tokens_per_minute > 0 || max_concurrent > 0; }
};

/// A token bucket: `capacity` tokens, refilled at `rate` per second, full when created.
class TokenBucket {
 public:
  TokenBucket() = default;
  TokenBucket(double capacity, double now) : capacity_(capacity), level_(capacity), last_(now) {}
  /// Changes the capacity (a reloaded limit), keeping the level within it.
  void set_capacity(double capacity, double now);
  /// Refills up to `now` (seconds).
  void refill(double now);
  double level() const { return level_; }
  double capacity() const { return capacity_; }
  double rate() const { return capacity_ / 60.0; }
  void take(double n) { level_ -= n; }
  /// Gives back `n` (at most up to capacity).
  void give(double n);
  /// Seconds until the level reaches `n` (0 when it already has).
  double seconds_until(double n) const;
  /// Seconds until the bucket is full again.
  double seconds_until_full() const { return seconds_until(capacity_); }

 private:
  double capacity_ = 0, level_ = 0, last_ = 0;
};

/// What the x-ratelimit-* headers of a response say (the tighter of key and tenant).
struct RateLimitState {
  bool has_requests = false, has_tokens = false;
  int64_t limit_requests = 0, remaining_requests = 0;
  int64_t limit_tokens = 0, remaining_tokens = 0;
  double reset_requests_s = 0, reset_tokens_s = 0;
};

/// Outcome of RateLimiter::acquire.
struct RateDecision {
  bool allowed = true;
  /// Refused: "requests", "tokens", "concurrency" (the per-minute/ concurrent limit hit)
  /// or "request_too_large" (the estimate exceeds the tokens-per-minute capacity, so no
  /// wait helps); which of key/tenant ("key" or "tenant").
  std::string reason, scope;
  double limit = 0;           // the limit that was hit
  double retry_after_s = 0;   // when a retry can succeed (0: unknown / never)
  RateLimitState state;
};

/// One admitted request's hold on the limits (returned by acquire, given to release).
struct RateTicket {
  std::string key_id, tenant_id;
  double tokens = 0;  // debited estimate
};

/// Buckets and counters for every key and tenant seen, keyed by id strings.
class RateLimiter {
 public:
  explicit RateLimiter(Clock clock = steady_clock_seconds()) : clock_(std::move(clock)) {}

  /// Checks and (when allowed) debits one request estimated at `tokens` tokens against
  /// the key's and the tenant's limits, atomically: either both are debited or neither.
  /// The ticket must be released (release()) when the request ends.
  RateDecision acquire(const std::string& key_id, const Limits& key_limits, const std::string& tenant_id,
                       const Limits& tenant_limits, double tokens, RateTicket* ticket);
  /// Ends a request: frees its concurrency slot and gives back `estimate - used` tokens.
  void release(const RateTicket& t, double used_tokens);
  /// The headers' view of the limits without debiting anything.
  RateLimitState peek(const std::string& key_id, const Limits& key_limits, const std::string& tenant_id,
                      const Limits& tenant_limits);
  /// Concurrent requests now held by `id` (a key or tenant id).
  int concurrent(const std::string& id);

 private:
  struct Entry {
    Limits limits;
    TokenBucket requests, tokens;
    int concurrent = 0;
    bool init = false;
  };
  Entry& entry(const std::string& id, const Limits& l, double now);
  RateLimitState state_of(const Entry* key, const Entry* tenant) const;

  Clock clock_;
  std::mutex mu_;
  std::map<std::string, Entry> entries_;
};

/// "1m30s", "2.5s", "120ms": the duration format of OpenAI's x-ratelimit-reset-* headers.
std::string format_reset(double seconds);

}  // namespace pdserve::gateway
