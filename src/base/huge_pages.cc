#include "base/huge_pages.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace pdserve {

namespace {
constexpr size_t kHugePage = size_t{2} << 20;
}

HugePageBuffer::HugePageBuffer(size_t bytes) {
  if (bytes == 0) return;
  n_ = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  // Over-map by one huge page and trim, so the buffer starts on a 2 MiB boundary (THP only
  // backs aligned 2 MiB ranges).
  const size_t mapped = n_ + kHugePage;
  void* m = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    std::fprintf(stderr, "pdserve: cannot map %zu bytes: %s\n", mapped, std::strerror(errno));
    std::abort();
  }
  const auto base = reinterpret_cast<uintptr_t>(m);
  const uintptr_t start = (base + kHugePage - 1) / kHugePage * kHugePage;
  if (start > base) munmap(m, start - base);
  const uintptr_t end = start + n_, map_end = base + mapped;
  if (map_end > end) munmap(reinterpret_cast<void*>(end), map_end - end);
  p_ = reinterpret_cast<uint8_t*>(start);
  madvise(p_, n_, MADV_HUGEPAGE);  // best effort: EINVAL where THP is compiled out
  std::memset(p_, 0, n_);         // fault every page in now (the memory is already zero)
}

HugePageBuffer::~HugePageBuffer() {
  if (p_) munmap(p_, n_);
}

HugePageBuffer& HugePageBuffer::operator=(HugePageBuffer&& o) noexcept {
  if (this != &o) {
    if (p_) munmap(p_, n_);
    p_ = std::exchange(o.p_, nullptr);
    n_ = std::exchange(o.n_, 0);
  }
  return *this;
}

}  // namespace pdserve
