// OpenAI-style API errors: an HTTP status plus the `{"error": {...}}` body.
#pragma once

#include <optional>
#include <string>

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
/// 401 for a missing or wrong API key (code "invalid_api_key").
ApiError unauthorized(std::string message);
/// An unknown model (param "model", code "model_not_found"): 400 when a generation request
/// names it (a bad request field), 404 for GET /v1/models/{id} (a missing resource).
ApiError model_not_found(const std::string& model, int status);
/// 404 for an unknown route.
ApiError route_not_found(const std::string& method, const std::string& path);
/// 405 for a known route called with the wrong method.
ApiError method_not_allowed(const std::string& method, const std::string& path);
/// 500 server_error (an engine failure or a bug).
ApiError server_error(std::string message);
/// 503 server_error (shutting down / overloaded).
ApiError unavailable(std::string message);

}  // namespace pdserve::server
