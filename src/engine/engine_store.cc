// The engine's side of the KV store tiers (kv/kv_tiers.h): at a sequence's first
// admission the prompt blocks after its prefix-cache hit are fetched off the step loop
// (the sequence waits in the scheduler's loading list, holding no blocks, while others
// run), then imported into the pool and counted as cached tokens. Writes need nothing
// here: KvCacheManager writes full prompt blocks through as they enter the radix cache.
#include "engine/engine_impl.h"

namespace pdserve::engine::detail {

void EngineImpl::attach_tiers() {
  const KvLayout l = blocks_.layout();
  kv::BlockKeyContext ctx;
  ctx.model_fingerprint = l.model_fingerprint;
  ctx.layout = "bs" + std::to_string(l.block_size) + "/l" + std::to_string(l.n_layers) + "/kvh" +
               std::to_string(l.n_kv_heads) + "/d" + std::to_string(l.head_dim);
  ctx.dtype = l.kv_dtype;
  kv_.set_tiers(tiers_.get(), std::move(ctx));
  sched_.set_store_loader([this](Sequence& s, int max_hit) { return store_load(s, max_hit); });
}

int EngineImpl::store_load(Sequence& s, int max_hit) {
  if (s.store_state == 2) {  // fetched: import what is still past the (current) hit
    s.store_state = 3;
    const int added = kv_.import_blocks(s.kv, s.tokens.data(), s.store_first, s.store_blocks);
    std::vector<std::string>().swap(s.store_blocks);
    return added;
  }
  // Looked up once, at first admission (a preempted sequence re-matches its blocks in L1).
  if (s.store_state != 0 || s.cached_tokens >= 0) return 0;
  s.store_state = 3;
  const int bs = kv_.block_size();
  const int have = s.kv.num_cached_blocks, want = max_hit / bs;
  if (want <= have) return 0;
  std::vector<kv::BlockKey> keys = kv_.block_keys(s.cache_salt, s.tokens.data(), want);
  if (!tiers_->may_have(keys[have])) return 0;  // e.g. a disk tier without it: no round trip
  keys.erase(keys.begin(), keys.begin() + have);
  std::vector<int32_t> ids(s.tokens.begin() + static_cast<int64_t>(have) * bs, s.tokens.begin() + static_cast<int64_t>(want) * bs);
  s.store_state = 1;
  s.store_first = have;
  tiers_->fetch(static_cast<uint64_t>(s.id) * 64 + static_cast<uint64_t>(s.choice_index), have, std::move(keys),
                std::move(ids), bs, kv_.block_payload_bytes(), [wake = wake_] { wake->set(); });
  return -1;
}

void EngineImpl::drain_store_results() {
  if (!tiers_) return;
  for (kv::FetchResult& r : tiers_->take_fetched()) {
    Sequence* s = sched_.find_loading(static_cast<int64_t>(r.ticket / 64), static_cast<int>(r.ticket % 64));
    if (!s) continue;  // ended (aborted, timed out) while fetching
    s->store_state = 2;
    s->store_blocks = std::move(r.payloads);
    sched_.store_loaded(*s);
  }
}

void EngineImpl::fill_store_metrics(MetricsSnapshot& m) const {
  if (!tiers_) return;
  for (const kv::TierStats& t : tiers_->stats()) {
    KvStoreTierMetrics x;
    x.tier = t.tier;
    x.hits = t.hits;
    x.misses = t.misses;
    x.writes = t.writes;
    x.errors = t.errors;
    x.bytes_read = t.bytes_read;
    x.bytes_written = t.bytes_written;
    x.blocks = t.blocks;
    x.bytes = t.bytes;
    x.up = t.up;
    auto hist = [](const kv::TierLatency& l) {
      Histogram h(kv::TierLatency::bounds());
      h.counts = l.counts;
      h.sum = l.sum;
      h.count = l.count;
      return h;
    };
    x.get_seconds = hist(t.get_latency);
    x.put_seconds = hist(t.put_latency);
    m.kv_store.push_back(std::move(x));
  }
}

}  // namespace pdserve::engine::detail
