// Regular expressions → GBNF (grammar.h's parse_gbnf input). The expression must match
// the whole output (as vLLM's guided_regex / structured_outputs.regex).
//
// Supported subset: literals; escapes \n \r \t \f \v \0 \xHH \uHHHH \u{H..} and escaped
// punctuation; \d \D \w \W \s \S (ASCII classes); `.` (any character but \n); classes
// [...] and [^...] with ranges and \d \w \s inside; groups (...), (?:...), (?<name>...),
// (?P<name>...); alternation |; quantifiers * + ? {m} {m,} {m,n} (a lazy or possessive
// suffix is accepted: for a whole-output match it changes nothing); ^ at the start and $
// at the end (no-ops). Refused (InvalidArgument naming the construct): back-references,
// lookaround, \b \B, inline flags, anchors elsewhere, and negated shorthands inside [].
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"
#include "grammar/grammar.h"

namespace pdserve::grammar {

/// The GBNF expression (no rule name) of `pattern`. json_string: the expression is for
/// the inside of a JSON string (JSON Schema `pattern`): characters that JSON must escape
/// (", \ and controls) are produced in their escaped forms and class members of that kind
/// are matched by their escapes, so the output stays valid JSON. ResourceExhausted when
/// the expression's grammar expands to more than `max_size` elements
/// (Grammar::expanded_size: `([a-z]{100}){100}` is about 30,000), refused while the
/// grammar is checked, before it is expanded.
Result<std::string> regex_to_gbnf_expr(std::string_view pattern, bool json_string = false,
                                       uint64_t max_size = kNoSizeLimit);

/// A complete grammar: `root ::= <expr>`; errors as regex_to_gbnf_expr.
Result<std::string> regex_to_gbnf(std::string_view pattern, uint64_t max_size = kNoSizeLimit);

/// `cp` as a GBNF literal character (inside "..."), escaped where needed.
std::string gbnf_literal_char(uint32_t cp);

}  // namespace pdserve::grammar
