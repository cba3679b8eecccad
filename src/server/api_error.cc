#include "server/api_error.h"

#include <utility>

namespace pdserve::server {

json ApiError::to_json() const {
  json err = {{"message", message},
              {"type", type},
              {"param", param ? json(*param) : json(nullptr)},
              {"code", code ? json(*code) : json(nullptr)}};
  return json{{"error", std::move(err)}};
}

ApiError bad_request(std::string message, std::optional<std::string> param,
                     std::optional<std::string> code) {
  return ApiError{400, std::move(message), "invalid_request_error", std::move(param),
                  std::move(code)};
}

ApiError body_too_large(size_t limit) {
  return ApiError{413, "The request body is larger than the server's limit of " + std::to_string(limit) +
                           " bytes (--max-body-bytes).",
                  "invalid_request_error", std::nullopt, std::string("request_too_large")};
}

ApiError unauthorized(std::string message) {
  return ApiError{401, std::move(message), "invalid_request_error", std::nullopt,
                  std::string("invalid_api_key")};
}

ApiError model_not_found(const std::string& model) {
  return ApiError{404,
                  "The model '" + model + "' does not exist or you do not have access to it.",
                  "invalid_request_error", std::string("model"),
                  std::string("model_not_found")};
}

ApiError route_not_found(const std::string& method, const std::string& path) {
  return ApiError{404, "Invalid URL (" + method + " " + path + ")", "invalid_request_error",
                  std::nullopt, std::nullopt};
}

ApiError method_not_allowed(const std::string& method, const std::string& path) {
  return ApiError{405, "Method " + method + " is not allowed for " + path,
                  "invalid_request_error", std::nullopt, std::string("method_not_allowed")};
}

ApiError server_error(std::string message) {
  return ApiError{500, std::move(message), "server_error", std::nullopt, std::nullopt};
}

ApiError unavailable(std::string message) {
  return ApiError{503, std::move(message), "server_error", std::nullopt, std::nullopt};
}

ApiError aborted_by_shutdown() {
  return unavailable("The request was aborted because the server is shutting down.");
}

ApiError aborted_by_client() {
  return ApiError{400, "The request was aborted because the client closed its side of the connection.", "invalid_request_error",
                  std::nullopt, std::string("client_closed_request")};
}

int http_status(StatusCode c) {
  switch (c) {
    case StatusCode::Ok: return 200;
    case StatusCode::InvalidArgument:
    case StatusCode::FailedPrecondition:
    case StatusCode::ResourceExhausted: return 400;
    case StatusCode::NotFound: return 404;
    case StatusCode::RateLimited: return 429;
    case StatusCode::Unavailable:
    case StatusCode::Cancelled: return 503;
    case StatusCode::DeadlineExceeded: return 504;
    case StatusCode::DataLoss:
    case StatusCode::Internal: return 500;
  }
  return 500;
}

const char* openai_error_type(StatusCode c) {
  if (c == StatusCode::RateLimited) return "requests";  // OpenAI's 429 type for request limits
  return http_status(c) < 500 ? "invalid_request_error" : "server_error";
}

ApiError api_error(const Status& s, std::optional<std::string> param) {
  const int status = http_status(s.code());
  return ApiError{status, s.message(), openai_error_type(s.code()), status < 500 ? std::move(param) : std::nullopt,
                  std::nullopt};
}

}  // namespace pdserve::server
