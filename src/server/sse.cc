#include "server/sse.h"

namespace pdserve::server {

std::string sse_data(const json& j) { return "data: " + dump_json(j) + "\n\n"; }

std::string sse_done() { return "data: [DONE]\n\n"; }

std::string sse_comment(const std::string& text) { return ": " + text + "\n\n"; }

}  // namespace pdserve::server
