// A small client of etcd's v3 API through its HTTP/JSON gateway (etcd ≥ 3.4: POST
// /v3/lease/grant, /v3/lease/keepalive, /v3/lease/revoke, /v3/kv/put, /v3/kv/range,
// /v3/watch; keys and values base64 in the JSON — https://etcd.io/docs/v3.4/dev-guide/api_grpc_gateway/).
// Blocking calls over libcurl, each bounded by a timeout; thread-safe (no shared state).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"

namespace pdserve::disagg {

struct EtcdKv {
  std::string key, value;
  int64_t mod_revision = 0;
  int64_t lease = 0;
};

/// One event of a watch: a put (new or changed key) or a delete (removed, or its lease expired).
struct EtcdEvent {
  bool is_delete = false;
  EtcdKv kv;
};

class EtcdClient {
 public:
  /// `host`:`port` is an etcd client URL's address (http).
  EtcdClient(std::string host, int port, int timeout_ms = 2000);
  const std::string& endpoint() const { return endpoint_; }

  /// A new lease of `ttl_s` seconds; its ID.
  Result<int64_t> grant(int ttl_s);
  /// Refreshes a lease; its remaining TTL in seconds (0: the lease is gone, e.g. expired).
  Result<int64_t> keepalive(int64_t lease);
  Status revoke(int64_t lease);
  /// Sets key = value (under `lease` when non-zero).
  Status put(const std::string& key, const std::string& value, int64_t lease = 0);
  /// Every key starting with `prefix`; `revision` gets the store's revision.
  Result<std::vector<EtcdKv>> range_prefix(const std::string& prefix, int64_t* revision);
  /// Streams the events of keys under `prefix` from `start_revision` to `on_events` until
  /// `stop` is set, `max_ms` pass (OK), or the stream breaks (the error).
  Status watch_prefix(const std::string& prefix, int64_t start_revision,
                      const std::function<void(const std::vector<EtcdEvent>&)>& on_events,
                      const std::atomic<bool>& stop, int max_ms);

 private:
  Result<std::string> post(const std::string& path, const std::string& body);

  std::string endpoint_;  // http://host:port
  int timeout_ms_;
};

/// RFC 4648 base64 (OpenSSL EVP_EncodeBlock / EVP_DecodeBlock).
std::string base64_encode(const std::string& s);
Result<std::string> base64_decode(const std::string& s);

}  // namespace pdserve::disagg
