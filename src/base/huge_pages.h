// HugePageBuffer: large, long-lived, 2 MiB-aligned anonymous memory that asks the kernel
// for transparent huge pages (madvise(MADV_HUGEPAGE), Linux THP in "always" or "madvise"
// mode). For the buffers a forward pass streams through every step (the KV pools): with
// 4 KiB pages a 16k-token decode step touches tens of thousands of pages per layer and
// misses the TLB on nearly every K/V row; 2 MiB pages cover them with a few hundred
// entries. Where THP is off ("never") the buffer is ordinary memory: only speed differs.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pdserve {

class HugePageBuffer {
 public:
  HugePageBuffer() = default;
  /// `bytes` of zeroed memory (rounded up to 2 MiB), every page faulted in (resident from
  /// the start, as a memset would leave it). When the memory cannot be mapped (out of
  /// memory) prints "error: cannot allocate N MiB …" and exits with status 1, as an
  /// uncaught operator new would end the process; callers that can do without the
  /// memory use try_allocate.
  explicit HugePageBuffer(size_t bytes);
  /// As the constructor, but an empty buffer (get() == nullptr) when the memory cannot be
  /// mapped.
  static HugePageBuffer try_allocate(size_t bytes);
  /// MemAvailable of /proc/meminfo in bytes (0 when unreadable): what can be allocated
  /// without swapping or evicting more than the page cache.
  static uint64_t available_memory();
  ~HugePageBuffer();
  HugePageBuffer(HugePageBuffer&& o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = nullptr, o.n_ = 0; }
  HugePageBuffer& operator=(HugePageBuffer&& o) noexcept;
  HugePageBuffer(const HugePageBuffer&) = delete;
  HugePageBuffer& operator=(const HugePageBuffer&) = delete;

  uint8_t* get() const { return p_; }
  size_t size() const { return n_; }

 private:
  bool map(size_t bytes);  // false: nothing mapped
  uint8_t* p_ = nullptr;
  size_t n_ = 0;  // mapped bytes (a multiple of 2 MiB)
};

}  // namespace pdserve
