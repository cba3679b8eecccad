// The engine's side of speculative decoding: asking proposers for drafts around the
// scheduler, and verifying them exactly (engine/spec_proposer.h).
//
// Exactness: a sequence's last token and its k proposed tokens run as k + 1 rows of the
// normal batch, each in decode numerics (gemm order 0, logits through the decode-order
// last FFN and head), so row j's logits are bit for bit those plain decoding computes at
// that position once the proposals before it are the tokens it emitted (batch invariance,
// DESIGN.md §3). Row j is then sampled as plain decoding samples — the request's own
// generator, its grammar state, one draw per emitted token in order — and generation goes
// on to row j + 1 only while the sampled token equals proposal j. So every emitted token,
// its logprobs and the generator's state are those of plain decoding, for greedy and
// seeded sampling alike. (Rejection sampling (Leviathan et al. 2023) would accept more
// proposals under temperature > 0 but draw different tokens than plain decoding; we keep
// the outputs and give up that acceptance.)
#include <algorithm>

#include "base/clock.h"
#include "engine/engine_impl.h"

namespace pdserve::engine::detail {

void EngineImpl::prepare_drafts() {
  if (!proposer_) return;
  spec_timing_.step_start = now_seconds();
  spec_timing_.proposer_seconds = 0;
  std::vector<Sequence*> seqs, decodes;
  std::vector<int> ks;
  sched_.for_each([&](Sequence* s) {
    s->spec_want = 0;
    s->spec_draft.clear();
    // Running decodes only (waiting and awaiting sequences have nothing computed), not
    // with token eviction (one token per step) nor on a prefill worker's sink sequences.
    if (s->num_computed == 0 || s->num_uncomputed() != 1 || s->kv_budget > 0 || s->kv_sink) return;
    decodes.push_back(s);
  });
  // The acceptance a draft row must beat to pay for itself at this batch size.
  const double threshold = spec_timing_.cost.threshold(static_cast<int>(decodes.size()));
  if (cfg_.spec.adaptive && !decodes.empty() && spec_timing_.cost.plain_step()) return;
  const bool cheap_probe = proposer_->cheap_probe();
  for (Sequence* s : decodes) {
    // Positions past max_len are never emitted: at most max_len - size - 1 proposals
    // (the bonus token of the last row makes up the rest).
    const int room = s->max_len - static_cast<int>(s->tokens.size()) - 1;
    const int k = std::min(room, spec_next_k(s->spec, cfg_.spec.k, cfg_.spec.adaptive, threshold, cheap_probe));
    if (k <= 0) continue;
    seqs.push_back(s);
    ks.push_back(k);
  }
  if (seqs.empty()) return;
  if (proposer_->after_schedule()) {
    for (size_t i = 0; i < seqs.size(); ++i) seqs[i]->spec_want = ks[i];
    return;
  }
  std::vector<std::vector<int32_t>> drafts;
  timed_propose(seqs, ks, drafts);
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (drafts[i].size() > static_cast<size_t>(ks[i])) drafts[i].resize(ks[i]);
    seqs[i]->spec_draft = std::move(drafts[i]);
    seqs[i]->spec_want = static_cast<int>(seqs[i]->spec_draft.size());
  }
}

void EngineImpl::finish_drafts(std::vector<ScheduledSeq>& plan) {
  if (!proposer_) return;
  finish_drafts_plan(plan);
  // What the step runs, for the cost model (end_spec_step).
  spec_timing_.rows = 0;
  spec_timing_.decode_only = !plan.empty();
  for (const ScheduledSeq& p : plan) {
    spec_timing_.rows += p.n_tokens;
    spec_timing_.decode_only = spec_timing_.decode_only && p.seq->num_uncomputed() == 1;
  }
}

void EngineImpl::end_spec_step() {
  if (!proposer_ || !spec_timing_.decode_only) return;
  spec_timing_.decode_only = false;
  spec_timing_.cost.observe_step(spec_timing_.rows,
                                 now_seconds() - spec_timing_.step_start - spec_timing_.proposer_seconds);
}

void EngineImpl::timed_propose(const std::vector<Sequence*>& seqs, const std::vector<int>& ks,
                               std::vector<std::vector<int32_t>>& drafts) {
  const double t0 = now_seconds();
  proposer_->propose(seqs, ks, drafts);
  const double dt = now_seconds() - t0;
  int tokens = 0;
  for (const auto& d : drafts) tokens += static_cast<int>(d.size());
  spec_timing_.proposer_seconds += dt;
  spec_timing_.cost.observe_proposer(tokens, dt);
}

void EngineImpl::finish_drafts_plan(std::vector<ScheduledSeq>& plan) {
  std::vector<Sequence*> seqs;
  std::vector<int> ks;
  std::vector<ScheduledSeq*> entries;
  for (ScheduledSeq& p : plan) {
    Sequence& s = *p.seq;
    const int granted = p.n_tokens - s.num_uncomputed();  // draft rows the scheduler gave
    if (granted <= 0) {
      s.spec_draft.clear();
      continue;
    }
    if (!proposer_->after_schedule()) {
      s.spec_draft.resize(granted);
      continue;
    }
    seqs.push_back(&s);
    ks.push_back(granted);
    entries.push_back(&p);
  }
  if (seqs.empty()) return;
  std::vector<std::vector<int32_t>> drafts;
  timed_propose(seqs, ks, drafts);
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (drafts[i].size() > static_cast<size_t>(ks[i])) drafts[i].resize(ks[i]);
    seqs[i]->spec_draft = std::move(drafts[i]);
    entries[i]->n_tokens = 1 + static_cast<int>(seqs[i]->spec_draft.size());  // unused slots go back after the step
    if (seqs[i]->spec_draft.empty()) kv_.truncate(seqs[i]->kv, seqs[i]->num_computed + 1);
  }
}

int EngineImpl::verify_drafts(Sequence& s, const float* logits) {
  const int n_vocab = model_->config().n_vocab;
  const std::vector<int32_t> draft = std::move(s.spec_draft);
  s.spec_draft.clear();
  const int proposed = static_cast<int>(draft.size()), rows = proposed + 1;
  int accepted = 0;
  for (int j = 0; j < rows; ++j) {
    s.num_computed++;  // row j's token now has its K/V in the cache
    if (j == 0) {
      sched_.on_computed(s);
      // Row 0 is the prompt's last token when its last chunk was that one token (a prefix-cache
      // hit or a chunk boundary left it): choice 0 forks the request's other choices from its
      // logits, as step() does, before it samples.
      if (s.choice_index == 0 && !s.group->pending_forks.empty()) fork_choices(s, logits);
    }
    int32_t tok = -1;
    const bool ended = sample_next(s, logits + static_cast<size_t>(j) * n_vocab, &tok);
    const bool match = j < proposed && tok == draft[j];
    accepted += match;
    if (ended) {  // `s` is gone; its blocks are freed
      metrics_.record_spec(proposed, accepted);
      return rows;
    }
    if (!match) break;
  }
  metrics_.record_spec(proposed, accepted);
  spec_update(s.spec, cfg_.spec.k, proposed, accepted);
  // Roll back: the rejected positions' slots past the next token's go back to the pool.
  kv_.truncate(s.kv, s.num_computed + 1);
  return rows;
}

}  // namespace pdserve::engine::detail
