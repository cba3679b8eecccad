#include "server/structured_output.h"
#include "server/request_limits.h"

#include <vector>

#include "grammar/grammar.h"
#include "grammar/json_schema_to_gbnf.h"
#include "grammar/regex_to_gbnf.h"

namespace pdserve::server {

namespace {

ApiError invalid(const std::string& param, const std::string& what, bool unsupported = false) {
  return bad_request("Invalid '" + param + "': " + what, param,
                     unsupported ? std::optional<std::string>("unsupported_parameter") : std::nullopt);
}

/// A schema given as an object/boolean or as JSON text (vLLM accepts both).
std::optional<ApiError> schema_grammar(const json& v, const std::string& param, std::string& out, uint64_t cap) {
  json schema = v;
  if (v.is_string()) {
    if (auto err = check_json_depth(v.get<std::string>(), kDefaultMaxJsonDepth))  // JSON text inside a string: not pre-scanned
      return invalid(param, "the JSON schema text nests deeper than " + std::to_string(kDefaultMaxJsonDepth) +
                                " levels or has an object of more than " + std::to_string(kMaxJsonObjectMembers) + " members.");
    try {
      schema = json::parse(v.get<std::string>());
    } catch (const json::exception&) {
      return invalid(param, "the JSON schema text does not parse as JSON.");
    }
  }
  if (!schema.is_object() && !schema.is_boolean()) return invalid(param, "expected a JSON schema (an object).");
  auto g = grammar::json_schema_to_gbnf(schema, cap);
  if (g.code() == StatusCode::ResourceExhausted) return grammar_too_large(param, cap);
  if (!g.ok()) {
    const bool unsup = g.error().rfind("unsupported", 0) == 0;
    return invalid(param, g.error() + ".", unsup);
  }
  out = std::move(*g);
  return std::nullopt;
}

std::optional<ApiError> regex_grammar(const json& v, const std::string& param, std::string& out, uint64_t cap) {
  if (!v.is_string()) return invalid(param, "expected a string (a regular expression).");
  auto g = grammar::regex_to_gbnf(v.get<std::string>(), cap);
  if (g.code() == StatusCode::ResourceExhausted) return grammar_too_large(param, cap);
  if (!g.ok()) return invalid(param, g.error() + ".");
  out = std::move(*g);
  return std::nullopt;
}

std::optional<ApiError> choice_grammar(const json& v, const std::string& param, std::string& out, uint64_t) {
  if (!v.is_array() || v.empty()) return invalid(param, "expected a non-empty array of strings.");
  std::vector<std::string> choices;
  for (const auto& c : v) {
    if (!c.is_string()) return invalid(param, "expected a non-empty array of strings.");
    if (c.get_ref<const std::string&>().empty()) return invalid(param, "a choice is the empty string.");
    choices.push_back(c.get<std::string>());
  }
  out = grammar::choice_gbnf(choices);
  return std::nullopt;
}

std::optional<ApiError> gbnf_grammar(const json& v, const std::string& param, std::string& out, uint64_t) {
  if (!v.is_string()) return invalid(param, "expected a string (a GBNF grammar).");
  out = v.get<std::string>();
  return std::nullopt;
}

const json* present(const json& obj, const char* name) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<ApiError> response_format(const json& rf, std::string& out, bool& set, uint64_t cap) {
  if (!rf.is_object()) return invalid("response_format", "expected an object.");
  const json* t = present(rf, "type");
  if (!t || !t->is_string()) return invalid("response_format.type", "expected one of 'text', 'json_object', 'json_schema'.");
  const std::string& type = t->get_ref<const std::string&>();
  if (type == "text") return std::nullopt;
  if (type == "json_object") {
    set = true;
    if (const json* s = present(rf, "schema")) return schema_grammar(*s, "response_format.schema", out, cap);  // llama.cpp
    out = grammar::json_object_gbnf();
    return std::nullopt;
  }
  if (type != "json_schema") return invalid("response_format.type", "expected one of 'text', 'json_object', 'json_schema', but got '" + type + "'.");
  set = true;
  if (const json* s = present(rf, "schema")) return schema_grammar(*s, "response_format.schema", out, cap);  // llama.cpp
  const json* js = present(rf, "json_schema");
  if (!js || !js->is_object()) return invalid("response_format.json_schema", "missing; expected an object with 'name' and 'schema'.");
  if (const json* name = present(*js, "name"); name && !name->is_string())
    return invalid("response_format.json_schema.name", "expected a string.");
  if (const json* strict = present(*js, "strict"); strict && !strict->is_boolean())
    return invalid("response_format.json_schema.strict", "expected a boolean.");
  const json* schema = present(*js, "schema");
  if (!schema) {  // OpenAI: no schema means any JSON object
    out = grammar::json_object_gbnf();
    return std::nullopt;
  }
  return schema_grammar(*schema, "response_format.json_schema.schema", out, cap);
}

}  // namespace

ApiError grammar_too_large(const std::string& param, uint64_t max_grammar_states) {
  return bad_request("Invalid '" + param + "': the constraint is too large: " +
                         grammar::grammar_too_large_message(max_grammar_states) + "; this server accepts at most " +
                         std::to_string(max_grammar_states) + " (--max-grammar-states).",
                     param);
}

std::optional<ApiError> parse_structured_output(const json& obj, engine::SamplingParams& params, std::string* field,
                                                uint64_t cap) {
  std::string gbnf;
  std::vector<std::string> given;  // the constraint fields present, for the "only one" check
  auto one = [&](const std::string& name, std::optional<ApiError> e) -> std::optional<ApiError> {
    if (e) return e;
    given.push_back(name);
    return std::nullopt;
  };
  if (const json* rf = present(obj, "response_format")) {
    bool set = false;
    if (auto e = response_format(*rf, gbnf, set, cap)) return e;
    if (set) given.push_back("response_format");
  }
  if (const json* so = present(obj, "structured_outputs")) {
    if (!so->is_object()) return invalid("structured_outputs", "expected an object.");
    int n = 0;
    for (auto it = so->begin(); it != so->end(); ++it) {
      if (it->is_null()) continue;
      const std::string k = it.key(), p = "structured_outputs." + k;
      std::optional<ApiError> e;
      if (k == "json") e = schema_grammar(*it, p, gbnf, cap);
      else if (k == "regex") e = regex_grammar(*it, p, gbnf, cap);
      else if (k == "choice") e = choice_grammar(*it, p, gbnf, cap);
      else if (k == "grammar") e = gbnf_grammar(*it, p, gbnf, cap);
      else if (k == "json_object") {
        if (!it->is_boolean()) return invalid(p, "expected a boolean.");
        if (!it->get<bool>()) continue;
        gbnf = grammar::json_object_gbnf();
      } else if (k == "disable_any_whitespace" || k == "disable_additional_properties" || k == "whitespace_pattern" ||
                 k == "backend" || k == "disable_fallback") {
        continue;  // backend options: no effect here
      } else {
        return invalid(p, "unknown structured output kind (expected json, regex, choice, grammar or json_object).", true);
      }
      if (e) return e;
      ++n;
    }
    if (n > 1) return invalid("structured_outputs", "give only one of json, regex, choice, grammar, json_object.");
    if (n == 1) given.push_back("structured_outputs");
  }
  struct Field {
    const char* name;
    std::optional<ApiError> (*fn)(const json&, const std::string&, std::string&, uint64_t);
  };
  for (const Field& f : {Field{"guided_json", schema_grammar}, Field{"guided_regex", regex_grammar},
                         Field{"guided_choice", choice_grammar}, Field{"guided_grammar", gbnf_grammar},
                         Field{"grammar", gbnf_grammar}, Field{"json_schema", schema_grammar}}) {
    if (const json* v = present(obj, f.name))
      if (auto e = one(f.name, f.fn(*v, f.name, gbnf, cap))) return e;
  }
  if (given.size() > 1)
    return bad_request("Only one structured-output constraint may be given, but got '" + given[0] + "' and '" +
                           given[1] + "'.",
                       given[1]);
  if (given.empty()) return std::nullopt;
  // Every constraint becomes GBNF: check it compiles (a user's grammar may not).
  auto g = grammar::parse_gbnf(gbnf, cap);
  if (g.code() == StatusCode::ResourceExhausted) return grammar_too_large(given[0], cap);
  if (!g.ok()) return invalid(given[0], "invalid grammar: " + g.error() + ".");
  params.grammar = std::move(gbnf);
  if (field) *field = given[0];
  return std::nullopt;
}

}  // namespace pdserve::server
