// Test helper: a raw TCP client for HTTP tests that need what an HTTP library hides —
// hanging up mid-response, sending a request byte by byte, connecting from another
// loopback address (127.0.0.2, … are all local on Linux), or sending a Content-Length
// without the body.
//
//   pdserve::testing::RawConnection c(port);            // from 127.0.0.1
//   c.send("POST /v1/completions HTTP/1.1\r\n...");
//   std::string head = c.read_until("\r\n\r\n", std::chrono::seconds(5));
//   c.close();                                           // the client hangs up
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <string>

namespace pdserve::testing {

class RawConnection {
 public:
  /// Connects to 127.0.0.1:`port` from `source_ip` (any 127.x.y.z; "" = the kernel's
  /// choice). ok() tells whether it worked.
  explicit RawConnection(int port, const std::string& source_ip = "") {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) return;
    if (!source_ip.empty()) {
      sockaddr_in src{};
      src.sin_family = AF_INET;
      ::inet_pton(AF_INET, source_ip.c_str(), &src.sin_addr);
      if (::bind(fd_, reinterpret_cast<sockaddr*>(&src), sizeof(src)) != 0) {
        close();
        return;
      }
    }
    sockaddr_in dst{};
    dst.sin_family = AF_INET;
    dst.sin_port = htons(static_cast<uint16_t>(port));
    dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&dst), sizeof(dst)) != 0) {
      close();
      return;
    }
    ok_ = true;
  }
  ~RawConnection() { close(); }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  bool ok() const { return ok_ && fd_ >= 0; }

  /// Sends all of `data`; false when the connection is broken.
  bool send(const std::string& data) {
    size_t off = 0;
    while (fd_ >= 0 && off < data.size()) {
      const ssize_t n = ::send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return fd_ >= 0;
  }

  /// Closes the sending side (shutdown(SHUT_WR)): the peer reads end of stream, and what it
  /// answers can still be read.
  void shutdown_write() {
    if (fd_ >= 0) ::shutdown(fd_, SHUT_WR);
  }

  /// Reads until `marker` has arrived (returns everything read, marker included), the
  /// peer closes or `timeout` passes (returns what arrived so far).
  std::string read_until(const std::string& marker, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (fd_ >= 0 && received_.find(marker) == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        peer_closed_ = true;
        break;
      }
      received_.append(buf, static_cast<size_t>(n));
    }
    return received_;
  }

  /// Reads until the peer closes or `timeout` passes; returns everything read.
  std::string read_all(std::chrono::milliseconds timeout) {
    read_until(std::string("\0never\0", 7), timeout);
    return received_;
  }

  /// True once a read saw the peer close the connection.
  bool peer_closed() const { return peer_closed_; }

  /// Hangs up (the server sees EOF, then a reset on its next write).
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  bool ok_ = false;
  bool peer_closed_ = false;
  std::string received_;
};

/// An HTTP/1.1 POST of `body` to `path` with Content-Length (and keep-alive).
inline std::string http_post(const std::string& path, const std::string& body) {
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

/// One chunk of a chunked body (RFC 9112 §7.1): `data`'s size in hex, CRLF, `data`, CRLF.
inline std::string http_chunk(const std::string& data) {
  char size[20];
  std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
  return size + data + "\r\n";
}

/// How many HTTP/1.1 responses (status lines) `received` holds.
inline size_t http_responses(const std::string& received) {
  size_t n = 0;
  for (size_t at = received.find("HTTP/1.1 "); at != std::string::npos; at = received.find("HTTP/1.1 ", at + 1)) ++n;
  return n;
}

/// The status code of the HTTP response at the start of `response`, or -1.
inline int http_status(const std::string& response) {
  if (response.rfind("HTTP/1.", 0) != 0 || response.size() < 12) return -1;
  return std::atoi(response.substr(9, 3).c_str());
}

}  // namespace pdserve::testing
