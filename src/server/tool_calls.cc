#include "server/tool_calls.h"
#include "server/request_limits.h"

#include "base/sha256.h"
#include "grammar/json_schema_to_gbnf.h"
#include "grammar/regex_to_gbnf.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

namespace pdserve::server {

namespace {

constexpr const char* kOpen = "<tool_call>\n";
constexpr const char* kClose = "\n</tool_call>";

ApiError invalid(const std::string& param, const std::string& what) {
  return bad_request("Invalid '" + param + "': " + what, param);
}

bool valid_name(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-')) return false;
  return true;
}

std::string gbnf_lit(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) out += c < 0x80 ? grammar::gbnf_literal_char(c) : std::string(1, static_cast<char>(c));
  return out + "\"";
}

}  // namespace

std::optional<ApiError> parse_tools(const json& obj, ToolConfig& out, uint64_t max_grammar_states) {
  auto it = obj.find("tools");
  if (it != obj.end() && !it->is_null()) {
    if (!it->is_array()) return invalid("tools", "expected an array.");
    for (size_t i = 0; i < it->size(); ++i) {
      const json& t = (*it)[i];
      const std::string p = "tools[" + std::to_string(i) + "]";
      if (!t.is_object()) return invalid(p, "expected an object.");
      if (!t.contains("type") || t["type"] != "function") return invalid(p + ".type", "expected 'function'.");
      if (!t.contains("function") || !t["function"].is_object()) return invalid(p + ".function", "missing; expected an object.");
      const json& f = t["function"];
      if (!f.contains("name") || !f["name"].is_string() || !valid_name(f["name"].get<std::string>()))
        return invalid(p + ".function.name", "expected a name of 1 to 64 characters a-z, A-Z, 0-9, '_' or '-'.");
      for (size_t j = 0; j < i; ++j)
        if (out.tools[j]["function"]["name"] == f["name"]) return invalid(p + ".function.name", "duplicate function name.");
      if (f.contains("description") && !f["description"].is_string() && !f["description"].is_null())
        return invalid(p + ".function.description", "expected a string.");
      // Arguments are always a JSON object (OpenAI): no parameters (absent, null or {}) is an
      // empty parameter list, so the arguments are "{}"; a schema without a type is an object's.
      json params = f.contains("parameters") && !f["parameters"].is_null() ? f["parameters"] : json::object();
      if (!params.is_object()) return invalid(p + ".function.parameters", "expected a JSON schema (an object).");
      if (params.empty()) params = {{"type", "object"}, {"properties", json::object()}, {"additionalProperties", false}};
      if (!params.contains("type")) params["type"] = "object";
      if (params["type"] != "object")
        return invalid(p + ".function.parameters", "expected a schema of type 'object' (function arguments are an object), got type " +
                                                       params["type"].dump() + ".");
      auto g = grammar::json_schema_rules(params, "x", max_grammar_states);
      if (g.code() == StatusCode::ResourceExhausted) return grammar_too_large(p + ".function.parameters", max_grammar_states);
      if (!g.ok()) return bad_request("Invalid '" + p + ".function.parameters': " + g.error() + ".", p + ".function.parameters",
                                      g.error().rfind("unsupported", 0) == 0 ? std::optional<std::string>("unsupported_parameter") : std::nullopt);
      json clean = {{"type", "function"}, {"function", {{"name", f["name"]}, {"parameters", params}}}};
      if (f.contains("description") && f["description"].is_string()) clean["function"]["description"] = f["description"];
      out.tools.push_back(std::move(clean));
    }
  }
  auto tc = obj.find("tool_choice");
  if (tc != obj.end() && !tc->is_null()) {
    if (tc->is_string()) {
      const std::string c = tc->get<std::string>();
      if (c != "none" && c != "auto" && c != "required") return invalid("tool_choice", "expected 'none', 'auto', 'required' or a function.");
      out.choice = c;
    } else if (tc->is_object() && tc->contains("function") && (*tc)["function"].is_object() &&
               (*tc)["function"].contains("name") && (*tc)["function"]["name"].is_string()) {
      out.choice = "named";
      out.named = (*tc)["function"]["name"].get<std::string>();
      bool found = false;
      for (const auto& t : out.tools) found = found || t["function"]["name"] == out.named;
      if (!found) return invalid("tool_choice", "function '" + out.named + "' is not in 'tools'.");
    } else {
      return invalid("tool_choice", "expected 'none', 'auto', 'required' or {\"type\": \"function\", \"function\": {\"name\": ...}}.");
    }
    if (out.tools.empty() && out.choice != "none" && out.choice != "auto")
      return invalid("tool_choice", "requires 'tools'.");
  }
  auto pt = obj.find("parallel_tool_calls");
  if (pt != obj.end() && !pt->is_null()) {
    if (!pt->is_boolean()) return invalid("parallel_tool_calls", "expected a boolean.");
    out.parallel = pt->get<bool>();
  }
  return std::nullopt;
}

std::string tools_grammar(const ToolConfig& t) {
  const ToolSyntaxForm& f = tool_syntax_form(t.syntax);
  std::string rules, call_alts;
  for (size_t i = 0; i < t.tools.size(); ++i) {
    const json& fn = t.tools[i]["function"];
    if (t.choice == "named" && fn["name"] != t.named) continue;
    const std::string args = "tool" + std::to_string(i) + "-args";
    rules += *grammar::json_schema_rules(fn["parameters"], args);  // validated by parse_tools
    const std::string head = f.call_open + fn["name"].get<std::string>() + f.name_close;
    call_alts += (call_alts.empty() ? "" : " | ") + gbnf_lit(head) + " " + args + " " + gbnf_lit(f.call_close);
  }
  std::string calls = "calls ::= ";
  if (!f.prefix.empty()) calls += gbnf_lit(f.prefix) + " ";
  calls += "call";
  if (t.parallel && f.parallel) calls += " (" + gbnf_lit(f.separator) + " call)*";
  if (!f.suffix.empty()) calls += " " + gbnf_lit(f.suffix);
  std::string g = calls + "\ncall ::= " + call_alts + "\n";
  char hex[8];
  std::snprintf(hex, sizeof hex, "%02X", static_cast<unsigned char>(f.trigger()));
  if (t.choice == "auto") g = "root ::= calls | [^\\x" + std::string(hex) + "] .*\n" + g;
  else g = "root ::= calls\n" + g;
  return g + rules + grammar::json_primitives_gbnf();
}

std::string tool_syntax_instructions() {
  return "For each function call, return a json object with function name and arguments within "
         "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>";
}

std::string tools_system_prompt(const ToolConfig& t) {
  std::string s = "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                  "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
  for (const auto& tool : t.tools) s += "\n" + dump_json(tool);
  return s + "\n</tools>\n\n" + tool_syntax_instructions();
}

std::optional<ApiError> render_tool_message(const json& m, const std::string& param, std::string& role, std::string& content) {
  if (role == "tool") {
    role = "user";
    content = "<tool_response>\n" + content + "\n</tool_response>";
    return std::nullopt;
  }
  auto it = m.find("tool_calls");
  if (role != "assistant" || it == m.end() || it->is_null()) return std::nullopt;
  // OpenAI's API refuses an empty list too (minimum length 1).
  if (!it->is_array() || it->empty()) return invalid(param + ".tool_calls", "expected a non-empty array.");
  for (size_t i = 0; i < it->size(); ++i) {
    const json& c = (*it)[i];
    const std::string p = param + ".tool_calls[" + std::to_string(i) + "]";
    if (!c.is_object() || !c.contains("function") || !c["function"].is_object()) return invalid(p + ".function", "missing; expected an object.");
    const json& f = c["function"];
    if (!f.contains("name") || !f["name"].is_string()) return invalid(p + ".function.name", "expected a string.");
    json args = json::object();
    if (f.contains("arguments") && f["arguments"].is_string()) {
      if (check_json_depth(f["arguments"].get<std::string>(), kDefaultMaxJsonDepth))  // JSON text inside a string
        return invalid(p + ".function.arguments", "nests deeper than " + std::to_string(kDefaultMaxJsonDepth) +
                                                      " levels or has an object of more than " +
                                                      std::to_string(kMaxJsonObjectMembers) + " members.");
      try {
        args = json::parse(f["arguments"].get<std::string>());
      } catch (const json::exception&) {
        return invalid(p + ".function.arguments", "expected a JSON string.");
      }
    } else if (f.contains("arguments") && !f["arguments"].is_null()) {
      return invalid(p + ".function.arguments", "expected a string.");
    }
    if (!content.empty()) content += "\n";
    content += std::string(kOpen) + dump_json(json{{"name", f["name"]}, {"arguments", args}}) + kClose;
  }
  return std::nullopt;
}

namespace {

/// The index after the JSON value starting at `pos` (objects, arrays and strings by their
/// brackets and quotes; other values up to a delimiter), or npos when `s` ends first.
size_t json_value_end(const std::string& s, size_t pos) {
  if (pos >= s.size()) return std::string::npos;
  if (s[pos] != '{' && s[pos] != '[' && s[pos] != '"') {
    const size_t e = s.find_first_of(",}] \t\r\n", pos);
    return e == pos ? pos + 1 : e;
  }
  int depth = 0;
  bool in_str = false;
  for (size_t i = pos; i < s.size(); ++i) {
    const char c = s[i];
    if (in_str) {
      if (c == '\\') ++i;
      else if (c == '"') in_str = false;
      if (!in_str && depth == 0) return i + 1;
      continue;
    }
    if (c == '"') in_str = true;
    else if (c == '{' || c == '[') ++depth;
    else if ((c == '}' || c == ']') && --depth == 0) return i + 1;
  }
  return std::string::npos;
}

size_t skip_ws(const std::string& s, size_t pos) {
  while (pos < s.size() && (s[pos] == ' ' || s[pos] == '\n' || s[pos] == '\t' || s[pos] == '\r')) ++pos;
  return pos;
}

/// A call cut by the end of the output: its name (when complete) and its arguments text
/// as far as it was written. False when the name is incomplete.
bool partial_call(const std::string& s, const std::string& args_key, std::string& name, std::string& args) {
  size_t p = s.find("\"name\"");
  if (p == std::string::npos) return false;
  p = skip_ws(s, p + 6);
  if (p >= s.size() || s[p] != ':') return false;
  p = skip_ws(s, p + 1);
  const size_t e = json_value_end(s, p);
  if (p >= s.size() || s[p] != '"' || e == std::string::npos) return false;
  try {
    name = json::parse(s.substr(p, e - p)).get<std::string>();
  } catch (const json::exception&) {
    return false;
  }
  args.clear();
  p = s.find("\"" + args_key + "\"", e);
  if (p == std::string::npos) return true;
  p = skip_ws(s, p + args_key.size() + 2);
  if (p < s.size() && s[p] == ':') args = s.substr(skip_ws(s, p + 1));
  return true;
}

}  // namespace

namespace {
/// `n` (≤ 32) characters of [0-9A-Za-z] from SHA-256 of `key`: unique per key in practice.
std::string alphanumeric_id(const std::string& key, size_t n) {
  static constexpr char kDigits[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  Sha256 h;
  h.update(key);
  const Sha256Digest d = h.digest();
  std::string out;
  for (size_t i = 0; i < n && i < d.size(); ++i) out += kDigits[d[i] % 62];
  return out;
}
}  // namespace

std::string mistral_call_id(const std::string& id) {
  const bool ok = id.size() == 9 && std::all_of(id.begin(), id.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)); });
  return ok ? id : alphanumeric_id(id, 9);
}

ParsedToolOutput parse_tool_output(const std::string& text, const std::string& id_prefix, ToolSyntax syntax) {
  const ToolSyntaxForm& f = tool_syntax_form(syntax);
  ParsedToolOutput out;
  if (text.empty() || text[0] != f.trigger()) {
    out.content = text;
    return out;
  }
  auto eat = [&](size_t& pos, const std::string& lit) {
    if (text.compare(pos, lit.size(), lit) != 0) return false;
    pos += lit.size();
    return true;
  };
  auto push = [&](const json& name, std::string args) {
    std::string id = id_prefix + "_" + std::to_string(out.calls.size());
    if (syntax == ToolSyntax::kMistral) id = mistral_call_id(id);
    out.calls.push_back({{"id", std::move(id)},
                         {"type", "function"},
                         {"function", {{"name", name}, {"arguments", std::move(args)}}}});
  };
  size_t pos = 0;
  if (f.array && (!eat(pos, f.open_tag) || !eat(pos = skip_ws(text, pos), "["))) return out;
  for (;;) {
    pos = skip_ws(text, pos);
    if (!f.array && !f.open_tag.empty() && !eat(pos, f.open_tag)) break;
    pos = skip_ws(text, pos);
    if (pos >= text.size() || text[pos] != '{') break;
    const size_t end = json_value_end(text, pos);
    if (end == std::string::npos) {  // cut by max_tokens or a stop string
      out.cut = true;
      std::string name, args;
      if (partial_call(text.substr(pos), f.args_key, name, args)) push(name, std::move(args));
      break;
    }
    json call;
    try {
      call = json::parse(text.substr(pos, end - pos));
    } catch (const json::exception&) {
      break;
    }
    if (!call.is_object() || !call.contains("name") || !call["name"].is_string()) break;
    const json* args = call.contains(f.args_key) ? &call[f.args_key] : nullptr;
    if (!args && call.contains("arguments")) args = &call["arguments"];
    push(call["name"], args ? (args->is_string() ? args->get<std::string>() : dump_json(*args)) : "{}");
    pos = skip_ws(text, end);
    if (!f.close_tag.empty() && !eat(pos, f.close_tag)) break;
    if (f.array && !eat(pos = skip_ws(text, pos), ",")) break;
  }
  return out;
}

std::string tool_call_id_prefix(const std::string& response_id, int index) {
  const size_t dash = response_id.rfind('-');
  return "call_" + (dash == std::string::npos ? response_id : response_id.substr(dash + 1)) + "_" + std::to_string(index);
}

void apply_tool_calls(json& body, ToolSyntax syntax) {
  for (json& c : body["choices"]) {
    json& msg = c["message"];
    if (!msg["content"].is_string()) continue;
    ParsedToolOutput p = parse_tool_output(msg["content"].get<std::string>(), tool_call_id_prefix(body["id"], c["index"]), syntax);
    if (p.content) continue;  // plain text
    msg["content"] = nullptr;
    // Logprobs cover the text returned, and a call returns none (streamed, a call's chunk
    // has none either).
    if (c.contains("logprobs")) c["logprobs"] = nullptr;
    if (p.calls.empty()) continue;  // cut before a call's name was complete
    msg["tool_calls"] = std::move(p.calls);
    if (c["finish_reason"] == "stop" && !p.cut) c["finish_reason"] = "tool_calls";  // a cut call stays "stop"
  }
}

std::string ToolCallStreamFilter::push(const std::string& text) {
  if (mode_ == 1) return text;
  held_ += text;
  if (mode_ == 0 && !held_.empty()) mode_ = held_[0] == tool_syntax_form(syntax_).trigger() ? 2 : 1;
  if (mode_ != 1) return {};
  std::string out;
  out.swap(held_);
  return out;
}

ParsedToolOutput ToolCallStreamFilter::finish(const std::string& id_prefix) {
  ParsedToolOutput p = parse_tool_output(held_, id_prefix, syntax_);
  held_.clear();
  return p;
}

}  // namespace pdserve::server
