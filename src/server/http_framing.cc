#include "server/http_framing.h"

#include <cstdlib>
#include <cstring>
#include <strings.h>

namespace pdserve::server {
namespace {

/// RFC 9110 §5.6.2 tchar.
bool is_tchar(unsigned char c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
  return c != 0 && std::strchr("!#$%&'*+-.^_`|~", c) != nullptr;
}

bool is_token(const std::string& s) {
  if (s.empty()) return false;
  for (unsigned char c : s)
    if (!is_tchar(c)) return false;
  return true;
}

std::string trimmed(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

ApiError framing(int status, std::string message, std::string code) {
  return ApiError{status, std::move(message), "invalid_request_error", std::nullopt, std::move(code)};
}

}  // namespace

bool method_body_is_read(const std::string& method) {
  return method == "POST" || method == "PUT" || method == "PATCH" || method == "DELETE" || method == "PRI";
}

bool announces_body(const httplib::Request& req) {
  return req.get_header_value("Content-Length").find_first_not_of('0') != std::string::npos || req.has_header("Transfer-Encoding");
}

std::optional<ApiError> framing_error(const httplib::Request& req, size_t max_body_bytes) {
  for (const auto& [name, value] : req.headers)
    if (!is_token(name))
      return bad_request("The request has a malformed header field name: '" + name +
                         "' (a name is a token: no white space before the colon, RFC 9112 §5.1).");
  // RFC 9112 §3.2: an HTTP/1.1 request has exactly one Host (a server MUST answer 400).
  if (const size_t n_host = req.get_header_value_count("Host"); req.version == "HTTP/1.1" && n_host != 1)
    return bad_request(n_host == 0 ? "The HTTP/1.1 request has no Host header." : "The request has more than one Host header.");
  // RFC 9110 §8.4: a content coding the server cannot decode gets 415. httplib decodes exactly
  // "gzip" and "deflate" (zlib) and would hand any other coding's bytes on as they are.
  if (const size_t n_ce = req.get_header_value_count("Content-Encoding"); n_ce > 0 && announces_body(req)) {
    const std::string ce = trimmed(req.get_header_value("Content-Encoding"));
    if (n_ce > 1 || (ce != "gzip" && ce != "deflate" && ce != "identity")) {
      const bool other_case = strcasecmp(ce.c_str(), "gzip") == 0 || strcasecmp(ce.c_str(), "deflate") == 0 ||
                              strcasecmp(ce.c_str(), "identity") == 0;
      return framing(415, "The request's Content-Encoding '" + ce + (n_ce > 1 ? "' (sent more than once)" : "'") +
                              " is not supported: send the body as it is, or coded with gzip or deflate" +
                              (other_case ? " (named in lower case: the decoder takes only that spelling)." : "."),
                     "unsupported_content_encoding");
    }
  }
  const size_t n_len = req.get_header_value_count("Content-Length");
  const size_t n_te = req.get_header_value_count("Transfer-Encoding");
  if (n_te > 0) {
    if (n_len > 0) return bad_request("The request has both Transfer-Encoding and Content-Length.");
    const std::string te = trimmed(req.get_header_value("Transfer-Encoding"));
    if (n_te > 1 || strcasecmp(te.c_str(), "chunked") != 0)
      return framing(501, "The request's Transfer-Encoding '" + te + (n_te > 1 ? "' (sent more than once)" : "'") +
                              " is not supported: only a single 'chunked' is.",
                     "unsupported_transfer_encoding");
    return std::nullopt;
  }
  if (n_len == 0) {
    if (!method_body_is_read(req.method)) return std::nullopt;
    return framing(411, "The " + req.method + " request has neither Content-Length nor Transfer-Encoding: chunked, so "
                       "where its body ends is not known (send Content-Length: 0 for an empty body).",
                   "length_required");
  }
  const std::string len = req.get_header_value("Content-Length");
  if (n_len > 1) return bad_request("The request has more than one Content-Length header.");
  if (len.empty() || len.find_first_not_of("0123456789") != std::string::npos)
    return bad_request("The request's Content-Length is not a decimal number: '" + len + "'.");
  if (std::strtoull(len.c_str(), nullptr, 10) > max_body_bytes)  // saturates: too long is too large
    return body_too_large(max_body_bytes);
  return std::nullopt;
}

}  // namespace pdserve::server
