// The C heap of this process as malloc sees it (glibc mallinfo2), apart from RSS: RSS
// also counts pages malloc holds but has no live allocation in (arena slack), thread
// stacks, the binary and mapped files, so it cannot tell a leak from warm-up alone.
#pragma once

#include <cstdint>

namespace pdserve {

struct HeapUsage {
  /// Bytes handed out by malloc and not freed yet: mallinfo2().uordblks (arena chunks in
  /// use, every arena) + hblkhd (chunks served by mmap, e.g. the KV pool). Freed chunks
  /// parked in a thread's tcache count as in use (bounded: 7 per size class and thread).
  int64_t in_use = -1;
  /// Bytes malloc's arenas hold that no allocation uses: mallinfo2().fordblks.
  int64_t free = -1;
};

/// The process's heap now; both fields -1 where the C library has no mallinfo2 (not
/// glibc >= 2.33). Costs a lock of every malloc arena: for scrapes, not a hot path.
HeapUsage heap_usage();

}  // namespace pdserve
