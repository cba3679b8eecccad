#include "kv/kv_tiers.h"

#include <algorithm>
#include <chrono>

#include "base/log.h"
#include "kv/disk_store.h"
#include "kv/redis_store.h"

namespace pdserve::kv {

namespace {

constexpr size_t kMaxQueuedBytes = size_t{256} << 20;  // pending write-through payloads
constexpr auto kFlushTimeout = std::chrono::seconds(5);

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

const std::vector<double>& TierLatency::bounds() {
  static const std::vector<double> b = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5};
  return b;
}

void TierLatency::observe(double s) {
  const auto& b = bounds();
  counts[std::lower_bound(b.begin(), b.end(), s) - b.begin()]++;
  sum += s;
  count++;
}

Result<std::unique_ptr<KvTiers>> KvTiers::open(const KvTierOptions& opts) {
  std::unique_ptr<KvTiers> t(new KvTiers());
  t->opts_ = opts;
  if (!opts.offload_dir.empty()) {
    if (opts.offload_bytes <= 0) return Status::InvalidArgument("--kv-offload-gb must be > 0 with --kv-offload-dir");
    auto disk = DiskKvStore::open(opts.offload_dir, opts.offload_bytes, opts.restore);
    if (!disk.ok()) return disk.status();
    Tier tier;
    tier.reader = std::move(disk.value());
    tier.shared = tier.reader.get();
    tier.st.tier = "disk";
    t->tiers_.push_back(std::move(tier));
    PDS_LOG_INFO("kv store: disk tier {} ({} blocks restored, {:.3f} of {:.3f} GiB)", opts.offload_dir,
                 t->tiers_.back().shared->num_blocks(), t->tiers_.back().shared->num_bytes() / double(1 << 30),
                 opts.offload_bytes / double(1 << 30));
  }
  if (!opts.store_url.empty()) {
    auto url = parse_redis_url(opts.store_url);
    if (!url.ok()) return url.status();
    if (opts.timeout_ms < 1) return Status::InvalidArgument("--kv-store-timeout-ms must be >= 1");
    auto health = std::make_shared<RedisHealth>();
    Tier tier;
    tier.reader = std::make_unique<RedisKvStore>(url.value(), opts.timeout_ms, health);
    tier.writer = std::make_unique<RedisKvStore>(url.value(), opts.timeout_ms, health);
    tier.st.tier = "redis";
    t->tiers_.push_back(std::move(tier));
    PDS_LOG_INFO("kv store: redis tier {} (timeout {} ms)", opts.store_url, opts.timeout_ms);
  }
  if (t->tiers_.empty()) return Status::InvalidArgument("no KV store tier configured");
  t->writer_ = std::thread([p = t.get()] { p->write_loop(); });
  t->reader_ = std::thread([p = t.get()] { p->read_loop(); });
  return t;
}

KvTiers::~KvTiers() {
  {
    std::unique_lock<std::mutex> lk(mu_);
    drained_cv_.wait_for(lk, kFlushTimeout, [&] { return writes_.empty() && !writing_; });
    stop_ = true;
  }
  write_cv_.notify_all();
  read_cv_.notify_all();
  if (writer_.joinable()) writer_.join();
  if (reader_.joinable()) reader_.join();
  for (Tier& t : tiers_) writer(t).snapshot();
}

void KvTiers::enqueue(WriteJob job) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (queued_bytes_ + job.payload.size() > kMaxQueuedBytes) {
      // Never block the engine: the block stays computable; count the lost write.
      for (size_t i = 0; i < tiers_.size(); ++i)
        if (job.only_tier < 0 || job.only_tier == static_cast<int>(i)) tiers_[i].st.errors++;
      return;
    }
    queued_bytes_ += job.payload.size();
    writes_.push_back(std::move(job));
  }
  write_cv_.notify_one();
}

void KvTiers::put(const BlockKey& key, std::vector<int32_t> tokens, std::string payload) {
  WriteJob j;
  j.key = key;
  j.tokens = std::move(tokens);
  j.payload = std::move(payload);
  enqueue(std::move(j));
}

bool KvTiers::may_have(const BlockKey& key) const {
  for (const Tier& t : tiers_) {
    if (!t.shared) return true;  // remote: only asking tells
    if (t.shared->has_local(key)) return true;
  }
  return false;
}

void KvTiers::write_loop() {
  using clock = std::chrono::steady_clock;
  const bool periodic = opts_.snapshot_interval_s > 0;
  const auto interval = std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(periodic ? opts_.snapshot_interval_s : 1.0));
  auto next_snapshot = clock::now() + interval;
  auto any_down = [&] {
    return std::any_of(tiers_.begin(), tiers_.end(), [&](Tier& t) { return !writer(t).up(); });
  };
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    auto wake_at = periodic ? next_snapshot : clock::now() + std::chrono::hours(1);
    if (any_down()) {
      wake_at = std::min(wake_at, clock::now() + std::chrono::milliseconds(200));
      lk.unlock();
      for (Tier& t : tiers_)
        if (!writer(t).up()) writer(t).probe();
      lk.lock();
    }
    write_cv_.wait_until(lk, wake_at, [&] { return stop_ || !writes_.empty(); });
    if (periodic && clock::now() >= next_snapshot) {
      lk.unlock();
      for (Tier& t : tiers_) writer(t).snapshot();
      lk.lock();
      next_snapshot = clock::now() + interval;
    }
    if (writes_.empty()) {
      if (stop_) return;
      continue;
    }
    WriteJob job = std::move(writes_.front());
    writes_.pop_front();
    queued_bytes_ -= job.payload.size();
    writing_ = true;
    lk.unlock();
    const std::string value = job.encoded ? std::move(job.payload)
                                          : encode_stored_block(job.key, job.tokens.data(), static_cast<int>(job.tokens.size()), job.payload);
    for (size_t i = 0; i < tiers_.size(); ++i) {
      if (job.only_tier >= 0 && job.only_tier != static_cast<int>(i)) continue;
      Tier& t = tiers_[i];
      const auto t0 = clock::now();
      const Status s = writer(t).put(job.key, value);
      const double dt = seconds_since(t0);
      std::lock_guard<std::mutex> g(mu_);
      t.st.put_latency.observe(dt);
      if (s.ok()) {
        t.st.writes++;
        t.st.bytes_written += static_cast<int64_t>(value.size());
      } else {
        t.st.errors++;
        PDS_LOG_DEBUG("kv store {}: put failed: {}", t.st.tier, s.message());
      }
    }
    lk.lock();
    writing_ = false;
    if (writes_.empty()) drained_cv_.notify_all();
  }
}

void KvTiers::fetch(uint64_t ticket, int first_block, std::vector<BlockKey> keys, std::vector<int32_t> tokens,
                    int block_size, size_t payload_bytes, std::function<void()> done) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    fetches_.push_back({ticket, first_block, std::move(keys), std::move(tokens), block_size, payload_bytes, std::move(done)});
  }
  read_cv_.notify_one();
}

void KvTiers::read_loop() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    read_cv_.wait(lk, [&] { return stop_ || !fetches_.empty(); });
    if (stop_) return;
    FetchJob job = std::move(fetches_.front());
    fetches_.pop_front();
    lk.unlock();
    do_fetch(job);
    lk.lock();
  }
}

void KvTiers::do_fetch(FetchJob& job) {
  FetchResult res;
  res.ticket = job.ticket;
  res.first_block = job.first_block;
  for (size_t b = 0; b < job.keys.size(); ++b) {
    const int32_t* ids = job.tokens.data() + b * static_cast<size_t>(job.block_size);
    bool found = false;
    for (size_t i = 0; i < tiers_.size() && !found; ++i) {
      Tier& t = tiers_[i];
      if (t.shared && !t.shared->has_local(job.keys[b])) {
        std::lock_guard<std::mutex> g(mu_);
        t.st.misses++;
        continue;
      }
      const auto t0 = std::chrono::steady_clock::now();
      auto got = reader(t).get(job.keys[b]);
      const double dt = seconds_since(t0);
      Result<std::string> payload = Status::NotFound("");
      if (got.ok() && got.value())
        payload = decode_stored_block(*got.value(), job.keys[b], ids, job.block_size, job.payload_bytes);
      {
        std::lock_guard<std::mutex> g(mu_);
        t.st.get_latency.observe(dt);
        if (!got.ok()) {
          t.st.errors++;
        } else if (!got.value()) {
          t.st.misses++;
        } else if (!payload.ok()) {
          t.st.errors++;  // corrupt, truncated or someone else's: never used
          PDS_LOG_WARN("kv store {}: rejected block {}: {}", t.st.tier, pdserve::to_hex(job.keys[b]).substr(0, 16), payload.error());
        } else {
          t.st.hits++;
          t.st.bytes_read += static_cast<int64_t>(got.value()->size());
        }
      }
      if (got.ok() && got.value() && !payload.ok()) reader(t).forget(job.keys[b]);  // so the recomputed block is stored again
      if (!payload.ok()) continue;
      found = true;
      // Copy a block found lower down into the faster tiers above it.
      for (size_t up = 0; up < i; ++up) {
        WriteJob w;
        w.key = job.keys[b];
        w.payload = std::move(*got.value());
        w.encoded = true;
        w.only_tier = static_cast<int>(up);
        enqueue(std::move(w));
        break;  // (only the disk tier is above redis)
      }
      res.payloads.push_back(std::move(payload.value()));
    }
    if (!found) break;
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    results_.push_back(std::move(res));
  }
  if (job.done) job.done();
}

std::vector<FetchResult> KvTiers::take_fetched() {
  std::lock_guard<std::mutex> lk(mu_);
  return std::exchange(results_, {});
}

size_t KvTiers::pending_writes() const {
  std::lock_guard<std::mutex> lk(mu_);
  return writes_.size() + (writing_ ? 1 : 0);
}

std::vector<TierStats> KvTiers::stats() const {
  std::vector<TierStats> out;
  std::lock_guard<std::mutex> lk(mu_);
  for (const Tier& t : tiers_) {
    out.push_back(t.st);
    out.back().up = (t.shared ? t.shared : t.writer.get())->up();
    if (t.shared) {
      out.back().blocks = t.shared->num_blocks();
      out.back().bytes = t.shared->num_bytes();
    }
  }
  return out;
}

}  // namespace pdserve::kv
