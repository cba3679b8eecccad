// OpenAI-style API errors: an HTTP status plus the `{"error": {...}}` body.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "base/status.h"
#include "server/json_util.h"

namespace pdserve::server {

/// One API error. Rendered as
/// {"error": {"message": ..., "type": ..., "param": <string|null>, "code": <string|null>}}.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::optional<std::string> param;
  std::optional<std::string> code;

  json to_json() const;
  std::string body() const { return dump_json(to_json()); }
};

/// 400 invalid_request_error.
ApiError bad_request(std::string message, std::optional<std::string> param = std::nullopt,
                     std::optional<std::string> code = std::nullopt);
/// 413 request_too_large: a body over the server's --max-body-bytes `limit` (bytes).
ApiError body_too_large(size_t limit);
/// 401 for a missing or wrong API key (code "invalid_api_key").
ApiError unauthorized(std::string message);
/// An unknown model (param "model", code "model_not_found"): 404, as OpenAI's API answers a
/// generation request naming it and GET /v1/models/{id}.
ApiError model_not_found(const std::string& model);
/// 404 for an unknown route.
ApiError route_not_found(const std::string& method, const std::string& path);
/// 405 for a known route called with the wrong method.
ApiError method_not_allowed(const std::string& method, const std::string& path);
/// 500 server_error (an engine failure or a bug).
ApiError server_error(std::string message);
/// 503 server_error (shutting down / overloaded).
ApiError unavailable(std::string message);
/// 503: a running request aborted because the server is shutting down (its body, or a
/// stream's last event).
ApiError aborted_by_shutdown();
/// 400 (code "client_closed_request", nginx's 499 by name) for a request aborted because its
/// client closed its side of the connection: a half-closed client may still read this (a gone
/// one never will); not a 503, which would invite a retry of what the client ended.
ApiError aborted_by_client();

/// The HTTP status for a failed Status of code `c` (the one code → HTTP mapping):
///   InvalidArgument, FailedPrecondition → 400; ResourceExhausted → 400 too (a request
///   larger than the whole KV pool: a retry fails the same way, so not 429);
///   NotFound → 404; RateLimited → 429 (a retry after others finish may succeed); Unavailable, Cancelled → 503 (shutting down, no healthy worker, an
///   aborted request: clients retry those); DeadlineExceeded → 504; DataLoss, Internal → 500.
int http_status(StatusCode c);
/// The OpenAI error type for code `c`: "requests" for RateLimited (OpenAI's 429 type),
/// "invalid_request_error" for the other 4xx codes above, "server_error" for the 5xx ones.
const char* openai_error_type(StatusCode c);
/// The API error for a failed Status: its message, http_status() and openai_error_type();
/// `param` (the request field at fault) is kept only for 4xx errors.
ApiError api_error(const Status& s, std::optional<std::string> param = std::nullopt);

}  // namespace pdserve::server
