#include "gateway/rate_limiter.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "base/clock.h"

namespace pdserve::gateway {

Clock steady_clock_seconds() {
  return [] { return now_seconds(); };
}

void TokenBucket::set_capacity(double capacity, double now) {
  refill(now);
  capacity_ = capacity;
  level_ = std::min(level_, capacity_);
}

void TokenBucket::refill(double now) {
  if (now > last_) {
    level_ = std::min(capacity_, level_ + (now - last_) * rate());
    last_ = now;
  }
}

void TokenBucket::give(double n) { level_ = std::min(capacity_, level_ + n); }

double TokenBucket::seconds_until(double n) const {
  if (level_ >= n) return 0;
  const double r = rate();
  return r > 0 ? (n - level_) / r : 0;
}

RateLimiter::Entry& RateLimiter::entry(const std::string& id, const Limits& l, double now) {
  Entry& e = entries_[id];
  if (!e.init) {
    e.requests = TokenBucket(l.requests_per_minute, now);
    e.tokens = TokenBucket(l.tokens_per_minute, now);
    e.init = true;
  } else {
    if (e.requests.capacity() != l.requests_per_minute) e.requests.set_capacity(l.requests_per_minute, now);
    if (e.tokens.capacity() != l.tokens_per_minute) e.tokens.set_capacity(l.tokens_per_minute, now);
  }
  e.limits = l;
  e.requests.refill(now);
  e.tokens.refill(now);
  return e;
}

RateLimitState RateLimiter::state_of(const Entry* key, const Entry* tenant) const {
  RateLimitState s;
  for (const Entry* e : {key, tenant}) {
    if (!e) continue;
    if (e->limits.requests_per_minute > 0) {
      const int64_t rem = static_cast<int64_t>(std::floor(std::max(0.0, e->requests.level())));
      if (!s.has_requests || rem < s.remaining_requests) {
        s.has_requests = true;
        s.limit_requests = static_cast<int64_t>(e->limits.requests_per_minute);
        s.remaining_requests = rem;
        s.reset_requests_s = e->requests.seconds_until_full();
      }
    }
    if (e->limits.tokens_per_minute > 0) {
      const int64_t rem = static_cast<int64_t>(std::floor(std::max(0.0, e->tokens.level())));
      if (!s.has_tokens || rem < s.remaining_tokens) {
        s.has_tokens = true;
        s.limit_tokens = static_cast<int64_t>(e->limits.tokens_per_minute);
        s.remaining_tokens = rem;
        s.reset_tokens_s = e->tokens.seconds_until_full();
      }
    }
  }
  return s;
}

RateDecision RateLimiter::acquire(const std::string& key_id, const Limits& key_limits, const std::string& tenant_id,
                                  const Limits& tenant_limits, double tokens, RateTicket* ticket) {
  std::lock_guard<std::mutex> lk(mu_);
  const double now = clock_();
  Entry* k = key_limits.any() ? &entry(key_id, key_limits, now) : nullptr;
  Entry* t = tenant_limits.any() ? &entry(tenant_id, tenant_limits, now) : nullptr;
  RateDecision d;
  // The first limit that refuses decides; the retry time is the longest wait among the
  // limits that refuse (the request needs all of them).
  auto refuse = [&](const char* reason, const char* scope, double limit, double retry) {
    if (d.allowed) {
      d.allowed = false;
      d.reason = reason;
      d.scope = scope;
      d.limit = limit;
    }
    d.retry_after_s = std::max(d.retry_after_s, retry);
  };
  for (auto [e, scope] : {std::pair{k, "key"}, std::pair{t, "tenant"}}) {
    if (!e) continue;
    const Limits& l = e->limits;
    if (l.max_concurrent > 0 && e->concurrent >= l.max_concurrent) refuse("concurrency", scope, l.max_concurrent, 1);
    if (l.requests_per_minute > 0 && e->requests.level() < 1)
      refuse("requests", scope, l.requests_per_minute, e->requests.seconds_until(1));
    if (l.tokens_per_minute > 0) {
      if (tokens > l.tokens_per_minute)
        refuse("request_too_large", scope, l.tokens_per_minute, 0);
      else if (e->tokens.level() < tokens)
        refuse("tokens", scope, l.tokens_per_minute, e->tokens.seconds_until(tokens));
    }
  }
  if (d.allowed) {
    for (Entry* e : {k, t}) {
      if (!e) continue;
      if (e->limits.requests_per_minute > 0) e->requests.take(1);
      if (e->limits.tokens_per_minute > 0) e->tokens.take(tokens);
      e->concurrent++;
    }
    if (ticket) *ticket = RateTicket{k ? key_id : std::string(), t ? tenant_id : std::string(), tokens};
  }
  d.state = state_of(k, t);
  return d;
}

void RateLimiter::release(const RateTicket& tk, double used_tokens) {
  std::lock_guard<std::mutex> lk(mu_);
  const double now = clock_();
  for (const std::string* id : {&tk.key_id, &tk.tenant_id}) {
    if (id->empty()) continue;
    auto it = entries_.find(*id);
    if (it == entries_.end()) continue;
    Entry& e = it->second;
    e.concurrent = std::max(0, e.concurrent - 1);
    e.tokens.refill(now);
    if (e.limits.tokens_per_minute > 0 && used_tokens < tk.tokens) e.tokens.give(tk.tokens - used_tokens);
    // More used than estimated (cannot happen with max_tokens set): charge the rest.
    if (e.limits.tokens_per_minute > 0 && used_tokens > tk.tokens) e.tokens.take(used_tokens - tk.tokens);
  }
}

RateLimitState RateLimiter::peek(const std::string& key_id, const Limits& key_limits, const std::string& tenant_id,
                                 const Limits& tenant_limits) {
  std::lock_guard<std::mutex> lk(mu_);
  const double now = clock_();
  Entry* k = key_limits.any() ? &entry(key_id, key_limits, now) : nullptr;
  Entry* t = tenant_limits.any() ? &entry(tenant_id, tenant_limits, now) : nullptr;
  return state_of(k, t);
}

int RateLimiter::concurrent(const std::string& id) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = entries_.find(id);
  return it == entries_.end() ? 0 : it->second.concurrent;
}

std::string format_reset(double seconds) {
  char buf[64];
  if (seconds <= 0) return "0s";
  if (seconds < 1) {
    std::snprintf(buf, sizeof buf, "%dms", static_cast<int>(std::ceil(seconds * 1000)));
    return buf;
  }
  const int64_t minutes = static_cast<int64_t>(seconds / 60);
  const double rest = seconds - 60.0 * static_cast<double>(minutes);
  std::string s;
  if (minutes > 0) s = std::to_string(minutes) + "m";
  std::snprintf(buf, sizeof buf, "%.3f", rest);
  std::string r = buf;
  while (!r.empty() && r.back() == '0') r.pop_back();
  if (!r.empty() && r.back() == '.') r.pop_back();
  return s + r + "s";
}

}  // namespace pdserve::gateway
