// Structured-output request fields → one GBNF grammar (engine::SamplingParams::grammar).
// Accepted (at most one of them per request):
//   response_format: {type: "text" | "json_object" | "json_schema", json_schema: {name,
//     schema, strict, description}} (OpenAI; llama.cpp's {type, schema} form too)
//   structured_outputs: {json | regex | choice | grammar | json_object} (vLLM)
//   guided_json, guided_regex, guided_choice, guided_grammar (older vLLM)
//   grammar (GBNF), json_schema (llama.cpp server)
// A schema, regex or grammar the grammar layer cannot compile gets a 400 naming the
// field and the problem (an unsupported JSON Schema keyword: code unsupported_parameter).
#pragma once

#include <optional>
#include <string>

#include "engine/sampling_params.h"
#include "server/api_error.h"
#include "server/json_util.h"

namespace pdserve::server {

/// Reads the fields above from request object `obj`; on success sets `params.grammar`
/// (left empty when none is given or response_format is text) and `*field` (optional)
/// to the request field it came from.
std::optional<ApiError> parse_structured_output(const json& obj, engine::SamplingParams& params,
                                                std::string* field = nullptr);

}  // namespace pdserve::server
