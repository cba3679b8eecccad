#include "server/gateway_http.h"

#include <cmath>

namespace pdserve::server {

ApiError overloaded(std::string message) {
  return ApiError{503, std::move(message), "server_error", std::nullopt, std::string("server_overloaded")};
}

ApiError refusal_error(const gateway::Refusal& r, httplib::Response& res) {
  using K = gateway::Refusal::Kind;
  if (r.retry_after_s > 0)
    res.set_header("Retry-After", std::to_string(std::max<int64_t>(1, static_cast<int64_t>(std::ceil(r.retry_after_s)))));
  switch (r.kind) {
    case K::kUnauthorized: return unauthorized(r.message);
    case K::kModelNotFound: return model_not_found(r.message);
    case K::kBadClass: return bad_request(r.message, std::string("slo_class"));
    case K::kRateLimited:
      // OpenAI: type "requests" / "tokens", code "rate_limit_exceeded".
      return ApiError{429, r.message, r.reason == "requests" || r.reason == "concurrency" ? "requests" : "tokens",
                      std::nullopt, std::string("rate_limit_exceeded")};
    case K::kOverloaded: return overloaded(r.message);
  }
  return server_error(r.message);
}

void set_rate_limit_headers(httplib::Response& res, const gateway::RateLimitState& s) {
  if (s.has_requests) {
    res.set_header("x-ratelimit-limit-requests", std::to_string(s.limit_requests));
    res.set_header("x-ratelimit-remaining-requests", std::to_string(s.remaining_requests));
    res.set_header("x-ratelimit-reset-requests", gateway::format_reset(s.reset_requests_s));
  }
  if (s.has_tokens) {
    res.set_header("x-ratelimit-limit-tokens", std::to_string(s.limit_tokens));
    res.set_header("x-ratelimit-remaining-tokens", std::to_string(s.remaining_tokens));
    res.set_header("x-ratelimit-reset-tokens", gateway::format_reset(s.reset_tokens_s));
  }
}

}  // namespace pdserve::server
