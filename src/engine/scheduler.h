// Scheduler: picks which sequences run in the next step and how many tokens each,
// under a token budget (continuous batching with chunked prefill, vLLM-style), and
// allocates their KV blocks, preempting (recompute) the newest sequence when blocks
// run out.
#pragma once

#include <deque>
#include <list>
#include <memory>
#include <vector>

#include "engine/sequence.h"
#include "kv/block_pool.h"

namespace pdserve::engine {

struct SchedulerConfig {
  int max_batched_tokens = 2048;  // token budget per step
  int max_seqs = 64;              // running sequences at most
  int block_size = 16;
};

/// A sequence's share of one step: run tokens [num_computed, num_computed + n_tokens).
struct ScheduledSeq {
  Sequence* seq;
  int n_tokens;
  bool needs_logits;  // the chunk reaches the end of the sequence ⇒ sample a token
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& cfg, kv::BlockPool& pool) : cfg_(cfg), pool_(pool) {}

  void add(std::unique_ptr<Sequence> seq) { waiting_.push_back(std::move(seq)); }

  /// Plans one step. Running sequences go first, oldest first (decodes and unfinished
  /// prefill chunks), then waiting ones are admitted in FCFS order while the budget,
  /// max_seqs and free blocks allow. A running sequence that cannot get a block
  /// preempts the newest running sequence (its blocks are freed and it re-enters the
  /// waiting queue at the front, to be recomputed from prompt + generated tokens).
  std::vector<ScheduledSeq> schedule();

  /// Frees the blocks of `seq` (tail first) and removes it from the running list.
  std::unique_ptr<Sequence> finish(Sequence* seq);

  /// Visits every sequence, running and waiting.
  template <typename F>
  void for_each(F&& f) {
    for (auto& s : running_) f(s.get());
    for (auto& s : waiting_) f(s.get());
  }
  /// Removes a waiting sequence (abort before it ran).
  std::unique_ptr<Sequence> remove_waiting(Sequence* seq);

  size_t num_running() const { return running_.size(); }
  size_t num_waiting() const { return waiting_.size(); }
  int64_t num_preemptions() const { return num_preemptions_; }

 private:
  bool ensure_blocks(Sequence& s, int n_tokens);
  void free_blocks(Sequence& s);
  void preempt(std::list<std::unique_ptr<Sequence>>::iterator it);

  SchedulerConfig cfg_;
  kv::BlockPool& pool_;
  std::list<std::unique_ptr<Sequence>> running_;   // arrival order, oldest first
  std::deque<std::unique_ptr<Sequence>> waiting_;
  int64_t num_preemptions_ = 0;
};

}  // namespace pdserve::engine
