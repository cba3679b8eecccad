#include "grammar/json_schema_to_gbnf.h"

#include <map>
#include <set>

#include "grammar/regex_to_gbnf.h"

namespace pdserve::grammar {

namespace {

using json = nlohmann::ordered_json;

// Shared rules of every JSON grammar.
const char* kPrimitives =
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n"
    "json-char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" ([0-9a-cA-CeEfF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}))\n"
    "json-string ::= \"\\\"\" json-char* \"\\\"\"\n"
    "json-integer ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15})\n"
    "json-number ::= json-integer (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})?\n"
    "json-boolean ::= \"true\" | \"false\"\n"
    "json-null ::= \"null\"\n"
    "json-value ::= json-object | json-array | json-string | json-number | json-boolean | json-null\n"
    "json-object ::= \"{\" ws (json-string ws \":\" ws json-value (ws \",\" ws json-string ws \":\" ws json-value)*)? ws \"}\"\n"
    "json-array ::= \"[\" ws (json-value (ws \",\" ws json-value)*)? ws \"]\"\n";

/// A GBNF literal of raw UTF-8 `text`.
std::string lit(const std::string& text) {
  std::string s = "\"";
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) s += gbnf_literal_char(c);
    else s += static_cast<char>(c);  // UTF-8 passes through (the GBNF parser decodes it)
  }
  return s + "\"";
}

class Converter {
 public:
  Converter(const json& root, std::string prefix, uint64_t max_size)
      : root_(root), prefix_(std::move(prefix)), max_size_(max_size) {}

  /// Rule `name` and its helper rules (named prefix + ...), without the shared ones.
  Result<std::string> run(const std::string& name) {
    std::string top;
    if (!visit(root_, "/", top)) {
      if (too_large_) return Status::ResourceExhausted(err_);
      return Status::InvalidArgument(err_);
    }
    std::string out = name + " ::= " + top + "\n";
    for (auto& [rule, body] : rules_) out += rule + " ::= " + body + "\n";
    return out;
  }

 private:
  bool fail(const std::string& m) {
    if (err_.empty()) err_ = m;
    return false;
  }

  std::string new_rule(const std::string& body) {
    std::string name = prefix_ + "r" + std::to_string(rules_.size());
    rules_[name] = body;
    return name;
  }

  bool check_keywords(const json& s, const std::string& at, const std::set<std::string>& allowed) {
    static const std::set<std::string> kIgnored = {"title", "description", "default", "examples", "$schema", "$id",
                                                   "$comment", "deprecated", "readOnly", "writeOnly", "strict",
                                                   "$defs", "definitions", "type"};
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (kIgnored.count(it.key()) || allowed.count(it.key())) continue;
      return fail("unsupported keyword '" + it.key() + "' at " + at);
    }
    return true;
  }

  static std::string child(const std::string& at, const std::string& k) { return (at == "/" ? "" : at) + "/" + k; }

  bool ref(const std::string& r, const std::string& at, std::string& out) {
    if (auto it = ref_rules_.find(r); it != ref_rules_.end()) {
      out = it->second;
      return true;
    }
    const json* target = nullptr;
    if (r == "#") {
      target = &root_;
    } else {
      for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
        const std::string p = prefix;
        if (r.rfind(p, 0) != 0) continue;
        const std::string key = p.substr(2, p.size() - 3);
        const std::string name = r.substr(p.size());
        if (root_.contains(key) && root_[key].is_object() && root_[key].contains(name)) target = &root_[key][name];
      }
    }
    if (!target) return fail("unsupported or unresolvable $ref '" + r + "' at " + at + " (only #, #/$defs/NAME and #/definitions/NAME)");
    const std::string name = prefix_ + "ref" + std::to_string(ref_rules_.size());
    ref_rules_[r] = name;
    rules_[name] = "";  // reserved: recursion refers to it by name
    std::string body;
    if (!visit(*target, r.substr(1).empty() ? "/" : r.substr(1), body)) return false;
    rules_[name] = body;
    out = name;
    return true;
  }

  /// Sets `out` to a GBNF expression (a rule name or a parenthesised expression).
  bool visit(const json& s, const std::string& at, std::string& out) {
    if (s.is_boolean()) {
      if (!s.get<bool>()) return fail("schema 'false' (nothing is valid) at " + at);
      out = "json-value";
      return true;
    }
    if (!s.is_object()) return fail("a schema must be an object or a boolean at " + at);
    if (s.contains("nullable")) {  // OpenAPI 3.0 (zod / openai helpers emit it): also null
      if (!s["nullable"].is_boolean()) return fail("'nullable' must be a boolean at " + at);
      json rest = s;
      rest.erase("nullable");
      std::string sub;
      if (!visit(rest, at, sub)) return false;
      out = s["nullable"].get<bool>() ? "(" + sub + " | json-null)" : sub;
      return true;
    }
    if (s.contains("$ref")) {
      if (!s["$ref"].is_string()) return fail("'$ref' must be a string at " + at);
      if (!check_keywords(s, at, {"$ref"})) return false;
      return ref(s["$ref"].get<std::string>(), at, out);
    }
    // With a type beside const or enum, only the values of that type are valid.
    auto type_ok = [&](const json& v) {
      if (!s.contains("type")) return true;
      const json types = s["type"].is_array() ? s["type"] : json::array({s["type"]});
      for (const auto& t : types) {
        if ((t == "string" && v.is_string()) || (t == "boolean" && v.is_boolean()) || (t == "null" && v.is_null()) ||
            (t == "number" && v.is_number()) || (t == "integer" && v.is_number_integer()) ||
            (t == "object" && v.is_object()) || (t == "array" && v.is_array()))
          return true;
      }
      return false;
    };
    if (s.contains("const")) {
      if (!check_keywords(s, at, {"const"})) return false;
      if (!type_ok(s["const"])) return fail("the 'const' value does not have the schema's 'type' at " + at);
      out = lit(s["const"].dump());
      return true;
    }
    if (s.contains("enum")) {
      const json& e = s["enum"];
      if (!e.is_array() || e.empty()) return fail("'enum' must be a non-empty array at " + at);
      if (!check_keywords(s, at, {"enum"})) return false;
      std::string alt;
      for (const auto& v : e)
        if (type_ok(v)) alt += (alt.empty() ? "" : " | ") + lit(v.dump());
      if (alt.empty()) return fail("no 'enum' value has the schema's 'type' at " + at);
      out = "(" + alt + ")";
      return true;
    }
    if (s.contains("anyOf")) {
      const json& a = s["anyOf"];
      if (!a.is_array() || a.empty()) return fail("'anyOf' must be a non-empty array at " + at);
      if (!check_keywords(s, at, {"anyOf"})) return false;
      std::string alt;
      for (size_t i = 0; i < a.size(); ++i) {
        std::string sub;
        if (!visit(a[i], child(child(at, "anyOf"), std::to_string(i)), sub)) return false;
        alt += (alt.empty() ? "" : " | ") + sub;
      }
      out = "(" + alt + ")";
      return true;
    }
    if (!s.contains("type")) {
      // No type: the keywords of one type alone say nothing either; any value.
      if (!check_keywords(s, at, {})) return false;
      out = "json-value";
      return true;
    }
    const json& t = s["type"];
    std::vector<std::string> types;
    if (t.is_string()) types.push_back(t.get<std::string>());
    else if (t.is_array() && !t.empty()) {
      for (const auto& x : t) {
        if (!x.is_string()) return fail("'type' entries must be strings at " + at);
        types.push_back(x.get<std::string>());
      }
    } else {
      return fail("'type' must be a string or a non-empty array at " + at);
    }
    std::set<std::string> allowed;
    for (const auto& ty : types) {
      if (ty == "string") allowed.insert({"minLength", "maxLength", "pattern", "format"});
      else if (ty == "array") allowed.insert({"items", "minItems", "maxItems", "uniqueItems"});
      else if (ty == "object") allowed.insert({"properties", "required", "additionalProperties"});
      else if (ty != "integer" && ty != "number" && ty != "boolean" && ty != "null")
        return fail("unknown type '" + ty + "' at " + at);
    }
    if (!check_keywords(s, at, allowed)) return false;
    std::string alt;
    for (const auto& ty : types) {
      std::string one;
      if (ty == "string") { if (!string_schema(s, at, one)) return false; }
      else if (ty == "array") { if (!array_schema(s, at, one)) return false; }
      else if (ty == "object") { if (!object_schema(s, at, one)) return false; }
      else one = "json-" + ty;
      alt += (alt.empty() ? "" : " | ") + one;
    }
    out = types.size() == 1 ? alt : "(" + alt + ")";
    return true;
  }

  static bool count(const json& s, const char* k, int64_t& v) {
    if (!s.contains(k)) return true;
    if (!s[k].is_number_integer() || s[k].get<int64_t>() < 0) return false;
    v = s[k].get<int64_t>();
    return true;
  }

  bool string_schema(const json& s, const std::string& at, std::string& out) {
    int64_t min = 0, max = -1;
    if (!count(s, "minLength", min) || !count(s, "maxLength", max)) return fail("'minLength'/'maxLength' must be non-negative integers at " + at);
    if (max >= 0 && max < min) return fail("'maxLength' is below 'minLength' at " + at);
    if (min > 10000 || max > 10000) return fail("'minLength'/'maxLength' above 10000 are not supported at " + at);
    const bool has_len = s.contains("minLength") || s.contains("maxLength");
    if (s.contains("pattern")) {
      if (has_len) return fail("'pattern' together with 'minLength'/'maxLength' is not supported at " + at);
      if (s.contains("format")) return fail("'pattern' together with 'format' is not supported at " + at);
      if (!s["pattern"].is_string()) return fail("'pattern' must be a string at " + at);
      std::string p = s["pattern"].get<std::string>();
      // JSON Schema patterns are unanchored: an unanchored end allows anything around.
      const bool a0 = !p.empty() && p[0] == '^';
      const bool a1 = !p.empty() && p.back() == '$' && (p.size() < 2 || p[p.size() - 2] != '\\');
      auto e = regex_to_gbnf_expr(p, true, max_size_);
      if (e.code() == StatusCode::ResourceExhausted) {
        too_large_ = err_.empty();
        return fail("the 'pattern' at " + at + ": " + e.error());
      }
      if (!e.ok()) return fail("invalid 'pattern' at " + at + ": " + e.error());
      out = "(\"\\\"\" " + std::string(a0 ? "" : "json-char* ") + *e + (a1 ? "" : " json-char*") + " \"\\\"\")";
      return true;
    }
    if (s.contains("format")) {
      if (has_len) return fail("'format' together with 'minLength'/'maxLength' is not supported at " + at);
      const json& f = s["format"];
      if (!f.is_string() || f.get<std::string>() != "uuid")
        return fail("unsupported 'format' " + f.dump() + " at " + at + " (supported: uuid)");
      out = "(\"\\\"\" [0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12} \"\\\"\")";
      return true;
    }
    if (!has_len) {
      out = "json-string";
      return true;
    }
    out = "(\"\\\"\" json-char{" + std::to_string(min) + (max == min ? "" : "," + (max >= 0 ? std::to_string(max) : "")) + "} \"\\\"\")";
    return true;
  }

  bool array_schema(const json& s, const std::string& at, std::string& out) {
    int64_t min = 0, max = -1;
    if (!count(s, "minItems", min) || !count(s, "maxItems", max)) return fail("'minItems'/'maxItems' must be non-negative integers at " + at);
    if (max >= 0 && max < min) return fail("'maxItems' is below 'minItems' at " + at);
    if (min > 1000 || max > 1000) return fail("'minItems'/'maxItems' above 1000 are not supported at " + at);
    if (s.contains("uniqueItems") && !(s["uniqueItems"].is_boolean() && !s["uniqueItems"].get<bool>()))
      return fail("unsupported keyword 'uniqueItems' at " + at);
    std::string item = "json-value";
    if (s.contains("items") && !visit(s["items"], child(at, "items"), item)) return false;
    if (max == 0) {
      out = "(\"[\" ws \"]\")";
      return true;
    }
    const std::string more = "(ws \",\" ws " + item + ")";
    std::string rep;
    const int64_t lo = std::max<int64_t>(min - 1, 0);
    if (max < 0) rep = lo == 0 ? more + "*" : more + "{" + std::to_string(lo) + ",}";
    else rep = more + "{" + std::to_string(lo) + "," + std::to_string(max - 1) + "}";
    std::string body = item + " " + rep;
    if (min == 0) body = "(" + body + ")?";
    out = new_rule("\"[\" ws " + body + " ws \"]\"");
    return true;
  }

  bool object_schema(const json& s, const std::string& at, std::string& out) {
    const json* props = s.contains("properties") ? &s["properties"] : nullptr;
    if (props && !props->is_object()) return fail("'properties' must be an object at " + at);
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) return fail("'required' must be an array at " + at);
      for (const auto& r : s["required"]) {
        if (!r.is_string()) return fail("'required' entries must be strings at " + at);
        if (!props || !props->contains(r.get<std::string>()))
          return fail("required property '" + r.get<std::string>() + "' is not in 'properties' at " + at);
        required.insert(r.get<std::string>());
      }
    }
    const json* addl = s.contains("additionalProperties") ? &s["additionalProperties"] : nullptr;
    if (!props || props->empty()) {
      if (addl && addl->is_boolean() && !addl->get<bool>()) {
        out = "(\"{\" ws \"}\")";
        return true;
      }
      std::string v = "json-value";
      if (addl && !addl->is_boolean() && !visit(*addl, child(at, "additionalProperties"), v)) return false;
      const std::string kv = "json-string ws \":\" ws " + v;
      out = new_rule("\"{\" ws (" + kv + " (ws \",\" ws " + kv + ")*)? ws \"}\"");
      return true;
    }
    if (addl && !addl->is_boolean())
      return fail("'additionalProperties' as a schema together with 'properties' is not supported at " + at);
    // kv_i, then suffix rules S_i = item_i S_{i+1} where item_i = "," kv_i (optional
    // when not required); the body is one alternative per possible first property.
    std::vector<std::string> kv;
    std::vector<bool> req;
    for (auto it = props->begin(); it != props->end(); ++it) {
      std::string v;
      if (!visit(it.value(), child(child(at, "properties"), it.key()), v)) return false;
      kv.push_back(lit(json(it.key()).dump()) + " ws \":\" ws " + v);
      req.push_back(required.count(it.key()) > 0);
    }
    // ordered_json objects iterate in document order, so properties come in schema order.
    const size_t n = kv.size();
    std::vector<std::string> suffix(n + 1);
    suffix[n] = "";
    for (size_t i = n; i-- > 0;) {
      const std::string item = "(ws \",\" ws " + kv[i] + ")" + (req[i] ? "" : "?");
      suffix[i] = new_rule(item + (suffix[i + 1].empty() ? "" : " " + suffix[i + 1]));
    }
    std::string alts;
    for (size_t j = 0; j < n; ++j) {
      alts += (alts.empty() ? "" : " | ") + kv[j] + (suffix[j + 1].empty() ? "" : " " + suffix[j + 1]);
      if (req[j]) break;  // a required property cannot be skipped
    }
    const bool all_optional = required.empty();
    out = new_rule("\"{\" ws " + std::string(all_optional ? "(" + alts + ")?" : "(" + alts + ")") + " ws \"}\"");
    return true;
  }

  const json& root_;
  std::string prefix_;
  uint64_t max_size_;
  bool too_large_ = false;  // err_ is a size error (ResourceExhausted)
  std::map<std::string, std::string> rules_;
  std::map<std::string, std::string> ref_rules_;
  std::string err_;
};

}  // namespace

Result<std::string> json_schema_to_gbnf(const nlohmann::ordered_json& schema, uint64_t max_size) {
  auto r = Converter(schema, "", max_size).run("root");
  if (!r.ok()) return r;
  std::string gbnf = *r + kPrimitives;
  if (max_size != kNoSizeLimit) {  // the text is linear in the schema; its expansion may not be
    auto g = parse_gbnf(gbnf, max_size);
    if (g.code() == StatusCode::ResourceExhausted) return g.status();
  }
  return gbnf;
}

Result<std::string> json_schema_rules(const nlohmann::ordered_json& schema, const std::string& name, uint64_t max_size) {
  return Converter(schema, name + "-", max_size).run(name);
}

std::string json_primitives_gbnf() { return kPrimitives; }

std::string json_object_gbnf() { return std::string("root ::= json-object\n") + kPrimitives; }

std::string choice_gbnf(const std::vector<std::string>& choices) {
  std::string s = "root ::= ";
  for (size_t i = 0; i < choices.size(); ++i) s += (i ? " | " : "") + lit(choices[i]);
  return s + "\n";
}

}  // namespace pdserve::grammar
