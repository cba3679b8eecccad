// RouterEngine: the engine::Engine of `pdserve router`. It does no inference: it holds
// the model's tokenizer (for the HTTP layer and for routing), picks a decode worker per
// choice with a RoutingPolicy and streams the worker's Generate output back, with retry
// before the first token and resume after it (router_choice.h). A health checker polls
// every worker's Health and Load; the HTTP server runs over this engine unchanged.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/auto_reset_event.h"
#include "base/status.h"
#include "disagg/discovery.h"
#include "disagg/router_choice.h"
#include "disagg/routing_policy.h"
#include "disagg/worker_client.h"
#include "engine/engine.h"
#include "engine/metrics.h"

namespace pdserve::disagg {

struct RouterConfig {
  std::string model_path;                 // GGUF whose vocabulary is loaded (weights unused)
  // gguf::weights_fingerprint of model_path (create() sets it; "" for a file without
  // tensors): decode workers must serve these weights and the file's vocabulary.
  std::string weights_fingerprint;
  std::string model_name;                 // "" ⇒ the workers' name (else the file stem)
  std::vector<std::string> decode;        // HOST:PORT of the decode workers
  std::vector<std::string> decode_long;   // the long-prompt group (policy "length")
  std::vector<std::string> prefill;       // informational: decode workers own their prefill list
  PolicyConfig policy;
  std::chrono::milliseconds health_interval{500};
  std::chrono::milliseconds health_timeout{1000};
  std::chrono::milliseconds startup_wait{10000};  // create(): wait this long for a healthy worker
  ChoiceLimits limits;                    // max_attempts 0 ⇒ 2 × workers + 2
  DiscoveryUrl discovery;                 // --discovery: decode workers found there join `decode`
};

class RouterEngine final : public engine::Engine, private ChoiceHost {
 public:
  /// Loads the tokenizer from cfg.model_path, connects to the workers, starts the
  /// health checker and waits (up to cfg.startup_wait) for a worker to answer.
  static Result<std::unique_ptr<RouterEngine>> create(RouterConfig cfg);
  /// Over a given tokenizer (tests). Starts the health checker; does not wait.
  RouterEngine(RouterConfig cfg, std::unique_ptr<tokenizer::Tokenizer> tok, std::unique_ptr<RoutingPolicy> policy);
  ~RouterEngine() override;

  Result<std::shared_ptr<engine::RequestStream>> submit(std::vector<int32_t> prompt,
                                                        const engine::SamplingParams& params) override;
  /// Each choice k (seed + k when seeded) is routed on its own. Errors: a bad prompt, a
  /// worker's refusal (its message), no reachable worker.
  Result<std::vector<std::shared_ptr<engine::RequestStream>>> submit_group(std::vector<int32_t> prompt,
                                                                           const engine::SamplingParams& params,
                                                                           const engine::RequestOptions& opts) override;
  const tokenizer::Tokenizer& tokenizer() const override { return *tok_; }
  /// Fixed at start: the configured name, else the first healthy worker's, else the file stem.
  const std::string& model_name() const override { return model_name_; }
  /// The smallest context length among healthy workers (the last known when none is).
  int context_length() const override;
  /// Sums over the healthy workers' last Load; token totals are the router's.
  engine::EngineStats stats() const override;
  /// The router's own request metrics plus the workers' gauges (healthy workers) and
  /// prefix-cache / preemption counters (each worker's last report).
  engine::MetricsSnapshot metrics() const override;
  /// "no healthy decode worker" while no worker answers its health checks, followed by each
  /// worker's last error (e.g. that it serves another model).
  std::string not_ready_reason() const override;
  void shutdown() override;

  /// Waits up to `timeout` until some worker is healthy; true if one is.
  bool wait_for_healthy_worker(std::chrono::milliseconds timeout) const;
  /// Every worker known (static, discovered, also those discovery removed since).
  std::vector<WorkerClient*> workers() const;
  /// The decode workers discovery lists now: new ones are added (and health-checked),
  /// discovered ones not listed are removed (no new requests). Static workers stay.
  void set_decode_peers(const std::vector<std::string>& addrs);
  const RoutingPolicy& policy() const { return *policy_; }

 private:
  struct Group;  // the choices of one submit_group, for the metrics

  ExpectedModel expected_model() const { return {tok_->fingerprint(), cfg_.weights_fingerprint}; }
  std::vector<WorkerClient*> candidates(const std::vector<int32_t>& prompt,
                                        const std::vector<WorkerClient*>& failed, int sampling_level) override;
  bool shutting_down() const override { return stopping_.load(); }
  void watch_loop();
  void record(Group& g, int choice, const ChoiceOutcome& o);

  RouterConfig cfg_;
  int configured_max_attempts_ = 0;
  std::unique_ptr<tokenizer::Tokenizer> tok_;
  std::unique_ptr<RoutingPolicy> policy_;
  mutable std::mutex workers_mu_;
  std::vector<std::unique_ptr<WorkerClient>> workers_;  // grows only (guarded by workers_mu_)
  std::unique_ptr<HealthChecker> health_;
  std::unique_ptr<PeerWatcher> peers_;
  std::string model_name_;
  mutable std::atomic<int> last_context_length_{0};
  std::atomic<int64_t> next_id_{1};
  std::atomic<bool> stopping_{false};

  std::mutex mu_;  // choices_, watch_stop_
  // Wakes the watcher before its next round: raised by shutdown and by every abort() of
  // a stream of this router (so a client's abort cancels the worker call at once).
  std::shared_ptr<AutoResetEvent> watch_wake_ = std::make_shared<AutoResetEvent>();
  std::vector<std::shared_ptr<RoutedChoice>> choices_;
  bool watch_stop_ = false;
  std::thread watcher_;

  engine::EngineMetrics metrics_;
  mutable std::mutex class_mu_;
  std::map<std::string, engine::ClassTraffic> class_traffic_;  // by SLO class name (guarded by class_mu_)
  std::atomic<int64_t> prompt_tokens_{0}, generation_tokens_{0};
};

}  // namespace pdserve::disagg
