#include "engine/scheduler.h"

#include <algorithm>

namespace pdserve::engine {

bool Scheduler::ensure_blocks(Sequence& s, int n_tokens) {
  const int need = (s.num_computed + n_tokens + cfg_.block_size - 1) / cfg_.block_size;
  const int have = static_cast<int>(s.block_table.blocks.size());
  if (need <= have) return true;
  return pool_.allocate(need - have, s.block_table.blocks);
}

void Scheduler::free_blocks(Sequence& s) {
  auto& b = s.block_table.blocks;
  for (auto it = b.rbegin(); it != b.rend(); ++it) pool_.decref(*it);
  b.clear();
  s.num_computed = 0;
}

void Scheduler::preempt(std::list<std::unique_ptr<Sequence>>::iterator it) {
  free_blocks(**it);
  (*it)->num_preemptions++;
  num_preemptions_++;
  waiting_.push_front(std::move(*it));
  running_.erase(it);
}

std::vector<ScheduledSeq> Scheduler::schedule() {
  std::vector<ScheduledSeq> plan;
  int budget = cfg_.max_batched_tokens;

  for (auto it = running_.begin(); it != running_.end() && budget > 0;) {
    Sequence& s = **it;
    const int n = std::min(s.num_uncomputed(), budget);
    bool ok = ensure_blocks(s, n);
    while (!ok) {
      // Out of blocks: preempt the newest running sequence not yet in the plan.
      auto victim = std::prev(running_.end());
      const bool self = victim == it;
      preempt(victim);
      if (self) break;
      ok = ensure_blocks(s, n);
    }
    if (!ok) break;  // `s` itself was preempted; it was the newest
    plan.push_back({&s, n, s.num_computed + n == static_cast<int>(s.tokens.size())});
    budget -= n;
    ++it;
  }

  while (budget > 0 && !waiting_.empty() && static_cast<int>(running_.size()) < cfg_.max_seqs) {
    Sequence& s = *waiting_.front();
    const int n = std::min(s.num_uncomputed(), budget);
    if (!ensure_blocks(s, n)) break;
    plan.push_back({&s, n, s.num_computed + n == static_cast<int>(s.tokens.size())});
    budget -= n;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
  return plan;
}

std::unique_ptr<Sequence> Scheduler::finish(Sequence* seq) {
  for (auto it = running_.begin(); it != running_.end(); ++it) {
    if (it->get() == seq) {
      free_blocks(*seq);
      std::unique_ptr<Sequence> out = std::move(*it);
      running_.erase(it);
      return out;
    }
  }
  return remove_waiting(seq);
}

std::unique_ptr<Sequence> Scheduler::remove_waiting(Sequence* seq) {
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
    if (it->get() == seq) {
      free_blocks(*seq);
      std::unique_ptr<Sequence> out = std::move(*it);
      waiting_.erase(it);
      return out;
    }
  }
  return nullptr;
}

}  // namespace pdserve::engine
