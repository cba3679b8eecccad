// Server-sent events framing for streaming responses (OpenAI style: data lines only).
#pragma once

#include <string>

#include "server/json_util.h"

namespace pdserve::server {

inline constexpr const char* kSseContentType = "text/event-stream";

/// "data: {json}\n\n".
std::string sse_data(const json& j);
/// "data: [DONE]\n\n" — the end of every stream.
std::string sse_done();
/// ": <text>\n\n" — a comment line, ignored by clients; used as a keep-alive.
std::string sse_comment(const std::string& text);

}  // namespace pdserve::server
