// The API gateway in front of the engine (serve) or the decode workers (router), one
// implementation for both: authenticates API keys against the auth file, applies rate
// limits and per-class admission control (queue bounds), and gives each admitted request
// its tenant's prefix-cache namespace and SLO class. Without an auth file it is open:
// every request is admitted with the class its `slo_class` field asks for (if any).
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <variant>

#include "base/status.h"
#include "gateway/auth_config.h"
#include "gateway/gateway_metrics.h"
#include "gateway/rate_limiter.h"
#include "gateway/slo_class.h"

namespace pdserve::gateway {

/// Who sent a request: the matched key (and its tenant) of the config in force when it
/// was authenticated (kept alive by `config`), or nobody (an open gateway).
struct Principal {
  std::shared_ptr<const AuthConfig> config;
  const KeyConfig* key = nullptr;
  const TenantConfig* tenant = nullptr;
};

/// Why a request was refused, with what the HTTP layer needs to answer it.
struct Refusal {
  enum class Kind { kUnauthorized, kModelNotFound, kBadClass, kRateLimited, kOverloaded };
  Kind kind;
  std::string message;
  std::string reason;        // metrics label: invalid_key, model_not_allowed, requests, tokens, ...
  double retry_after_s = 0;  // 429 / 503: seconds (0: no Retry-After)
};

class Gateway;

/// An admitted request's hold on the gateway: its concurrency slots and token estimate,
/// its place in its class's queue (until its first token) and its latency record. Made by
/// Gateway::admit; the request's owner reports its first token and its end.
class RequestLease {
 public:
  ~RequestLease();
  RequestLease(const RequestLease&) = delete;
  RequestLease& operator=(const RequestLease&) = delete;

  /// A token arrived (`completion_tokens` so far over all choices, `now` in seconds).
  void on_tokens(int completion_tokens, double now);
  /// The request ended having used `used_tokens` (prompt + completion); refunds the rest
  /// of the estimate. Called once (the destructor does it with the estimate otherwise).
  void finish(double used_tokens);

  SloClass slo_class() const { return cls_; }
  const ClassPolicy& policy() const { return policy_; }
  /// The prefix-cache namespace for a request whose own `cache_salt` is `request_salt`.
  std::string cache_salt(const std::string& request_salt) const;
  const RateLimitState& limits() const { return state_; }

 private:
  friend class Gateway;
  RequestLease(Gateway& g) : g_(g) {}
  void leave_queue();

  Gateway& g_;
  Principal who_;
  SloClass cls_ = SloClass::kNone;
  ClassPolicy policy_;
  RateTicket ticket_;
  bool has_ticket_ = false;
  RateLimitState state_;
  double start_ = 0, first_token_ = -1, last_token_ = -1;
  int tokens_ = 0;
  bool queued_ = false, finished_ = false;
};

class Gateway {
 public:
  /// An open gateway (no keys, no limits, default class policies).
  explicit Gateway(Clock clock = steady_clock_seconds());
  /// A gateway over `config`; `path` is re-read by reload().
  Gateway(std::shared_ptr<const AuthConfig> config, std::string path, Clock clock = steady_clock_seconds());

  /// True for a gateway without an auth file.
  bool open() const { return open_; }

  /// Checks `Authorization: Bearer KEY` against the config's key hashes (every hash is
  /// compared, in constant time). An open gateway admits anyone as nobody.
  Result<Principal> authenticate(const std::string& authorization_header);

  /// Admits a request of `who` for `model`, asking for class `requested` (nullopt: the
  /// key's), estimated at `tokens` (prompt + max completion). Checks, in order: the model
  /// (kModelNotFound), the class (kBadClass), the class's queue bound (kOverloaded), the
  /// rate limits (kRateLimited). `state` gets the x-ratelimit-* view either way.
  std::variant<std::shared_ptr<RequestLease>, Refusal> admit(const Principal& who, const std::string& model,
                                                            std::optional<SloClass> requested, double tokens,
                                                            RateLimitState* state);
  /// The x-ratelimit-* view for `who` (no debit).
  RateLimitState peek(const Principal& who);
  /// Counts a refusal made by the HTTP layer or the engine (e.g. a queue timeout).
  void count_refusal(const std::string& reason) { metrics_.refused(reason); }

  /// Re-reads the auth file; on an error keeps the config in force and returns the error
  /// (which names the line). Requests in flight keep the config they were admitted under.
  Status reload();
  /// The config in force (null for an open gateway).
  std::shared_ptr<const AuthConfig> config() const;

  /// Requests of class `c` admitted and not yet given a first token.
  int queued(SloClass c) const { return queued_[static_cast<size_t>(c)].load(); }
  /// Prometheus text of the gateway metrics (pdserve_gateway_*, pdserve_slo_*).
  std::string metrics_text() const { return metrics_.text(); }
  RateLimiter& limiter() { return limiter_; }

 private:
  friend class RequestLease;
  const ClassPolicy& policy(const Principal& who, SloClass c) const;

  Clock clock_;
  std::string path_;
  bool open_;
  mutable std::mutex mu_;
  std::shared_ptr<const AuthConfig> config_;
  const AuthConfig defaults_{};
  RateLimiter limiter_;
  std::array<std::atomic<int>, kNumSloClasses> queued_{};
  GatewayMetrics metrics_;
};

}  // namespace pdserve::gateway
