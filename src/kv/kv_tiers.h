// KvTiers: the store tiers below the KV pool (L2 local disk, L3 Redis; kv/kv_store.h)
// and the two background threads that talk to them, so the engine step never waits on
// a tier (the scheme of vLLM's KV connectors / LMCache and SGLang's HiCache):
//  * a writer thread takes write-through blocks (full prompt blocks as they enter the
//    radix cache) from a bounded queue — a full queue drops the write (counted as an
//    error) rather than block — encodes them (kv/block_key.h) and puts them to every
//    tier; it also writes the tiers' snapshots every --kv-snapshot-interval seconds,
//    and probes a tier in an outage every 200 ms (KvStore::probe);
//  * a reader thread serves fetches: the blocks of a prompt after its L1 hit, in order,
//    each from the first tier that has a value passing decode_stored_block (a bad value
//    is an error and the next tier is asked), stopping at the first block no tier has.
//    A block found only in Redis is copied to the disk tier.
// A failing tier costs recompute: its error is counted, the block is a miss.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "kv/block_key.h"
#include "kv/kv_store.h"
#include "kv/kv_tier_options.h"

namespace pdserve::kv {

/// A latency histogram in seconds (Prometheus buckets; copied into the engine's metrics).
struct TierLatency {
  static const std::vector<double>& bounds();
  std::vector<uint64_t> counts = std::vector<uint64_t>(bounds().size() + 1, 0);
  double sum = 0;
  uint64_t count = 0;
  void observe(double s);
};

/// Counters of one tier (blocks and bytes held: -1 when the tier cannot tell).
struct TierStats {
  std::string tier;
  int64_t hits = 0, misses = 0, writes = 0, errors = 0;
  int64_t bytes_read = 0, bytes_written = 0;
  int64_t blocks = -1, bytes = -1;
  bool up = true;
  TierLatency get_latency, put_latency;
};

/// The blocks one fetch found: payloads[i] is block first_block + i of the prompt.
struct FetchResult {
  uint64_t ticket = 0;
  int first_block = 0;
  std::vector<std::string> payloads;
};

class KvTiers {
 public:
  /// Opens the tiers of `opts` (at least one). Errors: InvalidArgument, one line, for a
  /// malformed --kv-store URL or an unusable --kv-offload-dir. An unreachable Redis is
  /// not an error (it is retried; until then it misses).
  static Result<std::unique_ptr<KvTiers>> open(const KvTierOptions& opts);
  /// Finishes the queued writes (for up to 5 s), snapshots the tiers, stops the threads.
  ~KvTiers();
  KvTiers(const KvTiers&) = delete;
  KvTiers& operator=(const KvTiers&) = delete;

  /// Queues a block for every tier: `tokens` are its ids, `payload` its K/V bytes.
  void put(const BlockKey& key, std::vector<int32_t> tokens, std::string payload);
  /// Whether a fetch of `key` could find anything (a remote tier exists, or the disk
  /// tier holds it): the caller skips a fetch that cannot hit.
  bool may_have(const BlockKey& key) const;
  /// Fetches blocks `first_block`.. of a prompt: keys[i] with ids tokens[i*block_size..)
  /// and payloads of `payload_bytes`; calls `done` (on the reader thread) once the result
  /// can be taken with take_fetched().
  void fetch(uint64_t ticket, int first_block, std::vector<BlockKey> keys, std::vector<int32_t> tokens, int block_size,
             size_t payload_bytes, std::function<void()> done);
  std::vector<FetchResult> take_fetched();
  /// Blocks queued for writing and not yet written.
  size_t pending_writes() const;
  std::vector<TierStats> stats() const;

 private:
  struct Tier {
    std::unique_ptr<KvStore> reader, writer;  // the same object for a thread-safe tier
    KvStore* shared = nullptr;                // set when reader == writer
    TierStats st;
  };
  struct WriteJob {
    BlockKey key;
    std::vector<int32_t> tokens;
    std::string payload;  // raw K/V (encoded on the writer thread), or an encoded value
    bool encoded = false;
    int only_tier = -1;   // -1: every tier
  };
  struct FetchJob {
    uint64_t ticket;
    int first_block;
    std::vector<BlockKey> keys;
    std::vector<int32_t> tokens;
    int block_size;
    size_t payload_bytes;
    std::function<void()> done;
  };
  KvTiers() = default;
  KvStore& reader(Tier& t) { return t.shared ? *t.shared : *t.reader; }
  KvStore& writer(Tier& t) { return t.shared ? *t.shared : *t.writer; }
  void write_loop();
  void read_loop();
  void do_fetch(FetchJob& job);
  void enqueue(WriteJob job);

  KvTierOptions opts_;
  std::vector<Tier> tiers_;  // fastest first: disk, then redis
  mutable std::mutex mu_;    // the queues, the results and every TierStats
  std::condition_variable write_cv_, read_cv_, drained_cv_;
  std::deque<WriteJob> writes_;
  size_t queued_bytes_ = 0;
  bool writing_ = false;
  std::deque<FetchJob> fetches_;
  std::vector<FetchResult> results_;
  bool stop_ = false;
  std::thread writer_, reader_;
};

}  // namespace pdserve::kv
