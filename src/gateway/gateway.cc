#include "gateway/gateway.h"

#include <algorithm>
#include <cctype>

#include "base/log.h"

namespace pdserve::gateway {
namespace {

/// The token of `Bearer TOKEN` (scheme case-insensitive), or nullopt.
std::optional<std::string> bearer_token(const std::string& h) {
  static const std::string kScheme = "bearer";
  if (h.size() <= kScheme.size() || h[kScheme.size()] != ' ') return std::nullopt;
  for (size_t i = 0; i < kScheme.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(h[i])) != kScheme[i]) return std::nullopt;
  size_t start = kScheme.size();
  while (start < h.size() && h[start] == ' ') ++start;
  size_t end = h.size();
  while (end > start && (h[end - 1] == ' ' || h[end - 1] == '\t')) --end;
  return h.substr(start, end - start);
}

}  // namespace

Gateway::Gateway(Clock clock) : clock_(clock), open_(true), limiter_(clock) {}

Gateway::Gateway(std::shared_ptr<const AuthConfig> config, std::string path, Clock clock)
    : clock_(clock), path_(std::move(path)), open_(false), config_(std::move(config)), limiter_(clock) {}

std::shared_ptr<const AuthConfig> Gateway::config() const {
  std::lock_guard<std::mutex> lk(mu_);
  return config_;
}

Result<Principal> Gateway::authenticate(const std::string& authorization_header) {
  Principal p;
  p.config = config();
  if (!p.config) return p;
  if (authorization_header.empty())
    return Status::InvalidArgument(
        "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer "
        "auth (i.e. Authorization: Bearer YOUR_KEY).");
  const auto token = bearer_token(authorization_header);
  // Hash even a malformed header, and compare against every key without stopping at a
  // match: the time taken does not depend on which key (if any) matches.
  const pdserve::Sha256Digest h = pdserve::sha256(token ? *token : authorization_header);
  const KeyConfig* found = nullptr;
  for (const KeyConfig& k : p.config->keys) {
    uint8_t diff = 0;
    for (size_t i = 0; i < h.size(); ++i) diff |= static_cast<uint8_t>(h[i] ^ k.hash[i]);
    const bool match = (diff == 0) & token.has_value();
    if (match && !found) found = &k;
  }
  if (!found) {
    metrics_.refused("invalid_key");
    return Status::InvalidArgument("Incorrect API key provided.");
  }
  p.key = found;
  p.tenant = &p.config->tenants.at(found->tenant);
  return p;
}

const ClassPolicy& Gateway::policy(const Principal& who, SloClass c) const {
  const AuthConfig& cfg = who.config ? *who.config : defaults_;
  return cfg.policy(c);
}

std::variant<std::shared_ptr<RequestLease>, Refusal> Gateway::admit(const Principal& who, const std::string& model,
                                                                   std::optional<SloClass> requested, double tokens,
                                                                   RateLimitState* state) {
  using K = Refusal::Kind;
  if (state) *state = peek(who);
  if (who.key && !who.key->allows_model(model)) {
    metrics_.refused("model_not_allowed");
    return Refusal{K::kModelNotFound, model, "model_not_allowed", 0};
  }
  SloClass cls = who.key ? who.key->slo_class : SloClass::kNone;
  if (requested) {
    if (who.key && !who.key->allows_class(*requested)) {
      metrics_.refused("class_not_allowed");
      return Refusal{K::kBadClass,
                     std::string("This API key may not use slo_class '") + slo_class_name(*requested) + "'.",
                     "class_not_allowed", 0};
    }
    cls = *requested;
  }
  auto lease = std::shared_ptr<RequestLease>(new RequestLease(*this));
  lease->who_ = who;
  lease->cls_ = cls;
  if (cls != SloClass::kNone) {
    lease->policy_ = policy(who, cls);
    // Queue bound: reserve a place first (exact under concurrency), give it back if full.
    std::atomic<int>& q = queued_[static_cast<size_t>(cls)];
    const int before = q.fetch_add(1);
    if (lease->policy_.max_queue > 0 && before >= lease->policy_.max_queue) {
      q.fetch_sub(1);
      metrics_.refused("queue_full");
      return Refusal{K::kOverloaded,
                     std::string("The server is overloaded: the ") + slo_class_name(cls) + " class queue is full (" +
                         std::to_string(lease->policy_.max_queue) + " requests). Please retry later.",
                     "queue_full", 1};
    }
    lease->queued_ = true;
  }
  if (who.key) {
    const Limits& tl = who.tenant->limits;
    RateDecision d = limiter_.acquire("key:" + who.key->hash_hex, who.key->limits, "tenant:" + who.tenant->name, tl,
                                      tokens, &lease->ticket_);
    if (state) *state = d.state;
    lease->state_ = d.state;
    if (!d.allowed) {
      lease->leave_queue();
      lease->finished_ = true;
      metrics_.refused("rate_limit_" + d.reason);
      std::string what = d.reason == "requests"      ? "requests per min (RPM)"
                         : d.reason == "tokens"      ? "tokens per min (TPM)"
                         : d.reason == "concurrency" ? "concurrent requests"
                                                     : "tokens per min (TPM)";
      std::string msg = "Rate limit reached for " + std::string(d.scope == "key" ? "API key" : "tenant") + " " +
                        (d.scope == "key" ? who.key->name : who.tenant->name) + " on " + what + ": Limit " +
                        std::to_string(static_cast<int64_t>(d.limit)) + ".";
      if (d.reason == "request_too_large")
        msg = "Request too large for tokens per min (TPM): Limit " + std::to_string(static_cast<int64_t>(d.limit)) +
              ", Requested " + std::to_string(static_cast<int64_t>(tokens)) + ". Lower max_tokens or the prompt.";
      else
        msg += " Please try again later.";
      return Refusal{K::kRateLimited, msg, d.reason, d.retry_after_s};
    }
    lease->has_ticket_ = true;
  }
  lease->start_ = clock_();
  metrics_.admitted(cls, who.tenant ? who.tenant->name : std::string());
  return lease;
}

RateLimitState Gateway::peek(const Principal& who) {
  if (!who.key) return {};
  return limiter_.peek("key:" + who.key->hash_hex, who.key->limits, "tenant:" + who.tenant->name, who.tenant->limits);
}

Status Gateway::reload() {
  if (path_.empty()) return Status::FailedPrecondition("no --auth-file to reload");
  auto cfg = load_auth_file(path_);
  if (!cfg.ok()) return cfg.status();
  std::lock_guard<std::mutex> lk(mu_);
  config_ = std::move(cfg.value());
  return Status::Ok();
}

// ---- RequestLease ----

RequestLease::~RequestLease() {
  if (!finished_) finish(ticket_.tokens);
}

void RequestLease::leave_queue() {
  if (!queued_) return;
  queued_ = false;
  g_.queued_[static_cast<size_t>(cls_)].fetch_sub(1);
}

void RequestLease::on_tokens(int completion_tokens, double now) {
  if (completion_tokens <= 0) return;
  if (first_token_ < 0) {
    first_token_ = now;
    leave_queue();
    g_.metrics_.first_token(cls_, now - start_);
  }
  last_token_ = now;
  tokens_ = completion_tokens;
}

void RequestLease::finish(double used_tokens) {
  if (finished_) return;
  finished_ = true;
  leave_queue();
  if (has_ticket_) g_.limiter_.release(ticket_, used_tokens);
  const double ttft = first_token_ >= 0 ? first_token_ - start_ : -1;
  const double tpot = tokens_ > 1 ? (last_token_ - first_token_) / (tokens_ - 1) : -1;
  g_.metrics_.finished(cls_, ttft, tpot, policy_.ttft_s, policy_.tpot_s);
}

std::string RequestLease::cache_salt(const std::string& request_salt) const {
  if (!who_.tenant) return request_salt;
  const std::string t = who_.tenant->cache_salt();
  return request_salt.empty() ? t : t + "/" + request_salt;
}

}  // namespace pdserve::gateway
