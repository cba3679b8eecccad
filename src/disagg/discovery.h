// Service discovery for the cluster roles (issue #16):
//  * Registration: a worker's entry PREFIX/ROLE/ADDRESS = JSON {role, address, model, kv,
//    load} under an etcd lease of --discovery-ttl seconds, kept alive (and the value
//    refreshed) every TTL/3; an unreachable etcd is retried with exponential backoff and
//    logged; deregister() revokes the lease so watchers drop the worker at once.
//  * PeerWatcher: the live peers of one role — etcd: a range of PREFIX/ROLE/ then a watch
//    from the next revision (re-listed when the watch breaks); dns: every A record of the
//    name (getaddrinfo), re-resolved every second. Calls on_change with the full set
//    whenever it changes.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "disagg/discovery_url.h"

namespace pdserve::disagg {

/// One discovered peer: its gRPC address and the JSON it registered ("" for dns).
struct PeerInfo {
  std::string address;
  std::string value;
  bool operator==(const PeerInfo& o) const { return address == o.address && value == o.value; }
};

/// The etcd key of a worker: PREFIX/ROLE/ADDRESS.
std::string discovery_key(const DiscoveryUrl& url, const std::string& role, const std::string& address);

class Registration {
 public:
  /// `value()` renders the entry's JSON (called at every refresh). Does nothing for a dns
  /// or empty URL. Starts its thread at once.
  Registration(DiscoveryUrl url, std::string role, std::string address, int ttl_s, std::function<std::string()> value);
  ~Registration();
  Registration(const Registration&) = delete;
  Registration& operator=(const Registration&) = delete;

  /// Stops refreshing and revokes the lease (best effort, bounded by the etcd timeout).
  void deregister();
  /// True once the entry has been written at least once.
  bool registered() const { return registered_.load(); }

 private:
  void loop();

  DiscoveryUrl url_;
  std::string role_, address_, key_;
  int ttl_s_;
  std::function<std::string()> value_;
  std::atomic<bool> registered_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  int64_t lease_ = 0;  // guarded by mu_
  std::thread thread_;
};

class PeerWatcher {
 public:
  using OnChange = std::function<void(const std::vector<PeerInfo>&)>;
  /// Watches the peers of `role` (etcd) or the name's addresses (dns). on_change runs on
  /// the watcher's thread. Starts at once.
  PeerWatcher(DiscoveryUrl url, std::string role, OnChange on_change);
  ~PeerWatcher();
  PeerWatcher(const PeerWatcher&) = delete;
  PeerWatcher& operator=(const PeerWatcher&) = delete;

  void stop();

 private:
  void etcd_loop();
  void dns_loop();
  void publish(const std::map<std::string, std::string>& peers);
  /// Sleeps `ms` unless stopped; false when stopped.
  bool pause(int ms);

  DiscoveryUrl url_;
  std::string role_, prefix_;
  OnChange on_change_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<PeerInfo> last_;
  bool published_ = false;
  std::thread thread_;
};

/// All IPv4 addresses of `name` as "A.B.C.D:port", sorted (getaddrinfo); error when it
/// does not resolve.
Result<std::vector<std::string>> resolve_all(const std::string& name, int port);

}  // namespace pdserve::disagg
