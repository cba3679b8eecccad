#include "engine/scheduler.h"

#include <algorithm>

#include "kernels/matmul.h"

namespace pdserve::engine {

bool Scheduler::before(const Sequence& a, const Sequence& b) const {
  if (classes_seen_) {
    if (class_rank(a) != class_rank(b)) return class_rank(a) < class_rank(b);
    if (edf_key(a) != edf_key(b)) return edf_key(a) < edf_key(b);
  }
  if (cfg_.policy == SchedulingPolicy::kPriority && a.priority != b.priority) return a.priority < b.priority;
  if (a.arrival_time != b.arrival_time) return a.arrival_time < b.arrival_time;
  return a.id < b.id;
}

void Scheduler::add(std::unique_ptr<Sequence> seq) {
  if (seq->slo_class >= 0 && !classes_seen_) {
    classes_seen_ = true;
    std::stable_sort(waiting_.begin(), waiting_.end(), [&](const auto& a, const auto& b) { return before(*a, *b); });
  }
  auto pos = std::upper_bound(waiting_.begin(), waiting_.end(), seq,
                              [&](const auto& a, const auto& b) { return before(*a, *b); });
  waiting_.insert(pos, std::move(seq));
}

int Scheduler::copies_after(const Sequence& s, int n_tokens) const {
  const int done = s.num_computed + n_tokens;
  if (s.kv_budget <= 0 || done < s.role_prompt_len || done - s.kv.num_evicted <= s.kv_budget) return 0;
  return kv_.eviction_copies(s.kv, s.kv_budget);
}

bool Scheduler::ensure_blocks(Sequence& s, int n_tokens, const std::vector<ScheduledSeq>& plan) {
  // Also room for the copies of the eviction that follows (token eviction), so it cannot
  // fail for want of a block: the lowest-priority sequences make room, as for slots.
  while (!kv_.allocate_slots(s.kv, s.num_computed + n_tokens) ||
         !kv_.can_take(reserved_copies_ + copies_after(s, n_tokens))) {
    // Preempt the worst running sequence that is not yet in this step's plan.
    auto victim = running_.end();
    for (auto it = running_.begin(); it != running_.end(); ++it) {
      const Sequence* c = it->get();
      if (std::any_of(plan.begin(), plan.end(), [&](const ScheduledSeq& p) { return p.seq == c; })) continue;
      if (victim == running_.end() || before(**victim, *c)) victim = it;
    }
    if (victim == running_.end()) return false;
    const bool self = victim->get() == &s;
    preempt(victim);
    if (self) return false;
  }
  reserved_copies_ += copies_after(s, n_tokens);
  return true;
}

void Scheduler::free_blocks(Sequence& s) {
  kv_.free(s.kv);
  s.num_computed = 0;
}

void Scheduler::preempt(std::list<std::unique_ptr<Sequence>>::iterator it) {
  free_blocks(**it);
  (*it)->num_preemptions++;
  num_preemptions_++;
  add(std::move(*it));
  running_.erase(it);
}

int Scheduler::chunk(const Sequence& s, int budget) const {
  int n = std::min(s.num_uncomputed(), budget);
  if (s.kv_budget > 0)  // token eviction: the prompt in chunks, then one token per step
    n = std::min(n, s.num_computed < s.role_prompt_len ? s.role_prompt_len - s.num_computed : 1);
  if (cfg_.long_prefill_threshold > 0 && n > 1) n = std::min(n, cfg_.long_prefill_threshold);
  if (chunk_cap_ > 0 && n > 1) n = std::min(n, chunk_cap_);
  return n;
}

int Scheduler::draft_slots(Sequence& s, int budget) const {
  int d = s.kv_budget > 0 ? 0 : std::min(s.spec_want, budget - 1);  // token eviction: one token per step
  if (d > 0) {
    const int64_t spare = std::max<int64_t>(0, kv_.usage().free - static_cast<int64_t>(running_.size() - 1));
    const int64_t room = (s.kv.num_blocks() + spare) * kv_.block_size() - s.num_computed - 1;
    d = static_cast<int>(std::min<int64_t>(d, room));
  }
  s.spec_want = std::max(0, d);
  return s.spec_want;
}

void Scheduler::observe_step(int tokens, double seconds) {
  if (tokens <= 0 || seconds <= 0) return;
  const double per_token = seconds / tokens;
  step_s_per_token_ = step_s_per_token_ == 0 ? per_token : 0.8 * step_s_per_token_ + 0.2 * per_token;
}

int Scheduler::tpot_chunk_cap() const {
  if (!classes_seen_ || step_s_per_token_ <= 0) return 0;
  double tightest = 0;
  int decodes = 0;
  for (const auto& s : running_) {
    if (s->num_uncomputed() != 1) continue;
    ++decodes;
    if (s->tpot_target > 0 && (tightest == 0 || s->tpot_target < tightest)) tightest = s->tpot_target;
  }
  if (tightest == 0) return 0;
  // Tokens a step can hold within the target, less this step's decodes; at least one
  // block, so a prefill always progresses.
  const int fit = static_cast<int>(tightest / step_s_per_token_) - decodes;
  return std::max(fit, kv_.block_size());
}

void Scheduler::plan_tpot_fit() {
  step_fit_ = 0;
  tightest_tpot_ = 0;
  if (!classes_seen_ || step_s_per_token_ <= 0) return;
  for (const auto& s : running_)
    if (s->num_uncomputed() == 1 && s->tpot_target > 0 && (tightest_tpot_ == 0 || s->tpot_target < tightest_tpot_))
      tightest_tpot_ = s->tpot_target;
  if (tightest_tpot_ > 0) step_fit_ = std::max(1, static_cast<int>(tightest_tpot_ / step_s_per_token_));
}

bool Scheduler::decode_fits(const Sequence& s, int planned_tokens) const {
  if (step_fit_ <= 0) return true;
  if (s.tpot_target > 0 && s.tpot_target <= tightest_tpot_) return true;  // the tightest target always runs
  return planned_tokens + 1 <= step_fit_;
}

int Scheduler::fit_room(const Sequence& s, int budget) const {
  if (step_fit_ <= 0) return budget;
  const int left = step_fit_ - (cfg_.max_batched_tokens - budget);
  if (s.tpot_target > 0 && s.tpot_target <= tightest_tpot_)  // the tightest class: at least a block
    return std::min(budget, std::max(left, kv_.block_size()));
  return std::min(budget, left);
}

bool Scheduler::make_room(const Sequence& s, Shortage what, std::vector<ScheduledSeq>& plan, int& budget) {
  if (s.slo_class < 0) return false;
  if (what == Shortage::kBudget) {
    auto worst = plan.end();
    for (auto it = plan.begin(); it != plan.end(); ++it)
      if (class_rank(*it->seq) > class_rank(s) && (worst == plan.end() || before(*worst->seq, *it->seq))) worst = it;
    if (worst == plan.end()) return false;
    budget += worst->n_tokens;
    plan.erase(worst);
    return true;
  }
  auto victim = running_.end();
  for (auto it = running_.begin(); it != running_.end(); ++it)
    if (class_rank(**it) > class_rank(s) && (victim == running_.end() || before(**victim, **it))) victim = it;
  if (victim == running_.end()) return false;
  for (auto p = plan.begin(); p != plan.end(); ++p)
    if (p->seq == victim->get()) {
      budget += p->n_tokens;
      plan.erase(p);
      break;
    }
  preempt(victim);
  return true;
}

namespace {

/// The first position in [from, to) that a prompt of `prompt_len` tokens computes in
/// another matmul order than a full prompt block (kernels::gemm_order_flag), else `to`.
int same_order_end(int from, int to, int prompt_len) {
  constexpr uint8_t kFullBlock = 1 | kernels::kGemmTiledBatch;
  for (int p = from; p < to; ++p)
    if (kernels::gemm_order_flag(p, prompt_len) != kFullBlock) return p;
  return to;
}

}  // namespace

Scheduler::Admit Scheduler::admit(Sequence& s, int budget, int& n_out) {
  // A sequence with a kv_budget neither matches nor inserts (kv_.cache_full_blocks is a
  // no-op without a match): h2o ranks by the mass of every prompt query, which a cached
  // prefix would skip, and the prefix cache never holds a block eviction compacts.
  if (kv_.prefix_caching() && s.kv.num_blocks() == 0 && s.kv_budget == 0) {
    // Reuse the longest cached prefix, but always compute at least one token (the last
    // one's logits are needed), and only prompt positions: cached blocks hold prompt-role
    // K/V, while generated tokens (a preempted or resumed sequence) are recomputed in the
    // decode role, so a match there would not be bit-identical.
    const int max_hit = std::min(static_cast<int>(s.tokens.size()) - 1, s.role_prompt_len);
    s.num_computed = kv_.match_prefix(s.kv, s.cache_salt, s.tokens.data(), max_hit);
    if (store_loader_) {
      const int added = store_loader_(s, max_hit);
      if (added < 0) {
        free_blocks(s);  // waits for its fetch without holding blocks
        return Admit::kLoading;
      }
      s.num_computed += added;
    }
    // Into the next block at token granularity: a prompt cached in full computes only
    // its last token (its logits), not the whole last block. Cached K/V were computed in a
    // full block of a prompt, i.e. with the gemm order flag 1 | kGemmTiledBatch; so are this
    // prompt's full blocks, but not its ragged last len % 4 tokens nor a micro-batch of
    // under 8 tokens: a position this prompt would compute in another order is recomputed
    // (its bits would differ from an uncached run's on Q4_0 / K-quant weights).
    // (Positions past the next block are never taken: the check stops there.)
    const int partial_end = std::min(max_hit, s.num_computed + kv_.block_size() - 1);
    s.num_computed += kv_.match_partial_block(s.kv, s.tokens.data(), same_order_end(s.num_computed, partial_end, s.role_prompt_len));
  }
  const bool remote = remote_decider_ && remote_decider_(s);
  n_out = remote ? s.num_uncomputed() : chunk(s, budget);  // remote: blocks for the whole prompt
  const int copies = remote ? 0 : copies_after(s, n_out);
  if (!kv_.allocate_slots(s.kv, s.num_computed + n_out) || !kv_.can_take(reserved_copies_ + copies)) {
    free_blocks(s);  // give back the prefix-cache hits; they stay cached
    return Admit::kNoRoom;
  }
  reserved_copies_ += copies;
  if (s.cached_tokens < 0) {  // first admission: account the prefix-cache lookup
    s.cached_tokens = s.num_computed;
    if (kv_.prefix_caching()) {
      prefix_queries_ += s.prompt_len;
      prefix_hits_ += s.num_computed;
    }
  }
  return remote ? Admit::kRemote : Admit::kRun;
}

std::vector<ScheduledSeq> Scheduler::schedule() {
  std::vector<ScheduledSeq> plan;
  int budget = cfg_.max_batched_tokens;
  reserved_copies_ = 0;
  chunk_cap_ = tpot_chunk_cap();
  plan_tpot_fit();

  std::vector<Sequence*> order;
  for (auto& s : running_) order.push_back(s.get());
  std::stable_sort(order.begin(), order.end(), [&](Sequence* a, Sequence* b) { return before(*a, *b); });
  auto still_running = [&](Sequence* s) {
    return std::any_of(running_.begin(), running_.end(), [&](const auto& r) { return r.get() == s; });
  };
  for (int phase = 0; phase < 2; ++phase) {  // 0: decodes, 1: prefill chunks
    for (Sequence* s : order) {
      if (budget <= 0) break;
      const bool decode = s->num_uncomputed() == 1;
      if (decode != (phase == 0) || !still_running(s)) continue;
      if (decode && !decode_fits(*s, cfg_.max_batched_tokens - budget)) continue;  // skips a step, keeps its blocks
      const int room = decode ? budget : fit_room(*s, budget);
      if (room <= 0) continue;  // a lower-class prefill chunk skips a step that is full
      const int n = decode ? 1 + draft_slots(*s, budget) : chunk(*s, room);
      if (!ensure_blocks(*s, n, plan)) continue;  // `s` was preempted
      plan.push_back({s, n, s->num_computed + n >= static_cast<int>(s->tokens.size())});
      budget -= n;
    }
  }

  while (!waiting_.empty()) {
    Sequence& s = *waiting_.front();
    // A classed sequence takes what it lacks from lower classes (make_room); without
    // classes these are the plain limits.
    if (static_cast<int>(running_.size() + awaiting_.size()) >= cfg_.max_seqs) {
      if (make_room(s, Shortage::kSeats, plan, budget)) continue;
      break;
    }
    while (chunk(s, budget) < chunk(s, cfg_.max_batched_tokens) && make_room(s, Shortage::kBudget, plan, budget)) {
    }
    if (budget <= 0) break;
    const int room = fit_room(s, budget);  // what the tightest running TPOT target leaves
    if (room <= 0) break;
    int n = 0;
    const Admit a = admit(s, room, n);
    if (a == Admit::kNoRoom) {
      if (make_room(s, Shortage::kKv, plan, budget)) continue;
      break;
    }
    if (a == Admit::kLoading) {
      loading_.push_back(std::move(waiting_.front()));
      waiting_.pop_front();
      continue;
    }
    if (a == Admit::kRemote) {
      started_remote_.push_back(&s);
      awaiting_.push_back(std::move(waiting_.front()));
      waiting_.pop_front();
      continue;
    }
    plan.push_back({&s, n, s.num_computed + n == static_cast<int>(s.tokens.size())});
    budget -= n;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
  return plan;
}

void Scheduler::on_computed(Sequence& s) {
  // Only blocks made entirely of prompt tokens are shared: they are computed the same way
  // (prompt role, see model::Batch::gemm_order) whichever request computes them.
  kv_.cache_full_blocks(s.kv, s.tokens.data(), std::min(s.num_computed, s.role_prompt_len));
  if (s.kv_budget > 0 && s.num_computed >= s.role_prompt_len &&
      !kv_.evict_tokens(s.kv, s.num_computed, cfg_.token_eviction, s.kv_budget)) {
    // No free block for the copy of a shared block: recompute later rather than attend to
    // more than the budget, so the KV never differs from a lone run's (the recompute
    // replays the same evictions). The sequence object stays valid for the caller.
    for (auto it = running_.begin(); it != running_.end(); ++it)
      if (it->get() == &s) {
        preempt(it);
        break;
      }
  }
}

Sequence* Scheduler::find_awaiting(int64_t seq_id, int choice_index) {
  for (auto& s : awaiting_)
    if (s->id == seq_id && s->choice_index == choice_index) return s.get();
  return nullptr;
}

void Scheduler::remote_done(Sequence& seq, bool ok) {
  for (auto it = awaiting_.begin(); it != awaiting_.end(); ++it) {
    if (it->get() != &seq) continue;
    seq.remote_tried = true;
    running_.push_back(std::move(*it));
    awaiting_.erase(it);
    if (ok) {
      seq.num_computed = static_cast<int>(seq.tokens.size());
      on_computed(seq);  // may evict (a decode worker's --kv-budget)
    } else {
      seq.num_computed = seq.kv.num_cached_blocks * kv_.block_size();  // recompute past the cached prefix
    }
    return;
  }
}

Sequence* Scheduler::find_loading(int64_t seq_id, int choice_index) {
  for (auto& s : loading_)
    if (s->id == seq_id && s->choice_index == choice_index) return s.get();
  return nullptr;
}

void Scheduler::store_loaded(Sequence& seq) {
  for (auto it = loading_.begin(); it != loading_.end(); ++it)
    if (it->get() == &seq) {
      std::unique_ptr<Sequence> s = std::move(*it);
      loading_.erase(it);
      add(std::move(s));
      return;
    }
}

std::unique_ptr<Sequence> Scheduler::finish(Sequence* seq) {
  std::unique_ptr<Sequence> out;
  for (auto it = running_.begin(); it != running_.end(); ++it) {
    if (it->get() == seq) {
      out = std::move(*it);
      running_.erase(it);
      break;
    }
  }
  for (auto it = awaiting_.begin(); !out && it != awaiting_.end(); ++it) {
    if (it->get() == seq) {
      out = std::move(*it);
      awaiting_.erase(it);
      break;
    }
  }
  for (auto it = loading_.begin(); !out && it != loading_.end(); ++it) {
    if (it->get() == seq) {
      out = std::move(*it);
      loading_.erase(it);
      break;
    }
  }
  if (!out) {
    for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
      if (it->get() == seq) {
        out = std::move(*it);
        waiting_.erase(it);
        break;
      }
    }
  }
  if (out) free_blocks(*out);
  return out;
}

}  // namespace pdserve::engine
