// Internal to the engine library: the Engine implementation's class, shared by
// engine.cc (the step loop) and engine_disagg.cc (remote prefill and KV sinks).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "base/auto_reset_event.h"
#include "engine/engine.h"
#include "engine/grammar_cache.h"
#include "engine/scheduler.h"
#include "engine/spec_cost.h"
#include "engine/spec_proposer.h"
#include "kv/kv_cache_manager.h"
#include "kv/kv_tiers.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace pdserve::engine::detail {

/// KvBlockAccess over the engine's KV cache manager (a block of one layer is contiguous).
class CacheBlockAccess final : public KvBlockAccess {
 public:
  CacheBlockAccess(kv::KvCacheManager& kv, KvLayout layout) : kv_(kv), layout_(std::move(layout)) {}
  const KvLayout& layout() const override { return layout_; }
  void write(int layer, int32_t block_id, const void* k, const void* v) override {
    std::memcpy(kv_.block_k(layer, block_id), k, layout_.block_bytes);
    std::memcpy(kv_.block_v(layer, block_id), v, layout_.block_bytes);
  }
  const uint8_t* k(int layer, int32_t block_id) const { return kv_.block_k(layer, block_id); }
  const uint8_t* v(int layer, int32_t block_id) const { return kv_.block_v(layer, block_id); }

 private:
  kv::KvCacheManager& kv_;
  KvLayout layout_;
};

/// The KV layout of a cache (for transfer handshakes and store keys); its model_fingerprint
/// names the architecture, the shapes and the weights (Model::weights_fingerprint).
KvLayout make_layout(const model::Model& m, const kv::KvCacheShape& shape, const std::string& dtype);

class EngineImpl final : public Engine {
 public:
  EngineImpl(const EngineConfig& cfg, std::unique_ptr<model::Model> m, std::unique_ptr<tokenizer::Tokenizer> tok,
             const kv::KvCacheShape& shape, int n_ctx, const SchedulerConfig& sc, kv::EvictionPolicy eviction,
             std::unique_ptr<model::Model> draft = nullptr, std::unique_ptr<kv::KvTiers> tiers = nullptr)
      : cfg_(cfg), model_(std::move(m)), tok_(std::move(tok)), tiers_(std::move(tiers)), n_ctx_(n_ctx),
        kv_(shape, cfg.prefix_cache, eviction), sched_(sc, kv_),
        blocks_(kv_, make_layout(*model_, shape, kv::kv_dtype_name(cfg.kv_dtype))),
        grammars_(*tok_, model_->config().n_vocab),
        salt_gate_(cfg.prefix_cache ? static_cast<size_t>(cfg.max_cache_salts) : 0) {
    kv_.set_max_cache_namespaces(salt_gate_.max_salts());
    if (cfg_.kv_source) {
      sched_.set_remote_prefill_decider([this](Sequence& s) { return wants_remote_prefill(s); });
    }
    if (tiers_) attach_tiers();
    name_ = cfg.model_name.empty() ? std::filesystem::path(cfg.model_path).stem().string() : cfg.model_name;
    stats_blocks_total_ = shape.num_blocks;
    stats_blocks_free_ = shape.num_blocks;
    kv_block_bytes_ = shape.bytes_per_block();
    proposer_ = make_proposer(cfg_.spec, *model_, kv_, std::move(draft));
    loop_ = std::thread([this] { run(); });
  }
  ~EngineImpl() override { shutdown(); }

  Result<std::shared_ptr<RequestStream>> submit(std::vector<int32_t> prompt, const SamplingParams& params) override {
    auto r = submit_group(std::move(prompt), params, RequestOptions{});
    if (!r.ok()) return r.status();
    return r.value()[0];
  }
  Result<std::vector<std::shared_ptr<RequestStream>>> submit_group(std::vector<int32_t> prompt, const SamplingParams& params,
                                                                   const RequestOptions& opts) override;
  const tokenizer::Tokenizer& tokenizer() const override { return *tok_; }
  const std::string& model_name() const override { return name_; }
  int context_length() const override { return n_ctx_; }
  EngineStats stats() const override;
  MetricsSnapshot metrics() const override;
  void shutdown() override;
  KvLayout kv_layout() const override { return blocks_.layout(); }
  std::string weights_fingerprint() const override { return model_->weights_fingerprint(); }
  std::vector<StepSample> recent_steps(uint64_t since) const override { return step_timings_.since(since); }
  std::string kv_budget_error(int kv_budget) const override;

 private:
  bool wants_remote_prefill(Sequence& s);
  void start_remote_prefills();
  void drain_remote_results();
  // KV store tiers (engine_store.cc).
  void attach_tiers();
  /// Scheduler::set_store_loader's callback.
  int store_load(Sequence& s, int max_hit);
  /// Fetches that ended: their sequences queue for admission again.
  void drain_store_results();
  void fill_store_metrics(MetricsSnapshot& m) const;
  /// Hands the layer's newly complete blocks of the batch's kv_sink sequences over.
  void emit_sink_blocks(const std::vector<ScheduledSeq>& plan, int layer);
  /// What the planned step computes, for its StepTimings sample (before the step runs).
  StepShape step_shape(const std::vector<ScheduledSeq>& plan) const;
  void run();
  /// Plans and runs one step; false when nothing could be scheduled (then only an event
  /// can change that: a request, an abort, a transfer result, a deadline).
  bool step();
  /// When the engine thread must wake without an event: the nearest request deadline
  /// (--request-timeout) of a sequence not already being ended; nullopt when none.
  std::optional<std::chrono::steady_clock::time_point> next_deadline();
  /// True when `s` (waiting, never scheduled) has passed its queue deadline at `now`
  /// (now = its queue_deadline: whether it has one that can still expire).
  bool queue_expired(Sequence& s, double now);
  void admit_inbox();
  void reap();
  /// Creates choices 1..n-1 of `parent`'s request, sharing its prompt blocks, and gives
  /// each its first token sampled from `logits`.
  void fork_choices(Sequence& parent, const float* logits);
  /// Samples `s`'s next token from `logits` (only tokens its grammar allows) and
  /// processes it; a grammar that allows no token ends the sequence with an error.
  /// Returns true when the sequence ended (then `s` is gone); `token` (optional) gets the
  /// sampled token (-1 when none).
  bool sample_next(Sequence& s, const float* logits, int32_t* token = nullptr);

  // Speculative decoding (engine_spec.cc).
  /// Before scheduling: each running decode sequence's draft slot request (spec_want) and,
  /// for a proposer that runs before scheduling, its proposal.
  void prepare_drafts();
  /// After scheduling: trims proposals to the slots granted, or runs a proposer that
  /// needs them; a plan entry with a proposal then covers 1 + spec_draft.size() tokens.
  void finish_drafts(std::vector<ScheduledSeq>& plan);
  void finish_drafts_plan(std::vector<ScheduledSeq>& plan);
  /// Proposer::propose, its time counted for the cost model (spec_cost.h).
  void timed_propose(const std::vector<Sequence*>& seqs, const std::vector<int>& ks,
                     std::vector<std::vector<int32_t>>& drafts);
  /// At the end of a step: a decode-only step's time goes into the cost model.
  void end_spec_step();
  /// `s` ran its last token and its proposal as rows with `logits` ([rows][n_vocab]):
  /// samples each row as plain decoding would, keeps the tokens up to the first that
  /// differs from the proposal (or the end), rolls the KV of the rest back. Returns the
  /// rows used (1 + proposal length). `s` may be gone afterwards (it ended).
  int verify_drafts(Sequence& s, const float* logits);
  /// Appends a sampled token, checks stops, pushes a delta; true when the sequence ended.
  bool process_token(Sequence& s, int32_t token, std::optional<TokenLogprob> logprob);
  void finish(Sequence* s, FinishReason reason, StreamDelta delta);
  void end_choice(RequestGroup& g, int choice_index, FinishReason reason, int generated);
  void publish_stats();

  EngineConfig cfg_;
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<tokenizer::Tokenizer> tok_;
  std::unique_ptr<kv::KvTiers> tiers_;  // null without a store tier; outlives the loop thread
  std::string name_;
  int n_ctx_;
  kv::KvCacheManager kv_;  // engine thread only (blocks_: transfers, on handed-over blocks)
  Scheduler sched_;  // engine thread only
  CacheBlockAccess blocks_;
  GrammarCache grammars_;
  CacheSaltGate salt_gate_;  // --max-cache-salts (0 = no cap; none without a prefix cache)
  std::unique_ptr<Proposer> proposer_;  // null without --speculative
  SpecStepTiming spec_timing_;           // what draft rows cost (spec_cost.h)
  EngineMetrics metrics_;
  StepTimings step_timings_;     // live step timings (written by the engine thread)
  double iteration_start_ = 0;   // engine thread: now_seconds() at the loop iteration's start
  std::mutex remote_mu_;
  std::condition_variable remote_idle_;              // remote_inflight_ reached 0
  std::vector<RemotePrefillResult> remote_results_;  // from transfer threads
  std::atomic<int64_t> remote_inflight_{0};          // decremented under remote_mu_

  // The engine thread sleeps on wake_ when it has nothing to compute. Raised by: submit,
  // shutdown, a transfer result, and every abort() of a stream of this engine (shared
  // with the streams, which may outlive the engine).
  std::shared_ptr<AutoResetEvent> wake_ = std::make_shared<AutoResetEvent>();
  std::mutex mu_;
  std::vector<std::unique_ptr<Sequence>> inbox_;
  bool stop_ = false;
  std::thread loop_;
  std::atomic<int64_t> next_id_{1};
  std::vector<float> attn_mass_;  // engine thread: the step's H2O attention-mass rows (Batch::attn_mass)
  std::vector<float> adjusted_logits_;  // engine thread: one row's logits under penalties / logit_bias

  std::atomic<int64_t> stats_blocks_total_{0}, stats_blocks_used_{0}, stats_blocks_cached_{0}, stats_blocks_free_{0};
  std::atomic<int64_t> stats_running_{0}, stats_waiting_{0}, stats_awaiting_kv_{0}, stats_preemptions_{0};
  std::atomic<int64_t> stats_namespaces_{0};
  int64_t kv_block_bytes_ = 0;  // set once in the constructor
  std::atomic<int64_t> pending_{0};  // submitted but not yet admitted by the loop
  int64_t reported_queries_ = 0, reported_hits_ = 0;  // prefix-cache counters given to metrics_ (engine thread)
};

}  // namespace pdserve::engine::detail
