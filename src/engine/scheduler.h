// Scheduler: picks which sequences run in the next step and how many tokens each, under
// a token budget (continuous batching with chunked prefill, as vLLM v1), and asks the
// KvCacheManager for their KV: prefix-cache matching at admission, slots for each chunk,
// caching of full prompt blocks as soon as they are computed, and preemption by
// recompute when the pool runs out.
#pragma once

#include <deque>
#include <functional>
#include <utility>
#include <list>
#include <memory>
#include <vector>

#include "engine/sequence.h"
#include "kv/kv_cache_manager.h"

namespace pdserve::engine {

enum class SchedulingPolicy { kFcfs, kPriority };

struct SchedulerConfig {
  int max_batched_tokens = 2048;  // token budget per step
  int max_seqs = 64;              // running sequences at most
  int long_prefill_threshold = 0;  // max prompt tokens of one sequence per step (0 = budget)
  SchedulingPolicy policy = SchedulingPolicy::kFcfs;
  kv::TokenEvictionConfig token_eviction;  // for sequences with a kv_budget
};

/// A sequence's share of one step: run tokens [num_computed, num_computed + n_tokens).
struct ScheduledSeq {
  Sequence* seq;
  int n_tokens;
  bool needs_logits;  // the chunk reaches the end of the sequence ⇒ sample a token
};

class Scheduler {
 public:
  /// `kv` owns every sequence's blocks; the scheduler only decides when to ask for them.
  Scheduler(const SchedulerConfig& cfg, kv::KvCacheManager& kv) : cfg_(cfg), kv_(kv) {}

  void add(std::unique_ptr<Sequence> seq);
  /// Adds a sequence that already holds blocks straight to the running set (a fork).
  void add_running(std::unique_ptr<Sequence> seq) { running_.push_back(std::move(seq)); }

  /// Plans one step. Decodes go first (one token each, so long prompts never starve
  /// them), then unfinished prefill chunks, then waiting sequences are admitted (FCFS, or
  /// by priority then arrival) while the budget, max_seqs and blocks allow. A sequence
  /// that cannot get a block preempts the lowest-priority, latest-arriving running
  /// sequence not yet in the plan (its blocks are freed; it is recomputed later).
  /// Speculative decoding: a decode with a proposal (Sequence::spec_want) runs 1 +
  /// draft_slots() tokens, the ones past its end being its proposal (needs_logits set).
  std::vector<ScheduledSeq> schedule();

  /// After a forward pass: caches the full prompt blocks `seq` has filled, and, for a
  /// sequence with a kv_budget whose prompt is complete, evicts down to the budget.
  ///
  /// Eviction points (so a recompute after preemption re-evicts exactly as the first run):
  /// the prompt (role_prompt_len tokens) is computed with full attention, in any chunks,
  /// then evicted to the budget; from then on one token per step (chunk() gives such a
  /// sequence one token at a time, also when recomputing), each followed by an eviction.
  /// The h2o attention mass is added per token in position order, so it does not depend on
  /// the chunking. Sequences with a budget do not use the prefix cache (no match, no
  /// insert): h2o needs the mass of every prompt query, and the prefix cache then never
  /// holds a block that eviction compacts. Blocks shared with n > 1 siblings are copied
  /// before compaction; schedule() keeps room for those copies (eviction_copies).
  void on_computed(Sequence& seq);

  /// Decides at admission whether a sequence's prompt KV comes from a prefill worker
  /// (decode worker with a KvSource). Such a sequence gets blocks for its whole prompt
  /// and waits (outside the running set, holding its blocks) until remote_done().
  void set_remote_prefill_decider(std::function<bool(Sequence&)> f) { remote_decider_ = std::move(f); }
  /// Sequences that started waiting for remote KV in the last schedule().
  std::vector<Sequence*> take_started_remote() { return std::exchange(started_remote_, {}); }
  Sequence* find_awaiting(int64_t seq_id, int choice_index);
  /// A remote prefill ended: on success the whole prompt is computed; otherwise the
  /// sequence prefills locally from its cached prefix. It joins the running set.
  void remote_done(Sequence& seq, bool ok);
  size_t num_awaiting() const { return awaiting_.size(); }

  /// KV store tiers (kv/kv_tiers.h): called at admission after the prefix-cache match of
  /// a sequence that may use the cache, with the most prompt tokens a hit may cover.
  /// Returns the tokens it added to the hit (blocks imported from a tier), or -1 when the
  /// sequence must wait for a fetch: it then leaves the queue, holding no blocks, until
  /// store_loaded() (other sequences keep running).
  void set_store_loader(std::function<int(Sequence&, int)> f) { store_loader_ = std::move(f); }
  Sequence* find_loading(int64_t seq_id, int choice_index);
  /// The fetch of a loading sequence ended: it queues for admission again.
  void store_loaded(Sequence& seq);
  size_t num_loading() const { return loading_.size(); }

  /// Frees the blocks of `seq` (tail first) and removes it from the scheduler.
  std::unique_ptr<Sequence> finish(Sequence* seq);

  /// Visits every sequence, running and waiting.
  template <typename F>
  void for_each(F&& f) {
    for (auto& s : running_) f(s.get());
    for (auto& s : waiting_) f(s.get());
    for (auto& s : awaiting_) f(s.get());
    for (auto& s : loading_) f(s.get());
  }

  size_t num_running() const { return running_.size(); }
  size_t num_waiting() const { return waiting_.size(); }
  int64_t num_preemptions() const { return num_preemptions_; }
  /// Prefix-cache lookups at first admission, in tokens.
  int64_t prefix_queries() const { return prefix_queries_; }
  int64_t prefix_hits() const { return prefix_hits_; }

  /// After a forward pass of `tokens` tokens that took `seconds`: updates the measured
  /// cost per token that sizes prefill chunks under TPOT targets (see tpot_chunk_cap).
  void observe_step(int tokens, double seconds);

 private:
  bool before(const Sequence& a, const Sequence& b) const;  // scheduling order
  bool ensure_blocks(Sequence& s, int n_tokens, const std::vector<ScheduledSeq>& plan);
  enum class Admit { kRun, kRemote, kNoRoom, kLoading };
  Admit admit(Sequence& s, int budget, int& n_out);
  int chunk(const Sequence& s, int budget) const;
  /// Speculative decoding: draft positions a decode sequence gets this step, at most
  /// s.spec_want (set to the result): what the budget leaves after its own token, and
  /// what its blocks plus the free list hold, less one free block per other running
  /// sequence, so drafts never preempt, evict cached prefixes or starve a plain decode.
  int draft_slots(Sequence& s, int budget) const;
  /// Blocks the token eviction after running n_tokens of `s` may copy (0 when it does not evict then).
  int copies_after(const Sequence& s, int n_tokens) const;
  void free_blocks(Sequence& s);
  void preempt(std::list<std::unique_ptr<Sequence>>::iterator it);

  // ---- SLO classes (Sequence::slo_class >= 0). Without classed sequences none of this
  // changes the order or the plan. Once one arrives the order is: class (unclassed =
  // medium), then earliest deadline (arrival + TTFT target; unclassed: arrival), then
  // the classless order.
  int class_rank(const Sequence& s) const { return s.slo_class < 0 ? 1 : s.slo_class; }
  double edf_key(const Sequence& s) const { return s.slo_deadline > 0 ? s.slo_deadline : s.arrival_time; }
  /// For waiting `s`: frees what it lacks at the expense of lower-class running sequences.
  /// kBudget: drops the worst lower-class entry from `plan` (that sequence skips a step,
  /// keeping its blocks) and gives its tokens back to `budget`. kSeats / kKv: preempts the
  /// worst lower-class running sequence (recomputed later, in its place in line). False
  /// when no lower-class sequence is left to take from.
  enum class Shortage { kBudget, kSeats, kKv };
  bool make_room(const Sequence& s, Shortage what, std::vector<ScheduledSeq>& plan, int& budget);
  /// The most prompt tokens one prefill chunk may have so that a step stays within the
  /// tightest TPOT target of the running decodes (measured cost per token); 0 = no cap.
  int tpot_chunk_cap() const;
  /// Sets step_fit_: the tokens a step may hold within the tightest TPOT target of the
  /// running decodes (tightest_tpot_), by the measured cost per token; 0 = no cap.
  void plan_tpot_fit();
  /// Whether the decode of `s` joins a step that already holds `planned_tokens`: a decode
  /// whose TPOT target is looser than the tightest (a lower class) skips the step, keeping
  /// its seat and blocks, once the step holds what fits in the tightest target — so many
  /// low-class decodes cannot stretch the step past the high class's TPOT.
  bool decode_fits(const Sequence& s, int planned_tokens) const;
  /// The tokens a prefill chunk of `s` may have when `budget` is left: what step_fit_
  /// leaves (0 ⇒ a lower-class chunk skips the step), at least a block for the tightest
  /// class (its TTFT); `budget` when there is no step_fit_.
  int fit_room(const Sequence& s, int budget) const;

  SchedulerConfig cfg_;
  kv::KvCacheManager& kv_;
  std::list<std::unique_ptr<Sequence>> running_;
  std::deque<std::unique_ptr<Sequence>> waiting_;  // kept in scheduling order
  std::list<std::unique_ptr<Sequence>> awaiting_;  // waiting for remote KV, holding blocks
  std::vector<Sequence*> started_remote_;
  std::function<bool(Sequence&)> remote_decider_;
  std::list<std::unique_ptr<Sequence>> loading_;  // waiting for a KV store fetch, holding no blocks
  std::function<int(Sequence&, int)> store_loader_;
  int64_t num_preemptions_ = 0;
  int reserved_copies_ = 0;  // this step's token-eviction copy-on-write blocks (eviction_copies)
  int64_t prefix_queries_ = 0, prefix_hits_ = 0;
  bool classes_seen_ = false;      // a classed sequence was added: class order in force
  double step_s_per_token_ = 0;    // measured forward cost (EWMA), 0 = not measured yet
  int chunk_cap_ = 0;              // this step's tpot_chunk_cap()
  int step_fit_ = 0;               // this step's plan_tpot_fit()
  double tightest_tpot_ = 0;
};

}  // namespace pdserve::engine
