// The engine's side of prefill/decode disaggregation: deciding on and starting remote
// prefills (decode worker), taking their results, and handing finished blocks to KV
// sinks layer by layer (prefill worker).
#include <cstring>

#include "base/log.h"
#include "engine/engine_impl.h"
#include "engine/sampler.h"

namespace pdserve::engine::detail {

KvLayout make_layout(const model::Model& m, const kv::KvCacheShape& shape, const std::string& dtype) {
  const model::ModelConfig& mc = m.config();
  KvLayout l;
  l.kv_dtype = dtype;
  l.block_size = shape.block_size;
  l.n_layers = shape.n_layers;
  l.n_kv_heads = shape.n_kv_heads;
  l.head_dim = shape.head_dim;
  l.block_bytes = static_cast<size_t>(shape.bytes_per_layer_block());
  l.model_fingerprint = mc.arch + "/" + std::to_string(mc.n_layer) + "x" + std::to_string(mc.n_embd) + "/h" +
                        std::to_string(mc.n_head) + "kv" + std::to_string(mc.n_head_kv) + "/ff" + std::to_string(mc.n_ff) +
                        "/v" + std::to_string(mc.n_vocab) + "/w" + m.weights_fingerprint();
  return l;
}

bool EngineImpl::wants_remote_prefill(Sequence& s) {
  if (s.remote_tried || s.kv_sink) return false;
  const bool resumed = static_cast<int>(s.tokens.size()) != s.role_prompt_len;  // has generated tokens
  const int uncached = static_cast<int>(s.tokens.size()) - s.num_computed;
  // Counted once: admission asks again each step the pool has no room for the sequence.
  const bool first_decision = !s.prefill_counted;
  s.prefill_counted = true;
  // h2o ranks positions by the attention mass of every prompt query, which a prefill
  // worker does not send: such sequences prefill locally (streaming ones go remote).
  const bool h2o = s.kv_budget > 0 && cfg_.kv_evict.needs_attention_mass();
  const bool remote = !resumed && !h2o && uncached > cfg_.remote_prefill_threshold && cfg_.kv_source->available(s.params);
  if (first_decision && cfg_.transfer_metrics) {
    if (remote) cfg_.transfer_metrics->add_remote_prefill();
    else cfg_.transfer_metrics->add_local_prefill();
  }
  if (!remote) s.remote_tried = true;  // decided: local
  return remote;
}

void EngineImpl::start_remote_prefills() {
  for (Sequence* s : sched_.take_started_remote()) {
    RemotePrefillTask task;
    task.seq_id = s->id;
    task.prompt = s->tokens;
    task.params = s->params;
    task.cache_salt = s->cache_salt;
    task.num_cached_blocks = s->kv.num_cached_blocks;
    task.block_ids = s->kv.block_table.blocks;
    const int choice = s->choice_index;
    remote_inflight_++;
    cfg_.kv_source->start(std::move(task), blocks_, [this, choice, wake = wake_](RemotePrefillResult r) {
      {
        std::lock_guard<std::mutex> lk(remote_mu_);
        r.seq_id = r.seq_id * 64 + choice;  // (request id, choice) → one key
        remote_results_.push_back(std::move(r));
        remote_inflight_--;
        // Under the lock: once it is released, a shutting-down engine may be destroyed.
        remote_idle_.notify_all();
      }
      wake->set();
    });
  }
}

void EngineImpl::drain_remote_results() {
  std::vector<RemotePrefillResult> results;
  {
    std::lock_guard<std::mutex> lk(remote_mu_);
    results.swap(remote_results_);
  }
  for (RemotePrefillResult& r : results) {
    Sequence* s = sched_.find_awaiting(r.seq_id / 64, static_cast<int>(r.seq_id % 64));
    if (!s) continue;
    if (s->stream->aborted()) {
      finish(s, FinishReason::Abort, {});
      continue;
    }
    if (r.ok && (r.first.token < 0 || r.first.token >= model_->config().n_vocab)) {
      // A buggy or malicious prefill worker: its token would index past the embeddings.
      r.ok = false;
      r.error = "first token " + std::to_string(r.first.token) + " is outside the vocabulary";
    }
    if (!r.ok) {
      // Never decode over unfilled KV: recompute what the transfer did not deliver.
      PDS_LOG_WARN("remote prefill of request {} failed ({}); recomputing locally", s->id, r.error);
      if (cfg_.transfer_metrics) cfg_.transfer_metrics->add_recompute_fallback();
      sched_.remote_done(*s, false);
      continue;
    }
    sched_.remote_done(*s, true);
    // The prefill worker drew one random number for this token; stay in step with it.
    if (s->params.temperature > 0.f) s->rng.discard(1);
    if (s->choice_index == 0 && !s->group->pending_forks.empty()) {
      // Choices of a remotely prefilled request are recomputed as independent sequences.
      auto forks = std::move(s->group->pending_forks);
      s->group->pending_forks.clear();
      for (size_t k = 0; k < forks.size(); ++k) {
        std::unique_ptr<Sequence> sib = s->fork(forks[k].first, forks[k].second, static_cast<int>(k) + 1);
        sib->cached_tokens = -1;  // looked up in the prefix cache at its own first admission
        sib->remote_tried = true;
        sched_.add(std::move(sib));
      }
    }
    process_token(*s, r.first.token, std::optional<TokenLogprob>(r.first));
  }
}

void EngineImpl::emit_sink_blocks(const std::vector<ScheduledSeq>& plan, int layer) {
  const int bs = kv_.block_size();
  for (const ScheduledSeq& p : plan) {
    Sequence& s = *p.seq;
    if (!s.kv_sink) continue;
    const int end = s.num_computed + p.n_tokens;  // computed through this step, in this layer
    const int covered = end == static_cast<int>(s.tokens.size()) ? (end + bs - 1) / bs : end / bs;
    int& sent = s.sink_sent[layer];
    if (covered <= sent) continue;
    std::vector<const uint8_t*> k, v;
    for (int b = sent; b < covered; ++b) {
      k.push_back(blocks_.k(layer, s.kv.block_table.blocks[b]));
      v.push_back(blocks_.v(layer, s.kv.block_table.blocks[b]));
    }
    s.kv_sink->on_blocks(layer, sent, k, v, blocks_.layout().block_bytes);
    sent = covered;
  }
}

}  // namespace pdserve::engine::detail
