// JSON Schema → GBNF, for response_format json_schema / guided_json / llama.cpp's
// json_schema. The output is compact-ish JSON: between tokens at most one space, or a
// newline and up to 20 spaces/tabs (as llama.cpp's json-schema-to-grammar).
//
// Supported: type (one or a list), properties, required, additionalProperties (false,
// true, or a schema for objects without properties), enum, const, items, minItems,
// maxItems, anyOf, $ref to #, #/$defs/NAME or #/definitions/NAME (recursion allowed),
// $defs/definitions, minLength, maxLength, pattern (regex_to_gbnf.h's subset), format
// "uuid", nullable (OpenAPI 3.0); the empty schema / true means any JSON value. Properties are produced in the
// schema's order (an ordered_json keeps document order, as OpenAI's structured outputs do);
// optional ones may be left out. Annotations (title,
// description, default, examples, $schema, $id, $comment, deprecated, readOnly,
// writeOnly, strict) are ignored. Refused (InvalidArgument naming the keyword): every
// other keyword, e.g. oneOf, allOf, not, if/then/else, minimum/maximum, multipleOf,
// patternProperties, prefixItems, uniqueItems: true, other formats, remote $refs.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "grammar/grammar.h"

namespace pdserve::grammar {

/// The GBNF grammar of documents valid under `schema`. Error messages name the
/// offending keyword and its JSON pointer, e.g. "unsupported keyword 'oneOf' at
/// /properties/a" (InvalidArgument). ResourceExhausted when the grammar expands to more
/// than `max_size` elements (Grammar::expanded_size; nested minItems multiply), found
/// before it is expanded.
Result<std::string> json_schema_to_gbnf(const nlohmann::ordered_json& schema, uint64_t max_size = kNoSizeLimit);

/// Composition (several schemas in one grammar, e.g. tool arguments): rule `name` for
/// `schema` with helper rules prefixed by `name` + "-", referring to the shared rules of
/// json_primitives_gbnf() (ws, json-string, json-value, ...), which the caller appends once.
/// `max_size` bounds the grammars of `pattern`s (the whole is checked by parsing it).
Result<std::string> json_schema_rules(const nlohmann::ordered_json& schema, const std::string& name,
                                      uint64_t max_size = kNoSizeLimit);
std::string json_primitives_gbnf();

/// The grammar of any JSON object (response_format json_object).
std::string json_object_gbnf();

/// The grammar of exactly one of `choices` (guided_choice).
std::string choice_gbnf(const std::vector<std::string>& choices);

}  // namespace pdserve::grammar
