// Test helper: picking loopback ports for child processes, and telling from a child's
// output that it lost the race for one (another process bound the port between the pick
// and the child's bind — the caller then picks again).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

namespace pdserve::testing {

/// A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0, read it, close);
/// -1 when no socket could be bound.
inline int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    socklen_t len = sizeof(addr);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

/// True when a pdserve child's `output` says it could not listen on its port (HTTP or
/// gRPC), i.e. the port was taken after free_port() picked it.
inline bool lost_port_race(const std::string& output) {
  for (const char* s : {"Address already in use", "could not listen", "cannot listen"})
    if (output.find(s) != std::string::npos) return true;
  return false;
}

}  // namespace pdserve::testing
