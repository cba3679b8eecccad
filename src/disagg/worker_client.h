// The router's view of its decode workers: a gRPC channel and stub per worker, the
// worker's health and load as last observed, and a health checker that refreshes them.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "disagg/proto/pdserve.grpc.pb.h"
#include "disagg/routing_policy.h"

namespace pdserve::disagg {

/// Parses "host:port[,host:port...]" (items separated by commas or white space; empty items
/// ignored); error for an item that is not HOST:PORT (a URL, a second colon outside an
/// [IPv6] host) or whose port is not 1 to 65535.
Result<std::vector<std::string>> parse_address_list(const std::string& list);

/// An insecure channel to `address` that reconnects quickly (≤ 1 s backoff), so a
/// restarted worker is usable again within about a second.
std::shared_ptr<grpc::Channel> make_worker_channel(const std::string& address);

/// The model a router's decode workers must serve, as their Health reports it: the
/// vocabulary of the router's model file (the router tokenizes prompts and detokenizes
/// output, so a worker whose ids mean other text would answer garbage) and its weights (a
/// stream resumed on another worker continues the same model). "" = not checked (a router
/// file without tensors has no weights to compare; an older worker reports neither).
struct ExpectedModel {
  std::string vocab_fingerprint;
  std::string weights_fingerprint;
  /// "" when a worker reporting `vocab` and `weights` serves this model, else why not.
  std::string mismatch(const std::string& vocab, const std::string& weights) const;
};

/// What the last successful Health and Load calls said.
struct WorkerSnapshot {
  std::string address;
  bool healthy = false;
  bool ever_healthy = false;
  int consecutive_failures = 0;
  std::string model_name;
  int context_length = 0;
  LoadResponse load;
  std::string last_error;
};

/// One decode worker. Thread-safe.
class WorkerClient {
 public:
  /// `discovered`: found through --discovery (removed again when it leaves), not a static flag.
  /// A worker whose Health names another model than `expected` is never healthy.
  WorkerClient(std::string address, bool long_group, bool discovered = false, ExpectedModel expected = {});
  const std::string& address() const { return address_; }
  bool long_group() const { return long_group_; }
  DecodeService::Stub& stub() { return *stub_; }

  /// One Health + Load round trip (each bounded by `timeout`). Updates the snapshot;
  /// returns whether the worker answered as a healthy decode worker.
  bool check(std::chrono::milliseconds timeout);
  /// A call to the worker failed: unhealthy until a later check succeeds.
  void mark_failed(const std::string& why);
  /// The worker serves another model than expected() (its Health, or a Generate it failed
  /// with FAILED_PRECONDITION, said so): no candidate for any request until a check finds
  /// the expected model again.
  void mark_other_model(const std::string& why);
  bool serves_other_model() const { return other_model_.load(); }
  /// The SamplingParams fields the worker applies (its last Health; proto_convert.h
  /// kSamplingLevel): a request needing more (sampling_level) is not sent to it.
  int sampling_level() const { return sampling_level_.load(); }
  const ExpectedModel& expected() const { return expected_; }
  /// A request was routed here: counts as load until the next Load report.
  void note_routed() { routed_since_load_.fetch_add(1); }

  /// Healthy, not draining and (when discovered) still registered.
  bool healthy() const { return healthy_.load() && !removed_.load(); }
  bool discovered() const { return discovered_; }
  /// Discovery lost (or found again) this worker: a removed worker gets no new requests
  /// and is not health-checked; calls on it are cut once a health check fails.
  void set_removed(bool removed);
  bool removed() const { return removed_.load(); }
  /// The worker's last Health said it is draining (no new requests; its streams finish).
  bool draining() const { return draining_.load(); }
  /// Waits up to `timeout` for the channel to connect, driving the connection attempt
  /// (gRPC's synchronous API only makes connect progress while a thread is inside it;
  /// otherwise a worker that starts after the router is noticed by the 5 s backup poller).
  /// True when connected.
  bool wait_connected(std::chrono::milliseconds timeout);
  /// True when the channel is connected now (a failed check was not about connectivity).
  bool channel_ready() const;
  int consecutive_failures() const { return failures_.load(); }
  WorkerSnapshot snapshot() const;
  /// The policy's view (load = running + waiting + awaiting remote KV + routed since the
  /// last Load report).
  WorkerView view() const;

 private:
  void set_failure(const std::string& why, bool count);

  const std::string address_;
  const bool long_group_;
  const bool discovered_;
  const ExpectedModel expected_;
  std::atomic<bool> removed_{false}, draining_{false};
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<DecodeService::Stub> stub_;
  std::atomic<bool> healthy_{false};
  std::atomic<bool> other_model_{false};
  std::atomic<int> sampling_level_{0};  // HealthResponse.sampling_level
  std::atomic<int> failures_{0};
  std::atomic<int64_t> routed_since_load_{0};
  mutable std::mutex mu_;
  std::string logged_mismatch_;  // the mismatch logged since the worker was last healthy (guarded by mu_)
  WorkerSnapshot snap_;  // guarded by mu_ (healthy/consecutive_failures mirrored from the atomics)
};

/// Calls check() on every worker every `interval` (one thread per worker, so a hung
/// worker delays no other) until stop() or destruction.
class HealthChecker {
 public:
  HealthChecker(std::vector<WorkerClient*> workers, std::chrono::milliseconds interval,
                std::chrono::milliseconds timeout);
  ~HealthChecker() { stop(); }
  HealthChecker(const HealthChecker&) = delete;
  HealthChecker& operator=(const HealthChecker&) = delete;

  void start();
  void stop();
  /// Checks one more worker from now on (discovery found it).
  void add(WorkerClient* w);

 private:
  void loop(WorkerClient* w);

  std::vector<WorkerClient*> workers_;
  std::chrono::milliseconds interval_, timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool started_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace pdserve::disagg
