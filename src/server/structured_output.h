// Structured-output request fields → one GBNF grammar (engine::SamplingParams::grammar).
// Accepted (at most one of them per request):
//   response_format: {type: "text" | "json_object" | "json_schema", json_schema: {name,
//     schema, strict, description}} (OpenAI; llama.cpp's {type, schema} form too)
//   structured_outputs: {json | regex | choice | grammar | json_object} (vLLM)
//   guided_json, guided_regex, guided_choice, guided_grammar (older vLLM)
//   grammar (GBNF), json_schema (llama.cpp server)
// A schema, regex or grammar the grammar layer cannot compile gets a 400 naming the
// field and the problem (an unsupported JSON Schema keyword: code unsupported_parameter);
// one whose grammar expands past --max-grammar-states (grammar::Grammar::expanded_size)
// gets a 400 naming the field and the flag, refused before the grammar is expanded.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "engine/sampling_params.h"
#include "server/api_error.h"
#include "server/json_util.h"

namespace pdserve::server {

/// --max-grammar-states's default: grammar elements after expansion.
inline constexpr uint64_t kDefaultMaxGrammarStates = 1000000;

/// Reads the fields above from request object `obj`; on success sets `params.grammar`
/// (left empty when none is given or response_format is text) and `*field` (optional)
/// to the request field it came from. A grammar expanding to more than
/// `max_grammar_states` elements: grammar_too_large(field).
std::optional<ApiError> parse_structured_output(const json& obj, engine::SamplingParams& params,
                                                std::string* field = nullptr,
                                                uint64_t max_grammar_states = kDefaultMaxGrammarStates);

/// The 400 (param `param`) of a constraint whose grammar expands to more than
/// `max_grammar_states` elements; the message names --max-grammar-states.
ApiError grammar_too_large(const std::string& param, uint64_t max_grammar_states);

}  // namespace pdserve::server
