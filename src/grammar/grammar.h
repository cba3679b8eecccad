// A byte-level context-free grammar: the form every structured-output spec (GBNF, JSON
// Schema, regex, choice) is compiled to before decoding is constrained by it.
// Rules are alternatives of element sequences; an element matches one byte from a set,
// refers to a rule, or ends an alternative. Unicode character classes are expanded to
// UTF-8 byte sequences at build time, so matching is exact at the byte level (tokens that
// end inside a multi-byte character are handled like any other prefix).
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"

namespace pdserve::grammar {

/// A set of byte values (256-bit bitmap).
struct ByteSet {
  std::array<uint64_t, 4> bits{};
  bool has(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
  void add(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) bits[b >> 6] |= uint64_t{1} << (b & 63);
  }
  bool operator==(const ByteSet& o) const { return bits == o.bits; }
};

/// Hash of a ByteSet (Grammar::set_index).
struct ByteSetHash {
  size_t operator()(const ByteSet& s) const {
    uint64_t h = 0x9E3779B97F4A7C15ull;
    for (uint64_t w : s.bits) h = (h ^ w) * 0x100000001B3ull + (h >> 29);
    return static_cast<size_t>(h);
  }
};

/// One grammar symbol. kBytes: `value` indexes Grammar::sets; kRule: `value` is a rule id;
/// kEnd: the end of an alternative.
struct Element {
  enum Kind : uint8_t { kBytes, kRule, kEnd };
  Kind kind;
  int32_t value;
};

/// No size limit (parse_gbnf, Grammar::expanded_size).
inline constexpr uint64_t kNoSizeLimit = std::numeric_limits<uint64_t>::max();

/// The compiled grammar. elems holds every alternative, each terminated by kEnd;
/// rule_alts[r] lists the offsets in elems where rule r's alternatives start.
struct Grammar {
  std::vector<Element> elems;
  std::vector<std::vector<int32_t>> rule_alts;
  std::vector<std::string> rule_names;
  std::vector<ByteSet> sets;
  int32_t root = -1;
  std::unordered_map<std::string, int32_t> rule_index;  // rule_names → id (builder)
  // Builder: sets → index in `sets`, so that deduplicating a set is O(1), not a scan of
  // every set so far (40,000 distinct regex classes took 7 s; found from tests/fuzz).
  std::unordered_map<ByteSet, int32_t, ByteSetHash> set_index;
  // Builder: codepoint_class's rule per distinct multi-byte class (its normalised ranges
  // as bytes), so that each '.' of a long regex refers to one shared rule instead of
  // building its own ~30 elements again.
  std::unordered_map<std::string, Element> class_index;

  /// Builder: the id of rule `name`, created (with no alternatives) if new.
  int32_t rule_id(const std::string& name);
  /// Builder: a fresh rule named `base` + a unique suffix.
  int32_t new_rule(const std::string& base);
  /// Builder: appends an alternative (a sequence of kBytes/kRule elements) to `rule`.
  void add_alt(int32_t rule, const std::vector<Element>& seq);
  /// Builder: the element matching one byte of `set` (sets are deduplicated).
  Element bytes(const ByteSet& set);
  Element byte(uint8_t b);

  /// InvalidArgument when a referenced rule has no alternatives, or a rule is left
  /// recursive (directly or through nullable prefixes); the message names the rule.
  Status validate() const;
  /// Builder, after validate(): removes the alternatives that can never end (an element is an
  /// empty byte set or a rule that cannot end), so that the matcher never takes a path with
  /// nowhere to go (a generation there stopped with an error). The language is unchanged.
  void drop_dead_alternatives();

  /// The number of elements (kBytes, kRule and kEnd) of the grammar once every rule
  /// reference that is not a tail call is replaced by a copy of the rule, from `root`:
  /// the positions the matcher can be at, each with its own return stack, so it bounds
  /// the matcher's stack frames (GrammarMatcher::num_frames) and the size of any of its
  /// states. A tail call (a reference at the end of an alternative, as in the rules of
  /// `*`, `{m,n}` and alternatives) does not copy: the matcher pushes nothing for it. A
  /// recursive reference (to a rule whose own copy is being counted) counts its element
  /// only: each level of recursion needs output, so it grows with the output, not with
  /// the grammar. `x{1000}` counts x 1000 times, so nested repetitions multiply.
  /// Saturating: any value above `limit` is returned as limit + 1 (and counting stops
  /// there, so the cost is O(min(result, limit) + elems.size())).
  uint64_t expanded_size(uint64_t limit = kNoSizeLimit - 1) const;
};

/// An inclusive code-point range.
struct CodepointRange {
  uint32_t lo, hi;
};

/// Appends to `g` a matcher of one code point in the union of `ranges` (negated ⇒ its
/// complement over U+0000..U+10FFFF; surrogates never match) and returns the element
/// to put in a sequence: a kBytes element when only ASCII is involved, else a rule of
/// UTF-8 byte sequences (as Russ Cox's / Rust regex-syntax's Utf8Sequences split).
Element codepoint_class(Grammar& g, std::vector<CodepointRange> ranges, bool negated);

/// Appends the UTF-8 encoding of `cp` to `out`.
void append_utf8(uint32_t cp, std::string& out);

/// Parses llama.cpp's GBNF (grammars/README.md in llama.cpp): `name ::= alternatives`,
/// "literals" with \n \r \t \\ \" \xHH \uHHHH \UHHHHHHHH escapes, [classes] (^ negation,
/// ranges), `.` (any character), ( groups ), rule references, postfix * + ? {m} {m,}
/// {m,n}, # comments; the start rule is `root`. Not supported (errors): token references
/// (<[id]>, <name>). Errors: InvalidArgument naming the line and the problem;
/// ResourceExhausted when the grammar is larger than `max_size` elements, counted as
/// Grammar::expanded_size — refused while parsing, before a repetition is expanded past
/// the limit (so a huge grammar costs neither the memory nor the time of building it).
Result<Grammar> parse_gbnf(std::string_view text, uint64_t max_size = kNoSizeLimit);

/// The ResourceExhausted message of a grammar over `max_size`.
std::string grammar_too_large_message(uint64_t max_size);

}  // namespace pdserve::grammar
