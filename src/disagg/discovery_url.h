// Where a role finds its peers: `--discovery etcd://HOST:PORT[/PREFIX]` (workers register
// under PREFIX/ROLE/ADDRESS with a lease; routers and decode workers watch the prefix) or
// `--discovery dns://NAME:PORT` (every A record of NAME, re-resolved — a Kubernetes
// headless Service).
#pragma once

#include <string>

#include "base/status.h"

namespace pdserve::disagg {

struct DiscoveryUrl {
  enum class Kind { None, Etcd, Dns };
  Kind kind = Kind::None;
  std::string host;                // etcd host, or the DNS name
  int port = 0;                    // etcd client port, or the peers' gRPC port (dns)
  std::string prefix = "/pdserve"; // etcd key prefix (no trailing '/')
  std::string text;                // as given
};

/// Parses "etcd://HOST:PORT[/PREFIX]" or "dns://NAME:PORT"; "" ⇒ Kind::None. Errors
/// (InvalidArgument, one line): another scheme, a missing or non-numeric port, an empty host.
Result<DiscoveryUrl> parse_discovery_url(const std::string& url);

}  // namespace pdserve::disagg
