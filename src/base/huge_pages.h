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
  /// the start, as a memset would leave it). Aborts with a message when mmap fails (out of
  /// memory), as operator new would throw.
  explicit HugePageBuffer(size_t bytes);
  ~HugePageBuffer();
  HugePageBuffer(HugePageBuffer&& o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = nullptr, o.n_ = 0; }
  HugePageBuffer& operator=(HugePageBuffer&& o) noexcept;
  HugePageBuffer(const HugePageBuffer&) = delete;
  HugePageBuffer& operator=(const HugePageBuffer&) = delete;

  uint8_t* get() const { return p_; }
  size_t size() const { return n_; }

 private:
  uint8_t* p_ = nullptr;
  size_t n_ = 0;  // mapped bytes (a multiple of 2 MiB)
};

}  // namespace pdserve
