// The gateway (src/gateway) over HTTP: its refusals as OpenAI-style errors (401, 404
// model_not_found, 400, 429 rate_limit_exceeded, 503 server_overloaded, with Retry-After)
// and the x-ratelimit-* headers of every response to a key with limits.
#pragma once

#include <httplib.h>

#include "gateway/gateway.h"
#include "server/api_error.h"

namespace pdserve::server {

/// The API error for a gateway refusal; sets Retry-After on `res` when the refusal has one.
ApiError refusal_error(const gateway::Refusal& r, httplib::Response& res);
/// Sets OpenAI's x-ratelimit-{limit,remaining,reset}-{requests,tokens} headers for the
/// limits `s` has (none for a key without limits).
void set_rate_limit_headers(httplib::Response& res, const gateway::RateLimitState& s);
/// 503 server_overloaded (a class's queue full or its maximum queue time passed).
ApiError overloaded(std::string message);

}  // namespace pdserve::server
