#include <sys/stat.h>
#include "kv/disk_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace pdserve::kv {

namespace fs = std::filesystem;

namespace {

constexpr const char* kExt = ".kvb";

bool is_hex_key(const std::string& s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

Status write_file(const std::string& path, const std::string& data) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::Unavailable("open " + path + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = errno;
      ::close(fd);
      ::unlink(path.c_str());
      return e == ENOSPC ? Status::ResourceExhausted("write " + path + ": disk full")
                         : Status::Unavailable("write " + path + ": " + std::strerror(e));
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) {
    ::unlink(path.c_str());
    return Status::Unavailable("close " + path + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<DiskKvStore>> DiskKvStore::open(const std::string& dir, int64_t max_bytes, bool restore) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::InvalidArgument("--kv-offload-dir " + dir + ": cannot create it: " + ec.message());
  const std::string probe = dir + "/.probe-" + std::to_string(::getpid());
  if (Status s = write_file(probe, "x"); !s.ok())
    return Status::InvalidArgument("--kv-offload-dir " + dir + " is not writable (" + s.message() + ")");
  ::unlink(probe.c_str());
  std::unique_ptr<DiskKvStore> st(new DiskKvStore(dir, max_bytes));
  if (restore) {
    st->restore();
  } else {
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().extension() == kExt || e.path().filename() == "index") fs::remove(e.path(), ec);
  }
  return st;
}

void DiskKvStore::restore() {
  // Files present, ordered: the last snapshot's index first (its LRU order), then the
  // rest by modification time (written after that snapshot).
  std::error_code ec;
  std::unordered_map<std::string, std::pair<int64_t, fs::file_time_type>> files;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(".tmp", 0) == 0) {
      fs::remove(e.path(), ec);  // a write a crash interrupted
      continue;
    }
    if (e.path().extension() != kExt) continue;
    const std::string hex = e.path().stem().string();
    if (!is_hex_key(hex)) continue;
    files[hex] = {static_cast<int64_t>(e.file_size(ec)), e.last_write_time(ec)};
  }
  std::vector<std::string> order;
  std::ifstream idx(dir_ + "/index");
  for (std::string hex; idx >> hex;)
    if (files.count(hex) && !index_.count(hex)) {
      order.push_back(hex);
      index_[hex] = {};
    }
  std::vector<std::pair<fs::file_time_type, std::string>> rest;
  for (const auto& [hex, f] : files)
    if (!index_.count(hex)) rest.emplace_back(f.second, hex);
  std::sort(rest.begin(), rest.end());
  for (auto& r : rest) order.push_back(r.second);
  index_.clear();
  for (const std::string& hex : order) {
    const int64_t bytes = files[hex].first;
    lru_.push_back(hex);
    index_[hex] = {bytes, std::prev(lru_.end())};
    total_bytes_ += bytes;
  }
  std::vector<std::string> drop;
  evict_locked(drop);
  for (const std::string& p : drop) ::unlink(p.c_str());
}

void DiskKvStore::evict_locked(std::vector<std::string>& unlink) {
  while (total_bytes_ > max_bytes_ && !lru_.empty()) {
    const std::string hex = lru_.front();
    drop_locked(hex);
    unlink.push_back(path_of(hex));
  }
}

Result<std::optional<std::string>> DiskKvStore::get(const BlockKey& key) {
  const std::string hex = pdserve::to_hex(key);
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = index_.find(hex);
    if (it == index_.end()) return std::optional<std::string>();
    lru_.splice(lru_.end(), lru_, it->second.lru);  // most recently used
  }
  std::ifstream in(path_of(hex), std::ios::binary);
  if (!in) {  // evicted meanwhile, or removed behind our back: the index forgets it too
    forget(key);
    return std::optional<std::string>();
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return std::optional<std::string>(ss.str());
}

Status DiskKvStore::put(const BlockKey& key, const std::string& value) {
  const std::string hex = pdserve::to_hex(key);
  if (static_cast<int64_t>(value.size()) > max_bytes_) return Status::ResourceExhausted("block larger than --kv-offload-gb");
  std::string tmp;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (index_.count(hex)) {
      struct stat st {};
      if (::stat(path_of(hex).c_str(), &st) == 0) return Status::Ok();  // same key, same content
      drop_locked(hex);  // its file was removed behind our back: write it again
    }
    tmp = dir_ + "/.tmp" + std::to_string(tmp_seq_++);
  }
  if (Status s = write_file(tmp, value); !s.ok()) return s;
  std::vector<std::string> drop;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (::rename(tmp.c_str(), path_of(hex).c_str()) != 0) {
      const int e = errno;
      ::unlink(tmp.c_str());
      return Status::Unavailable("rename into " + dir_ + ": " + std::strerror(e));
    }
    if (!index_.count(hex)) {
      lru_.push_back(hex);
      index_[hex] = {static_cast<int64_t>(value.size()), std::prev(lru_.end())};
      total_bytes_ += static_cast<int64_t>(value.size());
    }
    evict_locked(drop);
  }
  for (const std::string& p : drop) ::unlink(p.c_str());
  return Status::Ok();
}

void DiskKvStore::forget(const BlockKey& key) {
  const std::string hex = pdserve::to_hex(key);
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!index_.count(hex)) return;
    drop_locked(hex);
  }
  ::unlink(path_of(hex).c_str());
}

void DiskKvStore::drop_locked(const std::string& hex) {
  auto it = index_.find(hex);
  total_bytes_ -= it->second.bytes;
  lru_.erase(it->second.lru);
  index_.erase(it);
}

bool DiskKvStore::has_local(const BlockKey& key) const {
  std::lock_guard<std::mutex> lk(mu_);
  return index_.count(pdserve::to_hex(key)) != 0;
}

void DiskKvStore::snapshot() {
  std::string text;
  {
    std::lock_guard<std::mutex> lk(mu_);
    text.reserve(lru_.size() * 65);
    for (const std::string& hex : lru_) text += hex + "\n";
  }
  const std::string tmp = dir_ + "/.tmp-index";
  if (write_file(tmp, text).ok()) ::rename(tmp.c_str(), (dir_ + "/index").c_str());
}

int64_t DiskKvStore::num_blocks() const {
  std::lock_guard<std::mutex> lk(mu_);
  return static_cast<int64_t>(index_.size());
}

int64_t DiskKvStore::num_bytes() const {
  std::lock_guard<std::mutex> lk(mu_);
  return total_bytes_;
}

}  // namespace pdserve::kv
