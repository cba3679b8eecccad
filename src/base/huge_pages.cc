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
  if (!map(bytes, /*fault_in=*/true)) {
    std::fprintf(stderr, "error: cannot allocate %zu MiB: %s\n", (bytes + (1 << 20) - 1) >> 20, std::strerror(errno));
    std::exit(1);
  }
}

HugePageBuffer HugePageBuffer::try_allocate(size_t bytes) {
  HugePageBuffer b;
  b.map(bytes, /*fault_in=*/false);
  return b;
}

bool HugePageBuffer::map(size_t bytes, bool fault_in) {
  if (bytes == 0) return true;
  const size_t n = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  // Over-map by one huge page and trim, so the buffer starts on a 2 MiB boundary (THP only
  // backs aligned 2 MiB ranges).
  const size_t mapped = n + kHugePage;
  void* m = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return false;
  const auto base = reinterpret_cast<uintptr_t>(m);
  const uintptr_t start = (base + kHugePage - 1) / kHugePage * kHugePage;
  if (start > base) munmap(m, start - base);
  const uintptr_t end = start + n, map_end = base + mapped;
  if (map_end > end) munmap(reinterpret_cast<void*>(end), map_end - end);
  p_ = reinterpret_cast<uint8_t*>(start);
  n_ = n;
  madvise(p_, n_, MADV_HUGEPAGE);  // best effort: EINVAL where THP is compiled out
  if (fault_in) std::memset(p_, 0, n_);  // fault every page in now (the memory is already zero)
  return true;
}

uint64_t HugePageBuffer::available_memory() {
  FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  unsigned long long kib = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1) break;
  std::fclose(f);
  return uint64_t{kib} << 10;
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
