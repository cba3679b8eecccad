#include "disagg/discovery.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <set>

#include "base/log.h"
#include "disagg/etcd_client.h"

namespace pdserve::disagg {

namespace {
constexpr int kBackoffStartMs = 200;
constexpr int kBackoffMaxMs = 5000;
constexpr int kDnsIntervalMs = 1000;
constexpr int kWatchRoundMs = 30000;  // a watch is re-listed at least this often
}  // namespace

std::string discovery_key(const DiscoveryUrl& url, const std::string& role, const std::string& address) {
  return url.prefix + "/" + role + "/" + address;
}

Registration::Registration(DiscoveryUrl url, std::string role, std::string address, int ttl_s,
                           std::function<std::string()> value)
    : url_(std::move(url)), role_(std::move(role)), address_(std::move(address)),
      key_(discovery_key(url_, role_, address_)), ttl_s_(std::max(1, ttl_s)), value_(std::move(value)) {
  if (url_.kind != DiscoveryUrl::Kind::Etcd) return;
  thread_ = std::thread([this] { loop(); });
}

Registration::~Registration() { deregister(); }

void Registration::loop() {
  EtcdClient etcd(url_.host, url_.port);
  int backoff = kBackoffStartMs;
  int64_t lease = 0;
  const int refresh_ms = std::max(300, ttl_s_ * 1000 / 3);
  std::unique_lock<std::mutex> lk(mu_);
  while (!stop_) {
    lk.unlock();
    Status s = Status::Ok();
    if (lease == 0) {
      auto g = etcd.grant(ttl_s_);
      if (g.ok()) lease = g.value();
      else s = g.status();
    } else {
      auto ka = etcd.keepalive(lease);
      if (!ka.ok()) s = ka.status();
      else if (ka.value() <= 0) {
        PDS_LOG_WARN("discovery: the lease of {} expired; registering again", key_);
        lease = 0;
        lk.lock();
        continue;
      }
    }
    if (s.ok()) s = etcd.put(key_, value_(), lease);
    lk.lock();
    if (s.ok()) {
      lease_ = lease;
      if (!registered_.exchange(true)) PDS_LOG_INFO("discovery: registered {} in etcd {} (lease TTL {} s)", key_, etcd.endpoint(), ttl_s_);
      backoff = kBackoffStartMs;
      cv_.wait_for(lk, std::chrono::milliseconds(refresh_ms), [&] { return stop_; });
    } else {
      PDS_LOG_WARN("discovery: etcd {} unreachable ({}); retrying in {} ms", etcd.endpoint(), s.message(), backoff);
      cv_.wait_for(lk, std::chrono::milliseconds(backoff), [&] { return stop_; });
      backoff = std::min(backoff * 2, kBackoffMaxMs);
    }
  }
}

void Registration::deregister() {
  int64_t lease;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stop_) return;
    stop_ = true;
    lease = lease_;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (lease != 0) {
    EtcdClient etcd(url_.host, url_.port, 1000);
    Status s = etcd.revoke(lease);
    if (s.ok()) PDS_LOG_INFO("discovery: deregistered {}", key_);
    else PDS_LOG_WARN("discovery: could not revoke the lease of {}: {}", key_, s.message());
  }
}

PeerWatcher::PeerWatcher(DiscoveryUrl url, std::string role, OnChange on_change)
    : url_(std::move(url)), role_(std::move(role)), on_change_(std::move(on_change)) {
  prefix_ = url_.prefix + "/" + role_ + "/";
  if (url_.kind == DiscoveryUrl::Kind::Etcd) thread_ = std::thread([this] { etcd_loop(); });
  else if (url_.kind == DiscoveryUrl::Kind::Dns) thread_ = std::thread([this] { dns_loop(); });
}

PeerWatcher::~PeerWatcher() { stop(); }

void PeerWatcher::stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool PeerWatcher::pause(int ms) {
  std::unique_lock<std::mutex> lk(mu_);
  return !cv_.wait_for(lk, std::chrono::milliseconds(ms), [&] { return stop_.load(); });
}

void PeerWatcher::publish(const std::map<std::string, std::string>& peers) {
  std::vector<PeerInfo> now;
  for (const auto& [addr, value] : peers) now.push_back({addr, value});
  if (published_ && now == last_) return;
  std::set<std::string> before, after;
  for (const auto& p : last_) before.insert(p.address);
  for (const auto& p : now) after.insert(p.address);
  for (const auto& a : after)
    if (!before.count(a)) PDS_LOG_INFO("discovery: {} worker {} appeared", role_, a);
  for (const auto& a : before)
    if (!after.count(a)) PDS_LOG_INFO("discovery: {} worker {} is gone", role_, a);
  last_ = now;
  published_ = true;
  on_change_(now);
}

void PeerWatcher::etcd_loop() {
  EtcdClient etcd(url_.host, url_.port);
  int backoff = kBackoffStartMs;
  while (!stop_.load()) {
    int64_t rev = 0;
    auto kvs = etcd.range_prefix(prefix_, &rev);
    if (!kvs.ok()) {
      PDS_LOG_WARN("discovery: etcd {} unreachable ({}); retrying in {} ms", etcd.endpoint(), kvs.error(), backoff);
      if (!pause(backoff)) return;
      backoff = std::min(backoff * 2, kBackoffMaxMs);
      continue;
    }
    backoff = kBackoffStartMs;
    std::map<std::string, std::string> peers;
    for (const auto& kv : kvs.value()) peers[kv.key.substr(prefix_.size())] = kv.value;
    publish(peers);
    Status s = etcd.watch_prefix(
        prefix_, rev + 1,
        [&](const std::vector<EtcdEvent>& events) {
          for (const auto& e : events) {
            if (e.kv.key.size() <= prefix_.size()) continue;
            const std::string addr = e.kv.key.substr(prefix_.size());
            if (e.is_delete) peers.erase(addr);
            else peers[addr] = e.kv.value;
          }
          publish(peers);
        },
        stop_, kWatchRoundMs);
    if (!s.ok() && !stop_.load()) {
      PDS_LOG_WARN("discovery: {}; listing again in {} ms", s.message(), backoff);
      if (!pause(backoff)) return;
    }
  }
}

void PeerWatcher::dns_loop() {
  bool warned = false;
  while (!stop_.load()) {
    auto addrs = resolve_all(url_.host, url_.port);
    if (addrs.ok()) {
      warned = false;
      std::map<std::string, std::string> peers;
      for (const auto& a : addrs.value()) peers[a] = "";
      publish(peers);
    } else if (!warned) {
      PDS_LOG_WARN("discovery: {}; resolving again every {} ms", addrs.error(), kDnsIntervalMs);
      warned = true;
    }
    if (!pause(kDnsIntervalMs)) return;
  }
}

Result<std::vector<std::string>> resolve_all(const std::string& name, int port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(name.c_str(), nullptr, &hints, &res);
  if (rc != 0) return Status::Unavailable("cannot resolve '" + name + "': " + gai_strerror(rc));
  std::set<std::string> out;
  for (addrinfo* p = res; p; p = p->ai_next) {
    char buf[INET_ADDRSTRLEN];
    const auto* sin = reinterpret_cast<const sockaddr_in*>(p->ai_addr);
    if (::inet_ntop(AF_INET, &sin->sin_addr, buf, sizeof buf)) out.insert(std::string(buf) + ":" + std::to_string(port));
  }
  ::freeaddrinfo(res);
  return std::vector<std::string>(out.begin(), out.end());
}

}  // namespace pdserve::disagg
