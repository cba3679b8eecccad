// The engine step loop: schedule ▸ build Batch ▸ forward ▸ sample ▸ stream out.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <random>
#include <thread>

#include "base/clock.h"
#include "base/huge_pages.h"
#include "base/log.h"
#include "engine/engine_impl.h"
#include "engine/sampler.h"
#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "kernels/parallel.h"

namespace pdserve::engine {

Result<std::vector<std::shared_ptr<RequestStream>>> Engine::submit_group(std::vector<int32_t> prompt,
                                                                         const SamplingParams& params,
                                                                         const RequestOptions& opts) {
  std::vector<std::shared_ptr<RequestStream>> out;
  for (int k = 0; k < opts.n; ++k) {
    auto r = submit(prompt, params.for_choice(k));
    if (!r.ok()) {
      for (auto& s : out) s->abort();
      return r.status();
    }
    out.push_back(std::move(r.value()));
  }
  return out;
}

MetricsSnapshot Engine::metrics() const {
  MetricsSnapshot m;
  EngineStats s = stats();
  m.requests_running = s.requests_running;
  m.requests_waiting = s.requests_waiting;
  m.kv_blocks_total = s.kv_blocks_total;
  m.kv_blocks_used = s.kv_blocks_used;
  m.kv_blocks_cached = s.kv_blocks_cached;
  m.kv_blocks_free = s.kv_blocks_free;
  m.kv_block_bytes = s.kv_block_bytes;
  return m;
}

namespace detail {

// Default KV cache size cap (when neither --kv-cache-mb nor --num-kv-blocks is given).
constexpr int64_t kDefaultKvBudgetBytes = 512ll << 20;

namespace {

uint64_t random_seed() { return std::random_device{}() ^ (uint64_t{std::random_device{}()} << 32); }

}  // namespace

Result<std::vector<std::shared_ptr<RequestStream>>> EngineImpl::submit_group(std::vector<int32_t> prompt,
                                                                             const SamplingParams& params,
                                                                             const RequestOptions& opts) {
  if (prompt.empty()) return Status::InvalidArgument("the prompt is empty");
  if (opts.n < 1) return Status::InvalidArgument("n must be at least 1");
  if (opts.original_prompt_len < 0 || opts.original_prompt_len > static_cast<int>(prompt.size()))
    return Status::InvalidArgument("original_prompt_len must be within the prompt");
  if (opts.kv_sink && opts.n != 1) return Status::InvalidArgument("a KV sink request has one choice");
  for (int32_t t : prompt)
    if (t < 0 || t >= model_->config().n_vocab)
      return Status::InvalidArgument("token id " + std::to_string(t) + " is outside the vocabulary (size " +
                           std::to_string(model_->config().n_vocab) + ")");
  const int n = static_cast<int>(prompt.size());
  if (n >= n_ctx_)
    return Status::InvalidArgument("the prompt has " + std::to_string(n) + " tokens but the context length is " +
                         std::to_string(n_ctx_) + "; at most " + std::to_string(n_ctx_ - 1) +
                         " prompt tokens leave room for generation");
  int max_len = n_ctx_;
  if (params.max_tokens > 0) max_len = static_cast<int>(std::min<int64_t>(n_ctx_, int64_t{n} + params.max_tokens));
  if (opts.kv_budget != 0)
    if (std::string why = kv_budget_error(opts.kv_budget); !why.empty()) return Status::InvalidArgument(why);
  // A prefill worker's sequences keep everything (the decode worker evicts).
  const int kv_budget = opts.kv_sink ? 0 : opts.kv_budget > 0 ? opts.kv_budget : cfg_.kv_budget;
  // With a budget the KV peaks at the whole prompt, or at budget + 1 entries while decoding
  // (the sequence's length is then bounded by the context length only); with n > 1, a
  // choice's first eviction may copy up to the budget's blocks out of the prompt blocks it
  // shares with its siblings (kv::KvCacheManager::evict_tokens).
  const int kv_tokens = kv_budget > 0 ? std::max(n, std::min(max_len, kv_budget + 1)) : max_len;
  const int64_t blocks = kv_.blocks_for(kv_tokens) + (kv_budget > 0 && opts.n > 1 ? kv_.blocks_for(kv_budget) : 0);
  if (blocks > kv_.num_blocks())
    return Status::ResourceExhausted("the request needs up to " + std::to_string(kv_tokens) + " tokens of KV cache (" +
                         std::to_string(blocks) + " blocks) but the pool has only " +
                         std::to_string(kv_.num_blocks()) + " blocks; lower max_tokens or the prompt");

  for (const auto& [token, bias] : params.logit_bias)
    if (token < 0 || token >= model_->config().n_vocab)
      return Status::InvalidArgument("logit_bias: token " + std::to_string(token) + " is not in the vocabulary (ids 0 to " +
                                     std::to_string(model_->config().n_vocab - 1) + ")");
  // The API layer bounds these; a worker checks what arrives over gRPC too.
  if (!(params.repetition_penalty >= 1e-3f && params.repetition_penalty <= 100.f) || params.repetition_last_n < 0)
    return Status::InvalidArgument("repetition_penalty must be in [0.001, 100] and its window >= 0");
  if (!(params.min_p >= 0.f && params.min_p <= 1.f)) return Status::InvalidArgument("min_p must be in [0, 1]");
  for (int32_t token : params.stop_token_ids)
    if (token < 0 || token >= model_->config().n_vocab)
      return Status::InvalidArgument("stop_token_ids: token " + std::to_string(token) + " is not in the vocabulary");
  std::shared_ptr<grammar::GrammarMatcher> matcher;
  int32_t grammar_state = 0;
  if (!params.grammar.empty()) {
    auto m = grammars_.get(params.grammar);
    if (!m.ok()) return m.status();
    matcher = *m;
    grammar_state = matcher->initial_state();
    // A resume: the tokens already sent were produced under the grammar.
    for (size_t i = opts.original_prompt_len > 0 ? opts.original_prompt_len : prompt.size(); i < prompt.size(); ++i) {
      grammar_state = matcher->advance_token(grammar_state, prompt[i]);
      if (grammar_state < 0) return Status::InvalidArgument("the resumed tokens do not match the request's grammar");
    }
  }

  // Only a request that uses the prefix cache takes a salt's slot: one with a kv_budget
  // neither matches nor inserts (Scheduler::admit), so it creates no namespace here. (Its
  // salt still goes to a prefill worker, whose own gate counts it there.)
  auto salt_hold = salt_gate_.acquire(kv_budget > 0 ? std::string() : opts.cache_salt);
  if (!salt_hold.ok()) return salt_hold.status();

  const double now = now_seconds();
  auto group = std::make_shared<RequestGroup>();
  group->salt_hold = std::move(salt_hold.value());
  group->n = group->unfinished = opts.n;
  group->arrival_time = now;
  group->prompt_len = n;
  group->slo_class = opts.slo_class;
  std::vector<std::shared_ptr<RequestStream>> streams;
  const int64_t id = next_id_++;
  const uint64_t base_seed = params.seed ? *params.seed : random_seed();
  for (int k = 0; k < opts.n; ++k) {
    streams.push_back(std::make_shared<RequestStream>(std::to_string(id) + "-" + std::to_string(k)));
    streams.back()->set_abort_event(wake_);
    if (k > 0) group->pending_forks.emplace_back(streams.back(), params.seed ? base_seed + k : random_seed());
  }
  auto seq = std::make_unique<Sequence>(id, std::move(prompt), params, streams[0], *tok_, base_seed, max_len);
  seq->group = group;
  seq->arrival_time = now;
  seq->deadline = cfg_.request_timeout_s > 0 ? now + cfg_.request_timeout_s : 0;
  seq->priority = opts.priority;
  seq->cache_salt = opts.cache_salt;
  seq->slo_class = opts.slo_class;
  seq->slo_deadline = opts.slo_class >= 0 && opts.ttft_target_s > 0 ? now + opts.ttft_target_s : 0;
  seq->tpot_target = opts.tpot_target_s;
  seq->queue_deadline = opts.max_queue_s > 0 ? now + opts.max_queue_s : 0;
  seq->kv_budget = kv_budget;
  seq->role_prompt_len = opts.original_prompt_len > 0 ? opts.original_prompt_len : seq->prompt_len;
  // A resume: the tokens after the original prompt were sampled with one draw each, so a
  // seeded stream continues exactly where it stopped.
  if (opts.original_prompt_len > 0 && params.temperature > 0.f)
    seq->rng.discard(static_cast<unsigned long long>(seq->prompt_len - opts.original_prompt_len));
  seq->kv_sink = opts.kv_sink;
  seq->matcher = std::move(matcher);
  seq->grammar_state = grammar_state;
  if (seq->kv_sink) seq->sink_sent.assign(model_->config().n_layer, seq->kv_sink->skip_blocks());
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stop_) return Status::Unavailable("the engine is shutting down");
    inbox_.push_back(std::move(seq));
    pending_++;
  }
  wake_->set();
  return streams;
}

std::string EngineImpl::kv_budget_error(int kv_budget) const {
  const int lo = cfg_.kv_evict.min_budget();
  if (kv_budget < lo || kv_budget > (cfg_.kv_budget > 0 ? cfg_.kv_budget : n_ctx_))
    return "kv_budget must be between " + std::to_string(lo) + " (--kv-sinks + --kv-recent) and " +
           (cfg_.kv_budget > 0 ? std::to_string(cfg_.kv_budget) + " (the server's --kv-budget)" : std::string("the context length, ") + std::to_string(n_ctx_)) +
           "; got " + std::to_string(kv_budget);
  return {};
}

EngineStats EngineImpl::stats() const {
  EngineStats s;
  s.kv_blocks_total = stats_blocks_total_;
  s.kv_blocks_used = stats_blocks_used_;
  s.kv_blocks_cached = stats_blocks_cached_;
  s.kv_blocks_free = stats_blocks_free_;
  s.kv_block_bytes = kv_block_bytes_;
  s.kv_dtype = kv::kv_dtype_name(cfg_.kv_dtype);
  s.requests_running = stats_running_;
  s.requests_waiting = stats_waiting_ + pending_;
  s.requests_awaiting_kv = stats_awaiting_kv_;
  s.prefix_cache_namespaces = stats_namespaces_;
  s.cache_salts_in_use = static_cast<int64_t>(salt_gate_.held());
  MetricsSnapshot m;
  metrics_.fill(m);
  s.prompt_tokens_total = m.prompt_tokens;
  s.generation_tokens_total = m.generation_tokens;
  return s;
}

MetricsSnapshot EngineImpl::metrics() const {
  MetricsSnapshot m;
  metrics_.fill(m);
  m.requests_running = stats_running_;
  m.requests_waiting = stats_waiting_ + pending_;
  m.kv_blocks_total = stats_blocks_total_;
  m.kv_blocks_used = stats_blocks_used_;
  m.kv_blocks_cached = stats_blocks_cached_;
  m.kv_blocks_free = stats_blocks_free_;
  m.kv_block_bytes = kv_block_bytes_;
  m.preemptions = stats_preemptions_;
  m.has_spec = proposer_ != nullptr;
  m.step_seconds = step_timings_.histograms();
  if (cfg_.transfer_metrics) cfg_.transfer_metrics->fill(m);
  fill_store_metrics(m);
  return m;
}

void EngineImpl::shutdown() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  wake_->set();
  if (loop_.joinable()) loop_.join();
}

void EngineImpl::admit_inbox() {
  std::vector<std::unique_ptr<Sequence>> in;
  {
    std::lock_guard<std::mutex> lk(mu_);
    in.swap(inbox_);
    pending_ -= static_cast<int64_t>(in.size());
  }
  for (auto& s : in) sched_.add(std::move(s));
}

void EngineImpl::end_choice(RequestGroup& g, int choice_index, FinishReason reason, int generated) {
  const double now = now_seconds();
  g.generated += generated;
  if (choice_index == 0) {
    g.first_choice_finish = reason;
    g.first_choice_tokens = generated;
    g.first_choice_end = now;
  }
  if (--g.unfinished > 0) return;
  const double first_token = g.first_token_time;
  const bool has_tpot = first_token >= 0 && g.first_choice_tokens > 1;
  metrics_.record_request(finish_reason_name(g.first_choice_finish),
                          (g.first_scheduled_time >= 0 ? g.first_scheduled_time : now) - g.arrival_time,
                          first_token >= 0 ? first_token - g.arrival_time : -1,
                          has_tpot ? (g.first_choice_end - first_token) / (g.first_choice_tokens - 1) : 0, has_tpot,
                          now - g.arrival_time, g.prompt_len, g.generated);
  if (g.slo_class >= 0 && g.slo_class <= 2) {
    static const char* const kClassNames[] = {"high", "medium", "low"};  // gateway/slo_class.h
    metrics_.record_class_queue(kClassNames[g.slo_class],
                                (g.first_scheduled_time >= 0 ? g.first_scheduled_time : now) - g.arrival_time);
  }
}

void EngineImpl::finish(Sequence* s, FinishReason reason, StreamDelta delta) {
  if (proposer_) proposer_->release(s->id, s->choice_index);
  std::unique_ptr<Sequence> owned = sched_.finish(s);
  RequestGroup& g = *s->group;
  if (s->choice_index == 0 && !g.pending_forks.empty()) {
    // Choice 0 ended before it could fork the others: they end the same way.
    for (auto& [stream, seed] : g.pending_forks) {
      StreamDelta d;
      d.finish = reason == FinishReason::Error ? FinishReason::Error : FinishReason::Abort;
      d.error = delta.error;
      d.prompt_tokens = s->prompt_len;
      end_choice(g, -1, d.finish, 0);
      stream->push(std::move(d));
    }
    g.pending_forks.clear();
  }
  delta.finish = reason;
  delta.prompt_tokens = s->prompt_len;
  delta.completion_tokens = s->num_generated();
  delta.cached_tokens = std::max(0, s->cached_tokens);
  end_choice(g, s->choice_index, reason, s->num_generated());  // metrics first: a client may read them at once
  s->stream->push(std::move(delta));
}

void EngineImpl::reap() {
  const double now = now_seconds();
  std::vector<std::pair<Sequence*, bool>> dead;  // (seq, timed out)
  std::vector<Sequence*> shed;                   // not scheduled within its class's max queue time
  sched_.for_each([&](Sequence* s) {
    if (s->stream->aborted()) dead.emplace_back(s, false);
    else if (s->deadline > 0 && now > s->deadline) dead.emplace_back(s, true);
    else if (queue_expired(*s, now)) shed.push_back(s);
  });
  for (Sequence* s : shed) {
    StreamDelta d;
    d.error = "server_overloaded: the request waited longer than its class's maximum queue time";
    finish(s, FinishReason::Error, std::move(d));
  }
  for (auto [s, timed_out] : dead) {
    if (sched_.find_awaiting(s->id, s->choice_index) == s) {
      // A transfer is writing its blocks: cancel it; the sequence ends when it reports.
      if (!s->cancel_sent) cfg_.kv_source->cancel(s->id);
      s->cancel_sent = true;
      if (timed_out) s->stream->abort();
      continue;
    }
    StreamDelta d;
    if (timed_out) {
      char secs[32];
      std::snprintf(secs, sizeof secs, "%g", cfg_.request_timeout_s);
      d.error = std::string("the request ran longer than --request-timeout (") + secs + " s)";
    }
    finish(s, timed_out ? FinishReason::Error : FinishReason::Abort, std::move(d));
  }
}

bool EngineImpl::queue_expired(Sequence& s, double now) {
  // Only a sequence never scheduled and not holding blocks for a remote prefill.
  return s.queue_deadline > 0 && now >= s.queue_deadline && s.group->first_scheduled_time < 0 && s.choice_index == 0 &&
         s.kv.num_blocks() == 0 && sched_.find_awaiting(s.id, s.choice_index) != &s;
}

bool EngineImpl::process_token(Sequence& s, int32_t token, std::optional<TokenLogprob> logprob) {
  if (s.group->first_token_time < 0) s.group->first_token_time = now_seconds();
  StreamDelta d;
  if (s.matcher) {
    s.grammar_state = s.matcher->advance_token(s.grammar_state, token);
    if (s.grammar_state < 0) {  // e.g. a first token from a prefill worker that did not constrain
      d.error = "token " + std::to_string(token) + " does not match the request's grammar";
      finish(&s, FinishReason::Error, std::move(d));
      return true;
    }
  }
  s.tokens.push_back(token);
  const FinishReason reason = s.output.add_token(token, std::move(logprob), d);
  d.prompt_tokens = s.prompt_len;
  d.completion_tokens = s.num_generated();
  d.cached_tokens = std::max(0, s.cached_tokens);
  if (reason == FinishReason::None) {
    s.stream->push(std::move(d));
    return false;
  }
  finish(&s, reason, std::move(d));
  return true;
}

void EngineImpl::fork_choices(Sequence& parent, const float* logits) {
  RequestGroup& g = *parent.group;
  auto forks = std::move(g.pending_forks);
  g.pending_forks.clear();
  for (size_t k = 0; k < forks.size(); ++k) {
    auto& [stream, seed] = forks[k];
    std::unique_ptr<Sequence> sib = parent.fork(stream, seed, static_cast<int>(k) + 1);
    // Share the full prompt blocks; copy the partial last one before anyone writes to it.
    // (A parent preempted right after its prompt — token eviction found no block for a
    // copy — holds no blocks: its siblings recompute too.)
    if (parent.kv.num_blocks() == 0 || !kv_.fork(parent.kv, parent.prompt_len, sib->kv)) {
      sched_.add(std::move(sib));  // no block for its copy now: it will recompute (mostly from the cache)
      continue;
    }
    sib->num_computed = parent.prompt_len;
    Sequence* raw = sib.get();
    sched_.add_running(std::move(sib));
    sample_next(*raw, logits);
  }
}

bool EngineImpl::sample_next(Sequence& s, const float* logits, int32_t* token) {
  const int n_vocab = model_->config().n_vocab;
  const uint32_t* allowed = s.matcher ? s.matcher->mask(s.grammar_state) : nullptr;
  const float* sampled = logits;
  if (s.params.adjusts_logits()) {  // logit_bias, penalties over this choice's tokens
    adjusted_logits_.resize(static_cast<size_t>(n_vocab));
    adjust_logits(logits, n_vocab, s.params, s.tokens.data(), s.tokens.size(), static_cast<size_t>(s.role_prompt_len),
                  adjusted_logits_.data());
    // min_tokens (counted on this engine's prompt: a resumed choice's was lowered by the router)
    if (s.num_generated() < s.params.min_tokens)
      ban_stop_tokens(adjusted_logits_.data(), n_vocab, s.params, tok_->vocab().eog_ids);
    sampled = adjusted_logits_.data();
  }
  const int32_t tok = sample_token(sampled, n_vocab, s.params, s.rng, allowed);
  if (token) *token = tok;
  if (tok < 0) {
    StreamDelta d;
    d.error = "the grammar allows no token of the vocabulary here";
    finish(&s, FinishReason::Error, std::move(d));
    return true;
  }
  return process_token(s, tok, s.params.top_logprobs >= 0
                            ? std::optional<TokenLogprob>(token_logprobs(logits, n_vocab, tok, s.params.top_logprobs))
                            : std::nullopt);
}

bool EngineImpl::step() {
  prepare_drafts();
  std::vector<ScheduledSeq> plan = sched_.schedule();
  finish_drafts(plan);
  // Before any token of this step is pushed: a client that reads /metrics once its
  // request ends sees that request's prefix-cache lookup.
  metrics_.add_prefix_query(sched_.prefix_queries() - reported_queries_, sched_.prefix_hits() - reported_hits_);
  reported_queries_ = sched_.prefix_queries();
  reported_hits_ = sched_.prefix_hits();
  start_remote_prefills();
  if (plan.empty()) return false;
  const StepShape shape = step_shape(plan);
  const int bs = kv_.block_size();
  const double now = now_seconds();
  model::Batch batch;
  // Token eviction (--kv-budget): a sequence that evicted keeps its kept entries in the
  // leading slots; its token at position pos goes to slot index pos - num_evicted and
  // attends to that many + 1 entries (Batch::n_keys, only set when some sequence evicted).
  // h2o sequences get an attention-mass row per token (Batch::attn_mass).
  const bool any_evicted = std::any_of(plan.begin(), plan.end(), [](const ScheduledSeq& p) { return p.seq->kv.num_evicted > 0; });
  const bool mass = cfg_.kv_evict.needs_attention_mass();
  size_t mass_floats = 0;
  for (const ScheduledSeq& p : plan)
    if (mass && p.seq->kv_budget > 0)
      for (int j = 0; j < p.n_tokens; ++j) mass_floats += p.seq->num_computed + j - p.seq->kv.num_evicted + 1;
  attn_mass_.assign(mass_floats, 0.f);
  size_t mass_at = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    Sequence& s = *plan[i].seq;
    if (s.group->first_scheduled_time < 0) s.group->first_scheduled_time = now;
    batch.block_tables.push_back(s.kv.block_table.blocks.data());
    for (int j = 0; j < plan[i].n_tokens; ++j) {
      const int pos = s.num_computed + j;
      const int entry = pos - s.kv.num_evicted;  // slot index in the block table
      // Past the sequence's tokens: its proposal (speculative decoding).
      batch.tokens.push_back(pos < static_cast<int>(s.tokens.size()) ? s.tokens[pos] : s.spec_draft[pos - s.tokens.size()]);
      batch.positions.push_back(pos);
      batch.slot_mapping.push_back(s.kv.block_table.slot(entry, bs));
      if (any_evicted) batch.n_keys.push_back(entry + 1);
      if (mass_floats > 0) {
        const bool h2o = s.kv_budget > 0;
        batch.attn_mass.push_back(h2o ? attn_mass_.data() + mass_at : nullptr);
        if (h2o) mass_at += entry + 1;
      }
      batch.seq_ids.push_back(static_cast<int32_t>(i));
      // Prompt tokens take the reference's batched-prompt matmul orders (by position in
      // the prompt); generated tokens (also when recomputed after preemption) the decode
      // order. See kernels::matmul.
      batch.gemm_order.push_back(kernels::gemm_order_flag(pos, s.role_prompt_len));
    }
    if (!s.spec_draft.empty())  // every row of a verification needs its logits
      for (int j = plan[i].n_tokens; j > 0; --j) batch.logits_rows.push_back(batch.n_tokens() - j);
    else if (plan[i].needs_logits) batch.logits_rows.push_back(batch.n_tokens() - 1);
  }
  if (std::any_of(plan.begin(), plan.end(), [](const ScheduledSeq& p) { return p.seq->kv_sink != nullptr; }))
    batch.after_layer = [&](int layer) { emit_sink_blocks(plan, layer); };
  const int n_vocab = model_->config().n_vocab;
  const double forward_start = now_seconds();
  const float* logits = model_->forward(batch, kv_.layers());  // the model's workspace, valid this step
  const double forward_s = now_seconds() - forward_start;
  sched_.observe_step(batch.n_tokens(), forward_s);  // sizes chunks under TPOT targets
  PDS_LOG_DEBUG("step: {} sequences, {} tokens, {} logits rows, {} waiting; forward {:.1f} ms", plan.size(),
                batch.n_tokens(), batch.logits_rows.size(), sched_.num_waiting(), forward_s * 1e3);

  size_t row = 0;
  mass_at = 0;
  for (const ScheduledSeq& p : plan) {
    Sequence& s = *p.seq;
    if (mass_floats > 0 && s.kv_budget > 0)  // in position order (kv::add_attention_mass)
      for (int j = 0; j < p.n_tokens; ++j) {
        const int keys = s.num_computed + j - s.kv.num_evicted + 1;
        kv::add_attention_mass(s.kv.attn_mass, attn_mass_.data() + mass_at, keys);
        mass_at += keys;
      }
    if (!s.spec_draft.empty()) {
      const int rows = verify_drafts(s, logits + row * n_vocab);
      row += rows;
      continue;
    }
    s.num_computed += p.n_tokens;
    sched_.on_computed(s);
    if (!p.needs_logits) continue;
    const float* l = logits + row++ * n_vocab;
    if (s.choice_index == 0 && !s.group->pending_forks.empty()) fork_choices(s, l);
    sample_next(s, l);
  }
  end_spec_step();
  step_timings_.record(shape, iteration_start_, now_seconds());
  return true;
}

StepShape EngineImpl::step_shape(const std::vector<ScheduledSeq>& plan) const {
  StepShape shape;
  for (const ScheduledSeq& p : plan) {
    const Sequence& s = *p.seq;
    if (s.num_computed + 1 >= static_cast<int>(s.tokens.size())) {  // one token (plus any draft rows)
      ++shape.decodes;
      shape.context_sum += s.num_computed + p.n_tokens;
      continue;
    }
    shape.chunks.emplace_back(p.n_tokens, s.num_computed);
    // A request prefilled here for the first time (not one whose KV came from elsewhere).
    if (s.group->first_scheduled_time < 0 &&
        (shape.earliest_new_arrival < 0 || s.group->arrival_time < shape.earliest_new_arrival))
      shape.earliest_new_arrival = s.group->arrival_time;
  }
  return shape;
}

void EngineImpl::publish_stats() {
  const kv::KvUsage u = kv_.usage();
  stats_blocks_used_ = u.used;
  stats_blocks_cached_ = u.cached;
  stats_blocks_free_ = u.free;
  stats_namespaces_ = static_cast<int64_t>(kv_.num_cache_namespaces());
  stats_running_ = static_cast<int64_t>(sched_.num_running());
  stats_waiting_ = static_cast<int64_t>(sched_.num_waiting() + sched_.num_loading());
  stats_awaiting_kv_ = static_cast<int64_t>(sched_.num_awaiting());
  stats_preemptions_ = sched_.num_preemptions();
}

std::optional<std::chrono::steady_clock::time_point> EngineImpl::next_deadline() {
  double nearest = 0;
  sched_.for_each([&](Sequence* s) {
    // A timed-out sequence awaiting remote KV ends when its cancelled transfer reports.
    if (s->deadline > 0 && !s->cancel_sent && (nearest == 0 || s->deadline < nearest)) nearest = s->deadline;
    if (queue_expired(*s, s->queue_deadline) && (nearest == 0 || s->queue_deadline < nearest)) nearest = s->queue_deadline;
  });
  if (nearest == 0) return std::nullopt;
  using namespace std::chrono;
  return steady_clock::time_point(ceil<steady_clock::duration>(duration<double>(nearest)));  // now_seconds()'s clock
}

void EngineImpl::run() {
  if (cfg_.threads > 0) kernels::set_compute_threads(cfg_.threads);  // else: every CPU the process may use
  while (true) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (stop_) break;
    }
    iteration_start_ = now_seconds();
    admit_inbox();
    drain_remote_results();
    drain_store_results();
    reap();
    const bool computed = step();
    publish_stats();
    if (computed && cfg_.fault_step_delay_ms > 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(cfg_.fault_step_delay_ms));
    if (computed) continue;
    // Nothing can progress until an event: sleep (no polling, also while every sequence
    // awaits remote KV). An event raised since the checks above makes the wait return.
    if (const auto deadline = next_deadline()) wake_->wait_until(*deadline);
    else wake_->wait();
  }
  // Shutdown: every outstanding request ends with Abort and frees its blocks; transfers
  // still writing into blocks are cancelled and waited for first.
  sched_.for_each([&](Sequence* s) {
    if (sched_.find_awaiting(s->id, s->choice_index) == s && !s->cancel_sent) {
      cfg_.kv_source->cancel(s->id);
      s->cancel_sent = true;
    }
    s->stream->abort();
  });
  {
    std::unique_lock<std::mutex> lk(remote_mu_);
    remote_idle_.wait_for(lk, std::chrono::seconds(10), [&] { return remote_inflight_ == 0; });
  }
  drain_remote_results();
  admit_inbox();
  std::vector<Sequence*> all;
  sched_.for_each([&](Sequence* s) { all.push_back(s); });
  for (Sequence* s : all) finish(s, FinishReason::Abort, {});
  publish_stats();
}

}  // namespace detail

using detail::EngineImpl;

// EngineConfig's value-initialised default (engine.h only declares the enum).
static_assert(SchedulingPolicy{} == SchedulingPolicy::kFcfs);

Result<std::unique_ptr<Engine>> Engine::create(const EngineConfig& cfg) {
  const gguf::FileMemory weights_memory = cfg.mmap ? gguf::FileMemory::kMmap : gguf::FileMemory::kHugePages;
  auto m = model::Model::load(cfg.model_path, weights_memory);
  if (!m.ok()) return m.status();
  auto tok = tokenizer::Tokenizer::from_gguf(m.value()->file());
  if (!tok.ok()) return tok.status().annotate(cfg.model_path);
  const model::ModelConfig& mc = m.value()->config();
  if (cfg.block_size < 1 || cfg.block_size > 1024) return Status::InvalidArgument("--block-size must be in [1, 1024]");
  if (cfg.max_batched_tokens < 1) return Status::InvalidArgument("--max-batched-tokens must be >= 1");
  if (cfg.max_seqs < 1) return Status::InvalidArgument("--max-seqs must be >= 1");
  if (std::string why = cfg.kv_evict.check(cfg.kv_budget); !why.empty()) return Status::InvalidArgument(why);
  const int n_ctx = cfg.ctx_size > 0 ? cfg.ctx_size : mc.n_ctx;
  m.value()->set_context_length(n_ctx);  // phi3 long-RoPE: long or short factors, as llama.cpp picks them
  if (std::string why = spec_config_error(cfg.spec, mc); !why.empty()) return Status::InvalidArgument(why);
  // A step's tokens and logits rows (a verification: one per row).
  m.value()->reserve(cfg.max_batched_tokens, cfg.spec.method == SpecMethod::kOff
                                                 ? cfg.max_seqs
                                                 : std::min(cfg.max_batched_tokens, cfg.max_seqs * (cfg.spec.k + 1)));
  auto draft = load_draft_model(cfg.spec, *m.value(), weights_memory);
  if (!draft.ok()) return draft.status();

  if (!kernels::kv_dtype_fits(cfg.kv_dtype, mc.head_dim))
    return Status::InvalidArgument(std::string("--kv-dtype ") + kv::kv_dtype_name(cfg.kv_dtype) +
                                   " needs a head dimension that is a multiple of 32; this model's head_dim is " +
                                   std::to_string(mc.head_dim));
  kv::KvCacheShape shape;
  shape.n_layers = mc.n_layer;
  shape.n_kv_heads = mc.n_head_kv;
  shape.head_dim = mc.head_dim;
  shape.block_size = cfg.block_size;
  shape.dtype = cfg.kv_dtype;
  const int64_t per_block = shape.bytes_per_block();
  const int64_t blocks_per_ctx = (n_ctx + cfg.block_size - 1) / cfg.block_size;
  int64_t num_blocks = cfg.num_kv_blocks;
  if (num_blocks <= 0 && cfg.kv_cache_mb > 0) num_blocks = (cfg.kv_cache_mb << 20) / per_block;
  if (num_blocks <= 0 && cfg.kv_cache_mb <= 0)
    num_blocks = std::max(blocks_per_ctx, std::min<int64_t>(blocks_per_ctx * cfg.max_seqs, detail::kDefaultKvBudgetBytes / per_block));
  if (num_blocks < 1) return Status::InvalidArgument("the KV cache must hold at least one block (" + std::to_string(per_block) + " bytes)");
  if (num_blocks > std::numeric_limits<int32_t>::max())
    return Status::InvalidArgument("the KV cache of " + std::to_string(num_blocks) + " blocks is past the " +
                                   std::to_string(std::numeric_limits<int32_t>::max()) +
                                   " a block id can name; lower --kv-cache-mb / --num-kv-blocks");
  if (const uint64_t avail = HugePageBuffer::available_memory(); avail > 0 && uint64_t(num_blocks) * per_block > avail)
    return Status::InvalidArgument("the KV cache (" + std::to_string((num_blocks * per_block) >> 20) +
                                   " MiB) does not fit in the available memory (" + std::to_string(avail >> 20) +
                                   " MiB); lower --kv-cache-mb / --num-kv-blocks");
  shape.num_blocks = static_cast<int32_t>(num_blocks);

  SchedulerConfig sc;
  sc.max_batched_tokens = cfg.max_batched_tokens;
  sc.max_seqs = cfg.max_seqs;
  sc.long_prefill_threshold = cfg.long_prefill_threshold;
  sc.policy = cfg.scheduling_policy;
  sc.token_eviction = cfg.kv_evict;

  PDS_LOG_INFO("model {}: {} layer{}, n_embd {}, {} heads ({} KV), vocab {}, context {}; weights {} ({} MiB{})",
               cfg.model_path, mc.n_layer, mc.n_layer == 1 ? "" : "s", mc.n_embd, mc.n_head, mc.n_head_kv, mc.n_vocab, n_ctx,
               m.value()->file().memory() == gguf::FileMemory::kHugePages ? "copied to huge pages" : "memory-mapped",
               m.value()->file().file_size() >> 20,
               m.value()->relaid_bytes() > 0
                   ? ", " + std::to_string(m.value()->relaid_bytes() >> 20) + " MiB of them in 16-row tiles"
                   : std::string());
  PDS_LOG_INFO("KV cache: {} blocks x {} tokens ({} MiB, {}), prefix cache {}", shape.num_blocks, shape.block_size,
               num_blocks * per_block >> 20, kv::kv_dtype_name(cfg.kv_dtype),
               cfg.prefix_cache ? std::string("on (") + kv::eviction_policy_name(cfg.eviction) + ")" : std::string("off"));
  const int cpus = kernels::available_cpus(), threads = cfg.threads > 0 ? cfg.threads : cpus;
  const bool avx512 = kernels::best_isa() == kernels::Isa::kAvx512Vnni;
  // The extensions the AVX-512 path uses (" + gfni + amx"), then the ones the CPU has but the
  // environment turned off (" (gfni off: PDSERVE_GFNI)").
  std::string on, off;
  if (avx512 && kernels::cpu_features().gfni) {
    if (kernels::gfni_enabled()) on += " + gfni";
    else off += " (gfni off: PDSERVE_GFNI)";
  }
  if (avx512 && kernels::amx_available()) {
    if (kernels::amx_enabled()) on += " + amx";
    else off += " (amx off: PDSERVE_AMX)";
  }
  PDS_LOG_INFO("compute threads: {} ({} CPU{} available to this process), kernels: {}{}{}{}", threads, cpus, cpus == 1 ? "" : "s",
               kernels::isa_name(kernels::best_isa()), on, off, kernels::isa_set_by_env() ? " (PDSERVE_ISA)" : "");
  if (threads > cpus)
    PDS_LOG_WARN("--threads {} is more than the {} CPU{} this process may run on: the threads take turns on a core, "
                 "which is slower than --threads {}",
                 threads, cpus, cpus == 1 ? "" : "s", cpus);
  if (cfg.kv_budget >= n_ctx)
    PDS_LOG_WARN("--kv-budget {} is not below the context length {}: no token is ever evicted", cfg.kv_budget, n_ctx);
  if (cfg.kv_budget > 0)
    PDS_LOG_INFO("token eviction: {} tokens kept per sequence ({}, {} sinks, {} recent)", cfg.kv_budget,
                 kv::token_eviction_name(cfg.kv_evict.policy), cfg.kv_evict.sinks, cfg.kv_evict.recent_for(cfg.kv_budget));
  if (cfg.spec.method != SpecMethod::kOff) {
    PDS_LOG_INFO("speculative decoding: {} (k up to {}{})", spec_method_name(cfg.spec.method), cfg.spec.k,
                 cfg.spec.adaptive ? ", adaptive" : "");
    if (cfg.kv_budget > 0)
      PDS_LOG_WARN("--speculative is off for sequences under --kv-budget (token eviction keeps one token per step)");
  } else if (cfg.spec.draft_layers > 0 || !cfg.spec.draft_model.empty()) {
    PDS_LOG_WARN("--draft-layers / --draft-model have no effect without --speculative layerskip|draft");
  }
  std::unique_ptr<kv::KvTiers> tiers;
  if (cfg.kv_tiers.any()) {
    if (!cfg.prefix_cache) return Status::InvalidArgument("--kv-offload-dir / --kv-store need the prefix cache (drop --no-prefix-cache)");
    auto t = kv::KvTiers::open(cfg.kv_tiers);
    if (!t.ok()) return t.status();
    tiers = std::move(t.value());
  }
  return std::unique_ptr<Engine>(
      new EngineImpl(cfg, std::move(m.value()), std::move(tok.value()), shape, n_ctx, sc, cfg.eviction, std::move(draft.value()),
                     std::move(tiers)));
}

}  // namespace pdserve::engine
