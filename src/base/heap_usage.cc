#include "base/heap_usage.h"

#include <malloc.h>

namespace pdserve {

HeapUsage heap_usage() {
  HeapUsage h;
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  const struct mallinfo2 mi = ::mallinfo2();
  h.in_use = static_cast<int64_t>(mi.uordblks + mi.hblkhd);
  h.free = static_cast<int64_t>(mi.fordblks);
#endif
  return h;
}

}  // namespace pdserve
