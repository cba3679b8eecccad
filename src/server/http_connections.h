// Connection handling in front of cpp-httplib's request processing, so that slow or
// numerous clients cannot hold the HTTP threads (the slowloris class of attacks):
//   * an epoll reactor thread owns every connection that has not sent a complete request
//     head (request line + headers, found with MSG_PEEK, nothing consumed): it enforces a
//     header timeout (408), a head size limit (431) and the keep-alive idle timeout;
//   * only a connection whose head has fully arrived goes to one of `http_threads` worker
//     threads, which run httplib's own parser and router on it (Server::process_request
//     over our Stream) and hand it back to the reactor between keep-alive requests;
//   * a client address may hold at most `max_connections_per_client` connections at once
//     (more are answered 429 and closed at once);
//   * a worker's Stream reports the connection not writable once the peer hung up, so a
//     streaming response notices a client that left while nothing was being written.
// The same design as nginx's (client_header_timeout, keepalive_timeout, limit_conn).
#pragma once

#include <httplib.h>

#include <cstddef>
#include <memory>

namespace pdserve::server {

struct ConnectionLimits {
  int http_threads = 256;                // requests processed at once
  double header_timeout_s = 10;          // a request head must arrive within this (408)
  double idle_timeout_s = 5;             // keep-alive: silence allowed between requests
  double read_timeout_s = 30;            // a request's body must arrive within this
  double write_timeout_s = 300;          // one blocked write (a slow reader)
  int max_connections_per_client = 256;  // per remote IP address (429 beyond)
  size_t max_header_bytes = 32 * 1024;   // request line + headers (431 beyond)
  size_t keep_alive_max_count = 1000;    // requests per connection
};

/// Marks the connection of the request being processed on this thread to be closed after
/// its response (e.g. a body that is refused unread), and says so in `res`'s Connection
/// header. No-op (but the header) outside a worker thread.
void close_connection_after_response(httplib::Response& res);

/// Gives `res` a body that `provider` writes as it is produced: chunked for HTTP/1.1; for an
/// HTTP/1.0 request, which may not be answered chunked (RFC 9112 §6.1), the bytes as they are,
/// ended by closing the connection (close_connection_after_response).
void set_streamed_content(const httplib::Request& req, httplib::Response& res, const char* content_type,
                          httplib::ContentProviderWithoutLength provider);

/// True when the client of the request being processed on this thread has hung up
/// (checked without waiting); false outside a worker thread.
bool client_disconnected();

/// An httplib::Server whose connections are handled as described above. Use it exactly
/// like httplib::Server (routes, handlers, bind, listen_after_bind, stop); do not set
/// new_task_queue.
class GuardedServer : public httplib::Server {
 public:
  explicit GuardedServer(ConnectionLimits limits);
  ~GuardedServer() override;

  class Manager;  // the reactor and the workers (http_connections.cc)

 private:
  bool process_and_close_socket(socket_t sock) override;
  friend class Manager;
  /// One request on `strm` through httplib (parse, route, respond).
  bool process_one(httplib::Stream& strm, bool close_connection, bool& connection_closed);

  ConnectionLimits limits_;
  std::unique_ptr<Manager> manager_;
};

}  // namespace pdserve::server
