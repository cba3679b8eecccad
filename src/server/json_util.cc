#include "server/json_util.h"

#include <cstdio>

namespace pdserve::server {

std::string dump_json(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

bool is_valid_utf8(std::string_view s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    int len;
    uint32_t cp;
    if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > n) return false;
    for (int k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += len;
  }
  return true;
}

void Utf8CharCounter::push(std::string_view bytes) {
  for (char ch : bytes) push_byte(static_cast<uint8_t>(ch));
}

int Utf8CharCounter::offset_before(std::string_view next) const {
  if (need_ == 0 || next.empty()) return count_;
  const auto b = static_cast<uint8_t>(next[0]);
  return b >= lo_ && b <= hi_ ? count_ : count_ + 1;  // else the open sequence is one U+FFFD
}

void Utf8CharCounter::push_byte(uint8_t b) {
  if (need_ > 0) {
    if (b >= lo_ && b <= hi_) {
      lo_ = 0x80, hi_ = 0xBF;
      if (--need_ == 0) ++count_;  // the character is complete
      return;
    }
    ++count_;  // the broken-off sequence's U+FFFD; b starts anew
    need_ = 0;
    lo_ = 0x80, hi_ = 0xBF;
  }
  // RFC 3629's table: the second byte's range after each lead byte.
  if (b < 0x80) {
    ++count_;
  } else if (b >= 0xC2 && b <= 0xDF) {
    need_ = 1;
  } else if (b >= 0xE0 && b <= 0xEF) {
    need_ = 2;
    if (b == 0xE0) lo_ = 0xA0;
    if (b == 0xED) hi_ = 0x9F;
  } else if (b >= 0xF0 && b <= 0xF4) {
    need_ = 3;
    if (b == 0xF0) lo_ = 0x90;
    if (b == 0xF4) hi_ = 0x8F;
  } else {
    ++count_;  // a stray continuation byte or one that never starts a character: U+FFFD
  }
}

std::string token_display(std::string_view piece) {
  if (is_valid_utf8(piece)) return std::string(piece);
  std::string out = "bytes:";
  char buf[8];
  for (char ch : piece) {
    std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned char>(ch));
    out += buf;
  }
  return out;
}

std::vector<int> token_bytes(std::string_view piece) {
  std::vector<int> out;
  out.reserve(piece.size());
  for (char ch : piece) out.push_back(static_cast<unsigned char>(ch));
  return out;
}

std::string json_type_phrase(const json& j) {
  switch (j.type()) {
    case json::value_t::null: return "null";
    case json::value_t::object: return "an object";
    case json::value_t::array: return "an array";
    case json::value_t::string: return "a string";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    case json::value_t::number_float: return "a number";
    default: return "an unsupported value";
  }
}

}  // namespace pdserve::server
