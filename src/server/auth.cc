#include "server/auth.h"

#include <cctype>

namespace pdserve::server {
namespace {

bool constant_time_equal(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const std::string& ref = a.size() == b.size() ? b : a;  // always scan |a| bytes
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ ref[i]);
  }
  return diff == 0;
}

}  // namespace

std::optional<ApiError> check_api_key(const std::string& api_key,
                                      const std::string& authorization_header) {
  if (api_key.empty()) return std::nullopt;
  const std::string& h = authorization_header;
  if (h.empty()) {
    return unauthorized(
        "You didn't provide an API key. You need to provide your API key in an Authorization "
        "header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).");
  }
  static const std::string kScheme = "bearer";
  bool scheme_ok = h.size() > kScheme.size();
  for (size_t i = 0; scheme_ok && i < kScheme.size(); ++i) {
    scheme_ok = std::tolower(static_cast<unsigned char>(h[i])) == kScheme[i];
  }
  if (scheme_ok) scheme_ok = h[kScheme.size()] == ' ';
  if (scheme_ok) {
    size_t start = kScheme.size();
    while (start < h.size() && h[start] == ' ') ++start;
    size_t end = h.size();
    while (end > start && (h[end - 1] == ' ' || h[end - 1] == '\t')) --end;
    if (constant_time_equal(h.substr(start, end - start), api_key)) return std::nullopt;
  }
  return unauthorized("Incorrect API key provided.");
}

bool path_requires_auth(const std::string& path) {
  return path.rfind("/v1/", 0) == 0 || path == "/apply-template" || path == "/tokenize" || path == "/detokenize";
}

}  // namespace pdserve::server
