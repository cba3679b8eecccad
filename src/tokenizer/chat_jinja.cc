#include "tokenizer/chat_jinja.h"

#include <algorithm>
#include <cstdio>
#include <string_view>

#include "tokenizer/jinja/template.h"

namespace pdserve::tokenizer {

using nlohmann::ordered_json;

namespace {

bool contains(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

ordered_json tool_call_msg(const ordered_json& arguments) {
  return {{"role", "assistant"},
          {"content", ""},
          {"tool_calls",
           ordered_json::array({{{"id", "call_1___"},
                                 {"type", "function"},
                                 {"function", {{"arguments", arguments}, {"name", "ipython"}}}}})}};
}

}  // namespace

bool parse_utc_date(const std::string& ymd, std::time_t* out) {
  int y, m, d;
  char tail;
  if (std::sscanf(ymd.c_str(), "%4d-%2d-%2d%c", &y, &m, &d, &tail) != 3 || m < 1 || m > 12 || d < 1 || d > 31)
    return false;
  std::tm tm{};
  tm.tm_year = y - 1900;
  tm.tm_mon = m - 1;
  tm.tm_mday = d;
  *out = timegm(&tm);
  return true;
}

JinjaChatTemplate::JinjaChatTemplate(const std::string& source, std::string bos, std::string eos)
    : tmpl_(std::make_unique<jinja::Template>(source)), bos_(std::move(bos)), eos_(std::move(eos)), source_(source) {
  // The probes of llama.cpp's chat template capability detection (minja's chat_template).
  const ordered_json user = {{"role", "user"}, {"content", "Hey"}};
  const std::string sys_needle = "<System Needle>";
  caps_.supports_system_role = contains(
      try_render(ordered_json::array({{{"role", "system"}, {"content", sys_needle}}, user}), nullptr), sys_needle);
  ordered_json tools = ordered_json::array(
      {{{"name", "some_tool"},
        {"type", "function"},
        {"function",
         {{"name", "some_tool"},
          {"description", "Some tool."},
          {"parameters",
           {{"type", "object"},
            {"properties", {{"arg", {{"type", "string"}, {"description", "Some argument."}}}}},
            {"required", ordered_json::array({"arg"})}}}}}}});
  caps_.supports_tools = contains(try_render(ordered_json::array({user}), tools), "some_tool");
  const ordered_json args = {{"argument_needle", "print('Hello, World!')"}};
  auto renders_args = [&](const ordered_json& a) {
    std::string out = try_render(ordered_json::array({user, tool_call_msg(a)}), nullptr);
    return contains(out, "\"argument_needle\":") || contains(out, "'argument_needle':");
  };
  bool str_args = renders_args(args.dump());
  bool obj_args = renders_args(args);
  caps_.supports_tool_calls = str_args || obj_args;
  caps_.supports_object_arguments = obj_args;
}

JinjaChatTemplate::~JinjaChatTemplate() = default;

std::string JinjaChatTemplate::try_render(const ordered_json& messages, const ordered_json& tools) const {
  try {
    return render_raw(messages, tools, false, std::time(nullptr));
  } catch (const std::exception&) {
    return "";
  }
}

std::string template_kwargs_error(const ordered_json& kwargs) {
  if (!kwargs.is_object()) return "expected a JSON object of template variables";
  for (const char* name : {"messages", "tools", "add_generation_prompt", "bos_token", "eos_token"})
    if (kwargs.contains(name)) return std::string("'") + name + "' is set by the server, not by chat_template_kwargs";
  return "";
}

std::string JinjaChatTemplate::render_raw(const ordered_json& messages, const ordered_json& tools,
                                          bool add_generation_prompt, std::time_t now, const ordered_json& kwargs) const {
  using jinja::Value;
  jinja::ValueDict vars;
  vars.set("messages", Value::from_json(messages));
  if (!tools.is_null()) vars.set("tools", Value::from_json(tools));
  vars.set("add_generation_prompt", Value(add_generation_prompt));
  vars.set("bos_token", Value(bos_));
  vars.set("eos_token", Value(eos_));
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%d %b %Y", &tm);
  vars.set("date_string", Value(std::string(buf)));
  if (kwargs.is_object())
    for (const auto& [name, value] : kwargs.items()) vars.set(name, Value::from_json(value));
  jinja::RenderOptions opts;
  opts.now = now;
  return tmpl_->render(vars, opts);
}

std::string JinjaChatTemplate::apply(const ordered_json& messages_in, const ordered_json& tools,
                                     bool add_generation_prompt, std::time_t now, bool strip_bos,
                                     bool* bos_stripped, const ordered_json& kwargs) const {
  ordered_json messages = ordered_json::array();
  std::string pending_system;
  for (const auto& m0 : messages_in) {
    ordered_json m = m0;
    std::string role = m.value("role", "");
    if (!caps_.supports_system_role && role == "system") {
      if (!pending_system.empty()) pending_system += "\n";
      if (m["content"].is_string()) pending_system += m["content"].get<std::string>();
      continue;
    }
    if (!pending_system.empty() && role == "user") {
      std::string c = m["content"].is_string() ? m["content"].get<std::string>() : "";
      m["content"] = pending_system + (c.empty() ? "" : "\n" + c);
      pending_system.clear();
    }
    if (m.contains("tool_calls") && m["tool_calls"].is_array()) {
      for (auto& tc : m["tool_calls"]) {
        if (!tc.contains("function")) continue;
        auto& fn = tc["function"];
        if (caps_.supports_object_arguments && fn.contains("arguments") && fn["arguments"].is_string()) {
          try {
            fn["arguments"] = ordered_json::parse(fn["arguments"].get<std::string>());
          } catch (const std::exception&) {
          }
        }
      }
    }
    // As llama.cpp: a null content (assistant tool-call turns) is passed as "".
    if (m.contains("content") && m["content"].is_null()) m["content"] = "";
    messages.push_back(std::move(m));
  }
  if (!pending_system.empty()) messages.push_back({{"role", "user"}, {"content", pending_system}});
  std::string out = render_raw(messages, tools, add_generation_prompt, now, kwargs);
  bool stripped = false;
  if (strip_bos && !bos_.empty() && out.compare(0, bos_.size(), bos_) == 0) {
    out.erase(0, bos_.size());
    stripped = true;
  }
  if (bos_stripped) *bos_stripped = stripped;
  return out;
}

std::string JinjaChatTemplate::apply_with_spans(const ordered_json& messages, const ordered_json& tools,
                                                bool add_generation_prompt, std::time_t now, bool strip_bos,
                                                std::vector<TextSpan>* content_spans, const ordered_json& kwargs) const {
  std::string real = apply(messages, tools, add_generation_prompt, now, strip_bos, nullptr, kwargs);
  if (!content_spans) return real;
  // U+E000 <index> U+E001: text no template inspects, strips or contains.
  const std::string open = "\xEE\x80\x80", close = "\xEE\x80\x81";
  std::vector<std::string> contents;
  ordered_json marked = messages;
  for (auto& m : marked) {
    if (!m.is_object()) continue;
    auto it = m.find("content");
    if (it == m.end() || !it->is_string() || it->get<std::string>().empty()) continue;
    contents.push_back(it->get<std::string>());
    *it = open + std::to_string(contents.size() - 1) + close;
  }
  std::string mk = apply(marked, tools, add_generation_prompt, now, strip_bos, nullptr, kwargs);
  // The marked rendering as the template's own text between markers: seg[0] idx[0] seg[1] ...
  std::vector<std::string> seg(1);
  std::vector<size_t> idx;
  for (size_t i = 0; i < mk.size();) {
    const size_t p = mk.find(open, i);
    if (p == std::string::npos) {
      seg.back().append(mk, i, std::string::npos);
      break;
    }
    seg.back().append(mk, i, p - i);
    const size_t q = mk.find(close, p);
    size_t k = contents.size();
    if (q != std::string::npos) {
      try {
        k = std::stoul(mk.substr(p + open.size(), q - p - open.size()));
      } catch (const std::exception&) {
      }
    }
    if (k >= contents.size()) throw jinja::TemplateError("the template altered a message's content marker");
    idx.push_back(k);
    seg.emplace_back();
    i = q + close.size();
  }
  *content_spans = content_spans_of(real, seg, idx, contents);
  return real;
}

std::vector<TextSpan> content_spans_of(const std::string& real, const std::vector<std::string>& seg,
                                       const std::vector<size_t>& idx, const std::vector<std::string>& contents) {
  std::vector<TextSpan> spans;
  // Contents as given (the usual case: the template inserts them unchanged).
  std::string exact = seg[0];
  for (size_t i = 0; i < idx.size(); ++i) {
    spans.push_back({exact.size(), contents[idx[i]].size()});
    exact += contents[idx[i]] + seg[i + 1];
  }
  if (exact == real) return spans;
  // Else each rendered content is taken to be what a template's usual edits leave of the
  // message's content — | trim, .strip(), .lstrip(), .rstrip(), .split('</think>')[-1] — or
  // nothing: the longest of those at which the template's next text follows. Only those forms,
  // so that content can never be read as the template's own text (where special tokens are
  // parsed). Template text that depends on the content makes this fail.
  spans.clear();
  const std::string_view r(real);
  if (r.substr(0, seg[0].size()) != seg[0]) throw jinja::TemplateError("the template's text depends on message content");
  size_t pos = seg[0].size();
  for (size_t i = 0; i < idx.size(); ++i) {
    const std::string& next = seg[i + 1];
    const bool last = i + 1 == idx.size();
    std::vector<std::string_view> forms;
    for (std::string_view c : {std::string_view(contents[idx[i]]), std::string_view()}) {
      if (const size_t t = contents[idx[i]].rfind("</think>"); c.empty() && t != std::string::npos)
        c = std::string_view(contents[idx[i]]).substr(t + 8);
      const size_t b = c.find_first_not_of(" \t\n\r"), e = c.find_last_not_of(" \t\n\r");
      forms.push_back(c);
      if (b == std::string_view::npos) continue;
      forms.push_back(c.substr(b, e - b + 1));
      forms.push_back(c.substr(b));
      forms.push_back(c.substr(0, e + 1));
    }
    forms.push_back(std::string_view());
    std::stable_sort(forms.begin(), forms.end(), [](std::string_view x, std::string_view y) { return x.size() > y.size(); });
    bool found = false;
    for (std::string_view f : forms) {
      if (r.substr(pos, f.size()) != f || r.substr(pos + f.size(), next.size()) != next) continue;
      if (last && pos + f.size() + next.size() != r.size()) continue;
      spans.push_back({pos, f.size()});
      pos += f.size() + next.size();
      found = true;
      break;
    }
    if (!found) throw jinja::TemplateError("the template transforms message content in a way pdserve cannot follow");
  }
  if (pos != r.size()) throw jinja::TemplateError("the template's text depends on message content");
  return spans;
}

}  // namespace pdserve::tokenizer
