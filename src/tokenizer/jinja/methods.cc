#include "tokenizer/jinja/methods.h"

#include <algorithm>
#include <cctype>
#include <set>

#include "tokenizer/jinja/ops.h"

namespace pdserve::tokenizer::jinja {

namespace {

bool py_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

const Value& arg(const CallArgs& a, size_t i, const char* name, const char* method) {
  const Value* v = a.get(i, name);
  if (!v) throw TemplateError(std::string(method) + "() missing argument '" + name + "'");
  return *v;
}
std::string str_arg(const CallArgs& a, size_t i, const char* name, const char* method) {
  const Value& v = arg(a, i, name, method);
  if (!v.is_string()) throw TemplateError(std::string(method) + "() argument must be str, not " + v.type_name());
  return v.str();
}
bool given(const Value* v) { return v && !v->is_none() && !v->is_undefined(); }

bool affix_match(const std::string& s, const Value& affix, bool prefix) {
  auto one = [&](const std::string& a) {
    if (a.size() > s.size()) return false;
    return prefix ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0;
  };
  if (affix.is_list()) {
    for (const auto& e : affix.items())
      if (e.is_string() && one(e.str())) return true;
    return false;
  }
  if (!affix.is_string()) throw TemplateError("startswith/endswith argument must be str or a tuple of str");
  return one(affix.str());
}

Value split(const std::string& s, const Value* sep, int64_t maxsplit) {
  ValueList out;
  if (!given(sep)) {
    size_t i = 0;
    while (true) {
      while (i < s.size() && py_space(s[i])) ++i;
      if (i >= s.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        size_t e = s.size();
        while (e > i && py_space(s[e - 1])) --e;
        out.emplace_back(s.substr(i, e - i));
        break;
      }
      size_t j = i;
      while (j < s.size() && !py_space(s[j])) ++j;
      out.emplace_back(s.substr(i, j - i));
      i = j;
    }
    return Value::list(std::move(out));
  }
  const std::string& d = sep->str();
  if (d.empty()) throw TemplateError("empty separator");
  size_t i = 0;
  while (true) {
    size_t j = s.find(d, i);
    if (j == std::string::npos || (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit)) {
      out.emplace_back(s.substr(i));
      break;
    }
    out.emplace_back(s.substr(i, j - i));
    i = j + d.size();
  }
  return Value::list(std::move(out));
}

// str.format with positional "{}" / "{0}" and keyword "{name}" fields (no format specs).
std::string py_format(const std::string& fmt, const CallArgs& args) {
  std::string out;
  size_t auto_idx = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '{' && i + 1 < fmt.size() && fmt[i + 1] == '{') { out += '{'; ++i; continue; }
    if (c == '}' && i + 1 < fmt.size() && fmt[i + 1] == '}') { out += '}'; ++i; continue; }
    if (c != '{') { out += c; continue; }
    size_t e = fmt.find('}', i);
    if (e == std::string::npos) throw TemplateError("Single '{' encountered in format string");
    std::string field = fmt.substr(i + 1, e - i - 1);
    const Value* v = nullptr;
    if (field.empty()) {
      v = auto_idx < args.positional.size() ? &args.positional[auto_idx++] : nullptr;
    } else if (std::all_of(field.begin(), field.end(), ::isdigit)) {
      size_t k = std::stoul(field);
      v = k < args.positional.size() ? &args.positional[k] : nullptr;
    } else {
      for (const auto& kv : args.keyword)
        if (kv.first == field) v = &kv.second;
    }
    if (!v) throw TemplateError("format: no argument for field '{" + field + "}'");
    out += v->to_string();
    i = e;
  }
  return out;
}

}  // namespace

std::string py_strip(const std::string& s, const Value* chars, bool left, bool right) {
  auto strip_char = [&](char c) {
    if (given(chars)) return chars->str().find(c) != std::string::npos;
    return py_space(c);
  };
  size_t b = 0, e = s.size();
  if (left)
    while (b < e && strip_char(s[b])) ++b;
  if (right)
    while (e > b && strip_char(s[e - 1])) --e;
  return s.substr(b, e - b);
}

std::string py_upper(const std::string& s) {
  std::string o = s;
  for (auto& c : o) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return o;
}
std::string py_lower(const std::string& s) {
  std::string o = s;
  for (auto& c : o) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return o;
}
std::string py_title(const std::string& s) {
  std::string o = s;
  bool prev_cased = false;
  for (auto& c : o) {
    unsigned char u = static_cast<unsigned char>(c);
    bool alpha = std::isalpha(u);
    c = static_cast<char>(alpha ? (prev_cased ? std::tolower(u) : std::toupper(u)) : u);
    prev_cased = alpha;
  }
  return o;
}
std::string py_capitalize(const std::string& s) {
  std::string o = py_lower(s);
  if (!o.empty()) o[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(o[0])));
  return o;
}
std::string py_replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  if (from.empty()) return s;
  std::string out;
  size_t i = 0;
  int64_t n = 0;
  while (true) {
    size_t j = s.find(from, i);
    if (j == std::string::npos || (count >= 0 && n == count)) break;
    out.append(s, i, j - i);
    out += to;
    i = j + from.size();
    ++n;
  }
  out.append(s, i, std::string::npos);
  return out;
}

bool has_method(const Value& obj, const std::string& name) {
  static const std::set<std::string> str_methods{
      "strip", "lstrip", "rstrip", "split", "rsplit", "startswith", "endswith", "replace", "upper", "lower",
      "title", "capitalize", "find", "rfind", "count", "join", "format", "splitlines", "isdigit", "isalpha",
      "isspace", "isupper", "islower", "removeprefix", "removesuffix", "index"};
  static const std::set<std::string> dict_methods{"items", "keys", "values", "get", "update", "pop", "setdefault"};
  static const std::set<std::string> list_methods{"append", "pop", "insert", "extend", "index", "count", "remove",
                                                  "reverse", "clear"};
  if (obj.is_string()) return str_methods.count(name) > 0;
  if (obj.kind() == Value::Kind::Dict) return dict_methods.count(name) > 0;
  if (obj.is_list()) return list_methods.count(name) > 0;
  return false;
}

Value call_method(const Value& obj, const std::string& name, const CallArgs& a) {
  if (obj.is_string()) {
    const std::string& s = obj.str();
    if (name == "strip") return Value(py_strip(s, a.get(0, "chars"), true, true));
    if (name == "lstrip") return Value(py_strip(s, a.get(0, "chars"), true, false));
    if (name == "rstrip") return Value(py_strip(s, a.get(0, "chars"), false, true));
    if (name == "split" || name == "rsplit") {
      const Value* m = a.get(1, "maxsplit");
      return split(s, a.get(0, "sep"), m ? m->as_int() : -1);
    }
    if (name == "startswith") return Value(affix_match(s, arg(a, 0, "prefix", "startswith"), true));
    if (name == "endswith") return Value(affix_match(s, arg(a, 0, "suffix", "endswith"), false));
    if (name == "replace") {
      const Value* c = a.get(2, "count");
      return Value(py_replace(s, str_arg(a, 0, "old", "replace"), str_arg(a, 1, "new", "replace"),
                              c ? c->as_int() : -1));
    }
    if (name == "upper") return Value(py_upper(s));
    if (name == "lower") return Value(py_lower(s));
    if (name == "title") return Value(py_title(s));
    if (name == "capitalize") return Value(py_capitalize(s));
    if (name == "find" || name == "index") {
      size_t p = s.find(str_arg(a, 0, "sub", name.c_str()));
      if (p == std::string::npos && name == "index") throw TemplateError("substring not found");
      return Value(p == std::string::npos ? int64_t{-1} : static_cast<int64_t>(p));
    }
    if (name == "rfind") {
      size_t p = s.rfind(str_arg(a, 0, "sub", "rfind"));
      return Value(p == std::string::npos ? int64_t{-1} : static_cast<int64_t>(p));
    }
    if (name == "count") {
      std::string sub = str_arg(a, 0, "sub", "count");
      if (sub.empty()) return Value(static_cast<int64_t>(utf8_chars(s).size() + 1));
      int64_t n = 0;
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return Value(n);
    }
    if (name == "join") {
      std::string out;
      bool first = true;
      for (const auto& e : iterate(arg(a, 0, "iterable", "join"))) {
        if (!first) out += s;
        first = false;
        out += e.to_string();
      }
      return Value(out);
    }
    if (name == "format") return Value(py_format(s, a));
    if (name == "splitlines") {
      ValueList out;
      size_t i = 0;
      while (i < s.size()) {
        size_t j = s.find_first_of("\r\n", i);
        if (j == std::string::npos) { out.emplace_back(s.substr(i)); break; }
        out.emplace_back(s.substr(i, j - i));
        i = j + ((s[j] == '\r' && j + 1 < s.size() && s[j + 1] == '\n') ? 2 : 1);
      }
      return Value::list(std::move(out));
    }
    auto all = [&](int (*pred)(int)) {
      return !s.empty() && std::all_of(s.begin(), s.end(), [&](char c) { return pred(static_cast<unsigned char>(c)); });
    };
    if (name == "isdigit") return Value(all(::isdigit));
    if (name == "isalpha") return Value(all(::isalpha));
    if (name == "isspace") return Value(all(::isspace));
    if (name == "isupper") return Value(py_upper(s) == s && py_lower(s) != s);
    if (name == "islower") return Value(py_lower(s) == s && py_upper(s) != s);
    if (name == "removeprefix") {
      std::string p = str_arg(a, 0, "prefix", "removeprefix");
      return Value(s.compare(0, p.size(), p) == 0 ? s.substr(p.size()) : s);
    }
    if (name == "removesuffix") {
      std::string p = str_arg(a, 0, "suffix", "removesuffix");
      return Value(s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0
                       ? s.substr(0, s.size() - p.size())
                       : s);
    }
  }
  if (obj.kind() == Value::Kind::Dict) {
    ValueDict& d = obj.entries();
    if (name == "items") {
      ValueList out;
      for (const auto& kv : d.items) out.push_back(Value::tuple({Value(kv.first), kv.second}));
      return Value::list(std::move(out));
    }
    if (name == "keys") {
      ValueList out;
      for (const auto& kv : d.items) out.emplace_back(kv.first);
      return Value::list(std::move(out));
    }
    if (name == "values") {
      ValueList out;
      for (const auto& kv : d.items) out.push_back(kv.second);
      return Value::list(std::move(out));
    }
    if (name == "get" || name == "pop" || name == "setdefault") {
      const Value& k = arg(a, 0, "key", name.c_str());
      const Value* def = a.get(1, "default");
      Value dv = def ? *def : Value::none();
      if (!k.is_string()) return dv;
      Value* v = d.find(k.str());
      if (!v) {
        if (name == "setdefault") d.set(k.str(), dv);
        if (name == "pop" && !def) throw TemplateError("KeyError: " + k.repr());
        return dv;
      }
      Value out = *v;
      if (name == "pop")
        for (size_t i = 0; i < d.items.size(); ++i)
          if (d.items[i].first == k.str()) {
            d.items.erase(d.items.begin() + static_cast<long>(i));
            break;
          }
      return out;
    }
    if (name == "update") {
      for (const auto& p : a.positional)
        if (p.is_dict())
          for (const auto& kv : p.entries().items) d.set(kv.first, kv.second);
      for (const auto& kv : a.keyword) d.set(kv.first, kv.second);
      return Value::none();
    }
  }
  if (obj.is_list()) {
    ValueList& l = obj.items();
    if (name == "append") { l.push_back(arg(a, 0, "object", "append")); return Value::none(); }
    if (name == "extend") {
      for (const auto& e : iterate(arg(a, 0, "iterable", "extend"))) l.push_back(e);
      return Value::none();
    }
    if (name == "insert") {
      int64_t i = arg(a, 0, "index", "insert").as_int();
      int64_t n = static_cast<int64_t>(l.size());
      if (i < 0) i = std::max<int64_t>(0, i + n);
      l.insert(l.begin() + std::min(i, n), arg(a, 1, "object", "insert"));
      return Value::none();
    }
    if (name == "pop") {
      if (l.empty()) throw TemplateError("pop from empty list");
      int64_t n = static_cast<int64_t>(l.size());
      const Value* iv = a.get(0, "index");
      int64_t i = iv ? iv->as_int() : n - 1;
      if (i < 0) i += n;
      if (i < 0 || i >= n) throw TemplateError("pop index out of range");
      Value out = l[static_cast<size_t>(i)];
      l.erase(l.begin() + i);
      return out;
    }
    if (name == "index" || name == "count" || name == "remove") {
      const Value& x = arg(a, 0, "value", name.c_str());
      int64_t cnt = 0;
      for (size_t i = 0; i < l.size(); ++i) {
        if (!l[i].equals(x)) continue;
        if (name == "index") return Value(static_cast<int64_t>(i));
        if (name == "remove") { l.erase(l.begin() + static_cast<long>(i)); return Value::none(); }
        ++cnt;
      }
      if (name != "count") throw TemplateError("list." + name + "(x): x not in list");
      return Value(cnt);
    }
    if (name == "reverse") { std::reverse(l.begin(), l.end()); return Value::none(); }
    if (name == "clear") { l.clear(); return Value::none(); }
  }
  throw TemplateError(std::string("'") + obj.type_name() + "' object has no attribute '" + name + "'");
}

}  // namespace pdserve::tokenizer::jinja
