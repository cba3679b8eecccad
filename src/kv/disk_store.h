// DiskKvStore: the local-disk tier (--kv-offload-dir DIR --kv-offload-gb N). One file
// per block, DIR/<hex key>.kvb, written to a temporary name and renamed (a crash leaves
// no half value under a key); bounded to N GiB by evicting the least recently used
// files. DIR/index lists the keys in LRU order (snapshot()), so a restarted process
// resumes with the same order; files written after the last snapshot are found by a
// directory scan (ordered by modification time).
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <vector>
#include <unordered_map>

#include "kv/kv_store.h"

namespace pdserve::kv {

/// Thread-safe (one mutex around the index; file I/O outside it).
class DiskKvStore final : public KvStore {
 public:
  /// Opens (creating) `dir`, bounded to `max_bytes`. With `restore` the files already
  /// there are kept and indexed; without, they are deleted. Errors: InvalidArgument,
  /// one line naming the directory, when it cannot be created or written.
  static Result<std::unique_ptr<DiskKvStore>> open(const std::string& dir, int64_t max_bytes, bool restore);

  const char* tier() const override { return "disk"; }
  Result<std::optional<std::string>> get(const BlockKey& key) override;
  Status put(const BlockKey& key, const std::string& value) override;
  bool has_local(const BlockKey& key) const override;
  void forget(const BlockKey& key) override;
  void snapshot() override;
  int64_t num_blocks() const override;
  int64_t num_bytes() const override;

 private:
  DiskKvStore(std::string dir, int64_t max_bytes) : dir_(std::move(dir)), max_bytes_(max_bytes) {}
  void restore();
  std::string path_of(const std::string& hex) const { return dir_ + "/" + hex + ".kvb"; }
  /// Evicts LRU files until the total fits (under mu_); returns the paths to unlink.
  void evict_locked(std::vector<std::string>& unlink);
  /// Removes index entry `hex` (present) from the index, the LRU list and the byte count.
  /// Caller holds mu_; the file is the caller's to unlink.
  void drop_locked(const std::string& hex);

  struct Entry {
    int64_t bytes;
    std::list<std::string>::iterator lru;  // position in lru_ (front = least recent)
  };
  const std::string dir_;
  const int64_t max_bytes_;
  mutable std::mutex mu_;
  std::list<std::string> lru_;  // hex keys
  std::unordered_map<std::string, Entry> index_;
  int64_t total_bytes_ = 0;
  uint64_t tmp_seq_ = 0;
};

}  // namespace pdserve::kv
