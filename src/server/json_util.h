// JSON helpers shared by the API layer: dumping that never throws on invalid UTF-8, and
// display strings for token pieces that may hold partial UTF-8 sequences.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace pdserve::server {

using json = nlohmann::ordered_json;  // objects keep their members in document order (schema property order)

/// Compact JSON text; invalid UTF-8 inside strings becomes U+FFFD instead of throwing.
std::string dump_json(const json& j);

/// True when `s` is well-formed UTF-8 (no overlongs, surrogates or code points > U+10FFFF).
bool is_valid_utf8(std::string_view s);

/// The characters of a byte stream pushed in parts (a choice's text, token by token) as
/// dump_json shows it: a well-formed character counts one, and so does each U+FFFD that
/// nlohmann's error_handler_t::replace puts for an invalid byte or a sequence broken off
/// (the Unicode "maximal subpart" rule).
class Utf8CharCounter {
 public:
  void push(std::string_view bytes);
  /// Characters so far, a sequence still incomplete not counted.
  int offset() const { return count_; }
  /// The index of the character that `next`'s first byte starts, or continues (a sequence
  /// still incomplete that it completes or carries on); after a sequence it breaks off.
  int offset_before(std::string_view next) const;

 private:
  void push_byte(uint8_t b);
  int count_ = 0;
  int need_ = 0;                 // continuation bytes the sequence in progress still needs
  uint8_t lo_ = 0x80, hi_ = 0xBF;  // the range its next byte must be in
};

/// The string OpenAI shows for a token: the piece itself when it is valid UTF-8, else
/// "bytes:\xNN\xNN..." (lossless; the exact bytes also go in `bytes` arrays).
std::string token_display(std::string_view piece);

/// The piece's bytes as unsigned integers (the `bytes` field of chat logprobs).
std::vector<int> token_bytes(std::string_view piece);

/// A JSON type name for error messages: "a string", "an integer", "an object", ...
std::string json_type_phrase(const json& j);

}  // namespace pdserve::server
