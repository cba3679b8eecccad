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

/// Number of characters (code points) that `s` contributes to a UTF-8 text: every byte
/// that is not a continuation byte counts one, so partial sequences add up correctly.
int utf8_char_count(std::string_view s);

/// The string OpenAI shows for a token: the piece itself when it is valid UTF-8, else
/// "bytes:\xNN\xNN..." (lossless; the exact bytes also go in `bytes` arrays).
std::string token_display(std::string_view piece);

/// The piece's bytes as unsigned integers (the `bytes` field of chat logprobs).
std::vector<int> token_bytes(std::string_view piece);

/// A JSON type name for error messages: "a string", "an integer", "an object", ...
std::string json_type_phrase(const json& j);

}  // namespace pdserve::server
