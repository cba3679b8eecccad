// StreamDecoder: UTF-8-safe incremental detokenizer for streamed output.
#include "tokenizer/tokenizer.h"

namespace pdserve::tokenizer {

namespace {

bool is_cont(uint8_t c) { return (c & 0xC0) == 0x80; }

/// Length a lead byte announces: 2..4, or 0 for bytes that cannot start a sequence
/// (continuation bytes, 0xC0/0xC1, 0xF5..0xFF).
size_t lead_len(uint8_t c) {
  if (c >= 0xC2 && c <= 0xDF) return 2;
  if (c >= 0xE0 && c <= 0xEF) return 3;
  if (c >= 0xF0 && c <= 0xF4) return 4;
  return 0;
}

/// Bytes of `s` that can be emitted now: everything except a trailing, still possible
/// (incomplete but so far valid) multi-byte sequence. Invalid bytes are emitted as is.
size_t ready_prefix(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const uint8_t c = static_cast<uint8_t>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    const size_t need = lead_len(c);
    if (need == 0) {  // stray continuation or impossible lead byte
      ++i;
      continue;
    }
    size_t j = 1;
    while (j < need && i + j < s.size() && is_cont(static_cast<uint8_t>(s[i + j]))) ++j;
    if (j == need) {
      i += need;  // complete character
    } else if (i + j == s.size()) {
      return i;  // incomplete so far: hold back from the lead byte
    } else {
      i += j;  // broken by a non-continuation byte: emit the lead (and its tail) as is
    }
  }
  return i;
}

}  // namespace

std::string StreamDecoder::push(int32_t id) { return push_bytes(tok_.token_to_piece(id)); }

std::string StreamDecoder::push_bytes(std::string_view bytes) {
  pending_.append(bytes);
  const size_t n = ready_prefix(pending_);
  std::string out = pending_.substr(0, n);
  pending_.erase(0, n);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

}  // namespace pdserve::tokenizer
