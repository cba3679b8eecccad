// Request framing checks made before httplib reads a request's body (RFC 9112 §6): where the
// body ends must be known and unambiguous, or the bytes after it could be read as another
// request (request smuggling). httplib 0.11 reads a body only for POST, PUT, PATCH, DELETE
// and PRI, by Content-Length, else by chunked Transfer-Encoding, else to the end of the
// connection; the checks here refuse what it would misread.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include <httplib.h>

#include "server/api_error.h"

namespace pdserve::server {

/// Whether httplib 0.11 reads a request body for `method` (its detail::expect_content).
bool method_body_is_read(const std::string& method);

/// Whether the request says a body follows: a Content-Length other than 0 or any
/// Transfer-Encoding.
bool announces_body(const httplib::Request& req);

/// The error for a request whose body cannot be framed, before the body is read, or none:
/// - 400: an HTTP/1.1 request without exactly one Host (RFC 9112 §3.2); a header field name
///   that is not a token (e.g. "Content-Length :", RFC 9112 §5.1);
///   a Content-Length that is not one run of digits, sent twice, or beside Transfer-Encoding
///   (§6.3);
/// - 501: a Transfer-Encoding other than one "chunked" (§6.1: a coding not understood);
/// - 411: a method whose body httplib reads (POST, ...) with neither header: it would read to
///   the end of the connection, taking any pipelined request as body;
/// - 413: a Content-Length over `max_body_bytes`;
/// - 415: a body whose Content-Encoding is other than one "gzip", "deflate" or "identity"
///   (RFC 9110 §8.4; httplib would pass another coding's bytes on undecoded).
/// Every one of them closes the connection after the response (the caller's part).
std::optional<ApiError> framing_error(const httplib::Request& req, size_t max_body_bytes);

}  // namespace pdserve::server
