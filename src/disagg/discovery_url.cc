#include "disagg/discovery_url.h"

#include <cctype>

namespace pdserve::disagg {

Result<DiscoveryUrl> parse_discovery_url(const std::string& url) {
  DiscoveryUrl out;
  out.text = url;
  if (url.empty()) return out;
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("--discovery '" + url + "': " + why +
                                   " (expected etcd://HOST:PORT[/PREFIX] or dns://NAME:PORT)");
  };
  std::string rest;
  if (url.rfind("etcd://", 0) == 0) {
    out.kind = DiscoveryUrl::Kind::Etcd;
    rest = url.substr(7);
  } else if (url.rfind("dns://", 0) == 0) {
    out.kind = DiscoveryUrl::Kind::Dns;
    rest = url.substr(6);
  } else {
    return bad("unknown scheme");
  }
  const size_t slash = rest.find('/');
  std::string hostport = rest.substr(0, slash);
  if (slash != std::string::npos) {
    if (out.kind == DiscoveryUrl::Kind::Dns) return bad("a dns:// URL has no path");
    std::string p = rest.substr(slash);
    while (p.size() > 1 && p.back() == '/') p.pop_back();
    if (p == "/") return bad("empty key prefix");
    out.prefix = p;
  }
  const size_t colon = hostport.rfind(':');
  if (colon == std::string::npos) return bad("no port");
  out.host = hostport.substr(0, colon);
  const std::string port = hostport.substr(colon + 1);
  if (out.host.empty()) return bad("empty host");
  if (port.empty() || port.size() > 5) return bad("bad port");
  for (char c : port)
    if (!std::isdigit(static_cast<unsigned char>(c))) return bad("non-numeric port");
  out.port = std::stoi(port);
  if (out.port < 1 || out.port > 65535) return bad("port out of range");
  for (char c : out.host)
    if (std::isspace(static_cast<unsigned char>(c))) return bad("space in host");
  return out;
}

}  // namespace pdserve::disagg
