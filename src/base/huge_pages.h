// HugePageBuffer: large, long-lived, 2 MiB-aligned anonymous memory that asks the kernel
// for transparent huge pages (madvise(MADV_HUGEPAGE), Linux THP in "always" or "madvise"
// mode). For the buffers a forward pass streams through every step (the weights' copy,
// gguf::FileMemory; the KV pools): with 4 KiB pages a decode step misses the TLB on
// nearly every page it reads and the prefetchers stop at each page boundary; 2 MiB pages
// cover the same bytes with 512× fewer entries. Where THP is off ("never") the buffer is
// ordinary memory: only speed differs.
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
  /// For a caller about to fill the whole buffer (a copy): as the constructor, but the
  /// pages are not zeroed or faulted in here (the caller's writes do that), and an empty
  /// buffer (get() == nullptr) when the memory cannot be mapped.
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
  bool map(size_t bytes, bool fault_in);  // false: nothing mapped
  uint8_t* p_ = nullptr;
  size_t n_ = 0;  // mapped bytes (a multiple of 2 MiB)
};

}  // namespace pdserve
