// The engine step loop: schedule ▸ build Batch ▸ forward ▸ sample ▸ stream out.
#include "engine/engine.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <random>
#include <thread>

#include "base/clock.h"
#include "base/log.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace pdserve::engine {

namespace {

constexpr int64_t kDefaultKvBudgetBytes = 512ll << 20;

class EngineImpl final : public Engine {
 public:
  EngineImpl(const EngineConfig& cfg, std::unique_ptr<model::Model> m,
             std::unique_ptr<tokenizer::Tokenizer> tok, const kv::KvCacheShape& shape, int n_ctx)
      : cfg_(cfg), model_(std::move(m)), tok_(std::move(tok)), n_ctx_(n_ctx),
        pool_(shape.num_blocks), cache_(shape),
        sched_({cfg.max_batched_tokens, cfg.max_seqs, shape.block_size}, pool_) {
    name_ = cfg.model_name.empty() ? std::filesystem::path(cfg.model_path).stem().string() : cfg.model_name;
    stats_blocks_total_ = shape.num_blocks;
    stats_blocks_free_ = shape.num_blocks;
    loop_ = std::thread([this] { run(); });
  }
  ~EngineImpl() override { shutdown(); }

  Result<std::shared_ptr<RequestStream>> submit(std::vector<int32_t> prompt, const SamplingParams& params) override;
  const tokenizer::Tokenizer& tokenizer() const override { return *tok_; }
  const std::string& model_name() const override { return name_; }
  int context_length() const override { return n_ctx_; }
  EngineStats stats() const override;
  void shutdown() override;

 private:
  void run();
  void step();
  void admit_inbox();
  void reap_aborted();
  /// Appends a sampled token, checks stops, pushes a delta; true when the sequence ended.
  bool process_token(Sequence& s, int32_t token, const float* logits);
  void finish(Sequence* s, FinishReason reason, StreamDelta delta);
  void publish_stats();

  EngineConfig cfg_;
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<tokenizer::Tokenizer> tok_;
  std::string name_;
  int n_ctx_;
  kv::BlockPool pool_;
  kv::KvCache cache_;
  Scheduler sched_;  // engine thread only

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Sequence>> inbox_;
  bool stop_ = false;
  std::thread loop_;
  std::atomic<int64_t> next_id_{1};

  std::atomic<int64_t> stats_blocks_total_{0}, stats_blocks_used_{0}, stats_blocks_free_{0};
  std::atomic<int64_t> stats_running_{0}, stats_waiting_{0};
  std::atomic<int64_t> stats_prompt_tokens_{0}, stats_gen_tokens_{0};
  std::atomic<int64_t> pending_{0};  // submitted but not yet admitted by the loop
};

Result<std::shared_ptr<RequestStream>> EngineImpl::submit(std::vector<int32_t> prompt, const SamplingParams& params) {
  if (prompt.empty()) return Status::Error("the prompt is empty");
  for (int32_t t : prompt)
    if (t < 0 || t >= model_->config().n_vocab)
      return Status::Error("token id " + std::to_string(t) + " is outside the vocabulary (size " + std::to_string(model_->config().n_vocab) + ")");
  const int n = static_cast<int>(prompt.size());
  if (n >= n_ctx_)
    return Status::Error("the prompt has " + std::to_string(n) + " tokens but the context length is " + std::to_string(n_ctx_) +
                         "; at most " + std::to_string(n_ctx_ - 1) + " prompt tokens leave room for generation");
  int max_len = n_ctx_;
  if (params.max_tokens > 0) max_len = static_cast<int>(std::min<int64_t>(n_ctx_, int64_t{n} + params.max_tokens));
  const int64_t blocks = (max_len + cache_.shape().block_size - 1) / cache_.shape().block_size;
  if (blocks > pool_.num_blocks())
    return Status::Error("the request needs up to " + std::to_string(max_len) + " tokens of KV cache (" + std::to_string(blocks) +
                         " blocks) but the pool has only " + std::to_string(pool_.num_blocks()) + " blocks; lower max_tokens or the prompt");

  const int64_t id = next_id_++;
  auto stream = std::make_shared<RequestStream>(std::to_string(id));
  uint64_t seed = params.seed ? *params.seed : std::random_device{}() ^ (uint64_t{std::random_device{}()} << 32);
  auto seq = std::make_unique<Sequence>(id, std::move(prompt), params, stream, *tok_, seed);
  seq->max_len = max_len;
  seq->arrival_time = now_seconds();
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stop_) return Status::Error("the engine is shutting down");
    inbox_.push_back(std::move(seq));
    pending_++;
  }
  cv_.notify_one();
  return stream;
}

EngineStats EngineImpl::stats() const {
  EngineStats s;
  s.kv_blocks_total = stats_blocks_total_;
  s.kv_blocks_used = stats_blocks_used_;
  s.kv_blocks_free = stats_blocks_free_;
  s.requests_running = stats_running_;
  s.requests_waiting = stats_waiting_ + pending_;
  s.prompt_tokens_total = stats_prompt_tokens_;
  s.generation_tokens_total = stats_gen_tokens_;
  return s;
}

void EngineImpl::shutdown() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stop_ && !loop_.joinable()) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (loop_.joinable()) loop_.join();
}

void EngineImpl::admit_inbox() {
  std::vector<std::unique_ptr<Sequence>> in;
  {
    std::lock_guard<std::mutex> lk(mu_);
    in.swap(inbox_);
    pending_ -= static_cast<int64_t>(in.size());
  }
  for (auto& s : in) {
    stats_prompt_tokens_ += s->prompt_len;
    sched_.add(std::move(s));
  }
}

void EngineImpl::finish(Sequence* s, FinishReason reason, StreamDelta delta) {
  std::unique_ptr<Sequence> owned = sched_.finish(s);
  delta.finish = reason;
  delta.prompt_tokens = s->prompt_len;
  delta.completion_tokens = s->num_generated();
  s->stream->push(std::move(delta));
}

void EngineImpl::reap_aborted() {
  std::vector<Sequence*> dead;
  sched_.for_each([&](Sequence* s) {
    if (s->stream->aborted()) dead.push_back(s);
  });
  for (Sequence* s : dead) finish(s, FinishReason::Abort, {});
}

bool EngineImpl::process_token(Sequence& s, int32_t token, const float* logits) {
  const int n_vocab = model_->config().n_vocab;
  StreamDelta d;
  s.tokens.push_back(token);
  stats_gen_tokens_++;
  d.tokens.push_back(token);
  if (s.params.top_logprobs >= 0) d.logprobs.push_back(token_logprobs(logits, n_vocab, token, s.params.top_logprobs));
  d.prompt_tokens = s.prompt_len;
  d.completion_tokens = s.num_generated();

  FinishReason reason = FinishReason::None;
  if (!s.params.ignore_eos && tok_->is_eog(token)) {
    reason = FinishReason::Stop;
  } else {
    d.text = s.stop.feed(s.decoder.push(token));
    if (s.stop.stopped()) reason = FinishReason::Stop;
    else if (static_cast<int>(s.tokens.size()) >= s.max_len) reason = FinishReason::Length;
  }
  if (reason == FinishReason::None) {
    s.stream->push(std::move(d));
    return false;
  }
  if (!s.stop.stopped()) d.text += s.stop.feed(s.decoder.flush()) + s.stop.flush();
  finish(&s, reason, std::move(d));
  return true;
}

void EngineImpl::step() {
  std::vector<ScheduledSeq> plan = sched_.schedule();
  if (plan.empty()) return;
  const int bs = cache_.shape().block_size;
  model::Batch batch;
  for (size_t i = 0; i < plan.size(); ++i) {
    Sequence& s = *plan[i].seq;
    batch.block_tables.push_back(s.block_table.blocks.data());
    for (int j = 0; j < plan[i].n_tokens; ++j) {
      const int pos = s.num_computed + j;
      batch.tokens.push_back(s.tokens[pos]);
      batch.positions.push_back(pos);
      batch.slot_mapping.push_back(s.block_table.slot(pos, bs));
      batch.seq_ids.push_back(static_cast<int32_t>(i));
      // Prompt tokens of a >= 2-token prompt take the reference's batched-prompt matmul
      // order; generated tokens (also when recomputed after preemption) the decode order.
      batch.gemm_order.push_back(pos < s.prompt_len && s.prompt_len >= 2 ? 1 : 0);
    }
    if (plan[i].needs_logits) batch.logits_rows.push_back(batch.n_tokens() - 1);
  }
  const int n_vocab = model_->config().n_vocab;
  std::vector<float> logits(batch.logits_rows.size() * static_cast<size_t>(n_vocab));
  model_->forward(batch, cache_.layers(), logits.data());

  size_t row = 0;
  for (const ScheduledSeq& p : plan) {
    Sequence& s = *p.seq;
    s.num_computed += p.n_tokens;
    if (!p.needs_logits) continue;
    const float* l = logits.data() + row++ * n_vocab;
    process_token(s, sample_token(l, n_vocab, s.params, s.rng), l);
  }
}

void EngineImpl::publish_stats() {
  stats_blocks_used_ = pool_.num_used();
  stats_blocks_free_ = pool_.num_free();
  stats_running_ = static_cast<int64_t>(sched_.num_running());
  stats_waiting_ = static_cast<int64_t>(sched_.num_waiting());
}

void EngineImpl::run() {
  omp_set_num_threads(cfg_.threads > 0 ? cfg_.threads : omp_get_num_procs());
  while (true) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !inbox_.empty() || sched_.num_running() + sched_.num_waiting() > 0; });
      if (stop_) break;
    }
    admit_inbox();
    reap_aborted();
    step();
    publish_stats();
  }
  // Shutdown: every outstanding request ends with Abort and frees its blocks.
  admit_inbox();
  std::vector<Sequence*> all;
  sched_.for_each([&](Sequence* s) { all.push_back(s); });
  for (Sequence* s : all) finish(s, FinishReason::Abort, {});
  publish_stats();
}

}  // namespace

Result<std::unique_ptr<Engine>> Engine::create(const EngineConfig& cfg) {
  auto m = model::Model::load(cfg.model_path);
  if (!m.ok()) return m.status();
  auto tok = tokenizer::Tokenizer::from_gguf(m.value()->file());
  if (!tok.ok()) return Status::Error(cfg.model_path + ": " + tok.error());
  const model::ModelConfig& mc = m.value()->config();
  auto dtype = kv::parse_kv_dtype(cfg.kv_dtype);
  if (!dtype.ok()) return dtype.status();
  if (cfg.block_size < 1 || cfg.block_size > 1024) return Status::Error("--block-size must be in [1, 1024]");
  if (cfg.max_batched_tokens < 1) return Status::Error("--max-batched-tokens must be >= 1");
  if (cfg.max_seqs < 1) return Status::Error("--max-seqs must be >= 1");
  const int n_ctx = cfg.ctx_size > 0 ? cfg.ctx_size : mc.n_ctx;

  kv::KvCacheShape shape;
  shape.n_layers = mc.n_layer;
  shape.n_kv_heads = mc.n_head_kv;
  shape.head_dim = mc.head_dim;
  shape.block_size = cfg.block_size;
  shape.dtype = dtype.value();
  const int64_t per_block = shape.bytes_per_block();
  const int64_t blocks_per_ctx = (n_ctx + cfg.block_size - 1) / cfg.block_size;
  int64_t num_blocks = cfg.num_kv_blocks;
  if (num_blocks <= 0 && cfg.kv_cache_mb > 0) num_blocks = (cfg.kv_cache_mb << 20) / per_block;
  if (num_blocks <= 0 && cfg.kv_cache_mb <= 0)
    num_blocks = std::max(blocks_per_ctx, std::min<int64_t>(blocks_per_ctx * cfg.max_seqs, kDefaultKvBudgetBytes / per_block));
  if (num_blocks < 1) return Status::Error("the KV cache must hold at least one block (" + std::to_string(per_block) + " bytes)");
  shape.num_blocks = static_cast<int32_t>(num_blocks);
  PDS_LOG_INFO("model {}: {} layers, n_embd {}, {} heads ({} KV), vocab {}, context {}", cfg.model_path, mc.n_layer,
               mc.n_embd, mc.n_head, mc.n_head_kv, mc.n_vocab, n_ctx);
  PDS_LOG_INFO("KV cache: {} blocks x {} tokens ({} MiB, {})", shape.num_blocks, shape.block_size,
               num_blocks * per_block >> 20, cfg.kv_dtype);
  return std::unique_ptr<Engine>(new EngineImpl(cfg, std::move(m.value()), std::move(tok.value()), shape, n_ctx));
}

}  // namespace pdserve::engine
