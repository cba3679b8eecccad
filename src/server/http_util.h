// Writing JSON bodies and API errors into httplib responses.
#pragma once

#include <httplib.h>

#include "server/api_error.h"
#include "server/json_util.h"

namespace pdserve::server {

/// Sets `status` and a JSON body (application/json).
void send_json(httplib::Response& res, int status, const json& body);
/// Sets the error's status and its OpenAI-style body.
void send_error(httplib::Response& res, const ApiError& err);

}  // namespace pdserve::server
