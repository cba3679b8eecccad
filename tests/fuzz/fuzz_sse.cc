// libFuzzer target: the SSE parser of the bench client (src/loadgen/sse_parser*).
// Input: byte 0 seeds the chunking; the rest is the stream.
// Invariant: the events are the same however the bytes are split into feed() calls (all
// at once, byte by byte, and in chunks of pseudo-random sizes).
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_util.h"
#include "loadgen/sse_parser.h"

using pdserve::loadgen::SseParser;

static std::vector<std::string> feed_chunks(std::string_view s, uint32_t seed) {
  SseParser p;
  std::vector<std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    seed = seed * 1103515245u + 12345u;
    const size_t n = seed == 0 ? s.size() : 1 + (seed >> 16) % 17;
    const std::string_view chunk = s.substr(i, n);
    for (std::string& e : p.feed(chunk)) out.push_back(std::move(e));
    i += chunk.size();
  }
  return out;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view s(reinterpret_cast<const char*>(data + 1), size - 1);
  SseParser whole;
  const std::vector<std::string> a = whole.feed(s);
  std::vector<std::string> bytes;
  SseParser bp;
  for (size_t i = 0; i < s.size(); ++i)
    for (std::string& e : bp.feed(s.substr(i, 1))) bytes.push_back(std::move(e));
  PDS_FUZZ_CHECK(feed_chunks(s, data[0]) == a, "chunked feed == whole feed");
  PDS_FUZZ_CHECK(bytes == a, "byte-by-byte feed == whole feed");
  return 0;
}
