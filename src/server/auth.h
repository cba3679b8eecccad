// API-key check for `--api-key`: `Authorization: Bearer KEY` on /v1/* routes.
#pragma once

#include <optional>
#include <string>

#include "server/api_error.h"

namespace pdserve::server {

/// nullopt when `authorization_header` carries `Bearer <api_key>` (or `api_key` is empty);
/// otherwise the 401 error to send. The comparison takes the same time for any wrong key
/// of a given length.
std::optional<ApiError> check_api_key(const std::string& api_key,
                                      const std::string& authorization_header);

/// True for paths that need the key when one is configured (/v1/..., /apply-template,
/// /tokenize, /detokenize).
bool path_requires_auth(const std::string& path);

}  // namespace pdserve::server
