#include "tokenizer/jinja/filters.h"

#include <algorithm>
#include <cmath>

#include "tokenizer/jinja/methods.h"
#include "tokenizer/jinja/ops.h"

namespace pdserve::tokenizer::jinja {

namespace {

bool given(const Value* v) { return v && !v->is_none() && !v->is_undefined(); }

// Attribute path "a.b" or index "0" as jinja2's make_attrgetter resolves it.
Value lookup_attr(const Value& v, const std::string& path) {
  Value cur = v;
  size_t i = 0;
  while (true) {
    size_t j = path.find('.', i);
    std::string part = path.substr(i, j == std::string::npos ? std::string::npos : j - i);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    cur = digits ? get_item(cur, Value(static_cast<int64_t>(std::stoll(part)))) : get_item(cur, Value(part));
    if (j == std::string::npos) return cur;
    i = j + 1;
  }
}

// Arguments after the first `skip` positional ones (for tests/filters called by name).
CallArgs rest_args(const CallArgs& a, size_t skip) {
  CallArgs r;
  for (size_t i = skip; i < a.positional.size(); ++i) r.positional.push_back(a.positional[i]);
  r.keyword = a.keyword;
  return r;
}

std::string indent_text(const std::string& s0, const std::string& ind, bool first, bool blank) {
  std::string s = s0 + "\n";
  std::vector<std::string> lines;
  size_t i = 0;
  while (i < s.size()) {  // str.splitlines on \n, \r\n, \r
    size_t j = s.find_first_of("\r\n", i);
    if (j == std::string::npos) { lines.push_back(s.substr(i)); break; }
    lines.push_back(s.substr(i, j - i));
    i = j + ((s[j] == '\r' && j + 1 < s.size() && s[j + 1] == '\n') ? 2 : 1);
  }
  std::string rv;
  if (blank) {
    for (size_t k = 0; k < lines.size(); ++k) rv += (k ? "\n" + ind : "") + lines[k];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t k = 1; k < lines.size(); ++k) rv += "\n" + (lines[k].empty() ? "" : ind + lines[k]);
  }
  return first ? ind + rv : rv;
}

Value sort_keys(const Value& v) {
  if (v.is_list()) {
    ValueList out;
    for (const auto& e : v.items()) out.push_back(sort_keys(e));
    return Value::list(std::move(out));
  }
  if (v.is_dict()) {
    ValueDict d;
    for (const auto& kv : v.entries().items) d.items.emplace_back(kv.first, sort_keys(kv.second));
    std::stable_sort(d.items.begin(), d.items.end(), [](auto& x, auto& y) { return x.first < y.first; });
    return Value::dict(std::move(d));
  }
  return v;
}

std::string html_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&#34;"; break;
      case '\'': o += "&#39;"; break;
      default: o += c;
    }
  }
  return o;
}

}  // namespace

bool apply_test(const std::string& name, const Value& v, const CallArgs& a) {
  using K = Value::Kind;
  const Value* x = a.get(0, "value");
  auto need = [&]() -> const Value& {
    if (!x) throw TemplateError("test '" + name + "' needs an argument");
    return *x;
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable") return v.is_list() || v.is_dict() || v.is_string();
  if (name == "sequence") return v.is_list() || v.is_dict() || v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind() == K::Int;
  if (name == "float") return v.kind() == K::Float;
  if (name == "boolean") return v.kind() == K::Bool;
  if (name == "true") return v.kind() == K::Bool && v.as_bool();
  if (name == "false") return v.kind() == K::Bool && !v.as_bool();
  if (name == "callable") return v.is_callable();
  if (name == "odd") return v.as_int() % 2 != 0;
  if (name == "even") return v.as_int() % 2 == 0;
  if (name == "divisibleby") return need().as_int() != 0 && v.as_int() % need().as_int() == 0;
  if (name == "lower") return v.is_string() && py_lower(v.str()) == v.str();
  if (name == "upper") return v.is_string() && py_upper(v.str()) == v.str();
  if (name == "in") return contains(need(), v);
  if (name == "equalto" || name == "eq" || name == "==" || name == "sameas") return v.equals(need());
  if (name == "ne" || name == "!=") return !v.equals(need());
  if (name == "lt" || name == "lessthan" || name == "<") return v.less(need());
  if (name == "gt" || name == "greaterthan" || name == ">") return need().less(v);
  if (name == "le" || name == "<=") return !need().less(v);
  if (name == "ge" || name == ">=") return !v.less(need());
  throw TemplateError("no test named '" + name + "'");
}

Value apply_filter(const std::string& name, const Value& v, const CallArgs& a) {
  using K = Value::Kind;
  auto seq = [&]() { return iterate(v); };
  if (name == "safe" || name == "e" || name == "escape" || name == "forceescape") {
    if (name == "safe") return v;
    return Value(html_escape(v.to_string()));
  }
  if (name == "string") return Value(v.to_string());
  if (name == "trim") return Value(py_strip(v.to_string(), a.get(0, "chars"), true, true));
  if (name == "upper") return Value(py_upper(v.to_string()));
  if (name == "lower") return Value(py_lower(v.to_string()));
  if (name == "title") return Value(py_title(v.to_string()));
  if (name == "capitalize") return Value(py_capitalize(v.to_string()));
  if (name == "length" || name == "count") {
    if (v.is_string()) return Value(static_cast<int64_t>(utf8_chars(v.str()).size()));
    if (v.is_list()) return Value(static_cast<int64_t>(v.items().size()));
    if (v.is_dict()) return Value(static_cast<int64_t>(v.entries().items.size()));
    if (v.is_undefined()) return Value(int64_t{0});
    throw TemplateError(std::string("object of type '") + v.type_name() + "' has no len()");
  }
  if (name == "tojson") {
    const Value* ind = a.get(0, "indent");
    const Value* sk = a.get(99, "sort_keys");
    Value x = sk && sk->truthy() ? sort_keys(v) : v;
    return Value(x.to_json(given(ind) ? static_cast<int>(ind->as_int()) : -1));
  }
  if (name == "join") {
    const Value* d = a.get(0, "d");
    const Value* attr = a.get(1, "attribute");
    std::string sep = given(d) ? d->to_string() : "";
    std::string out;
    bool first = true;
    for (const auto& e : seq()) {
      if (!first) out += sep;
      first = false;
      out += (given(attr) ? lookup_attr(e, attr->to_string()) : e).to_string();
    }
    return Value(out);
  }
  if (name == "default" || name == "d") {
    const Value* d = a.get(0, "default_value");
    const Value* b = a.get(1, "boolean");
    bool use = v.is_undefined() || (b && b->truthy() && !v.truthy());
    return use ? (d ? *d : Value("")) : v;
  }
  if (name == "first" || name == "last") {
    ValueList l = seq();
    if (l.empty()) return Value::undefined();
    return name == "first" ? l.front() : l.back();
  }
  if (name == "items") {
    if (v.is_undefined()) return Value::list();
    if (!v.is_dict()) throw TemplateError("items filter: expected a mapping");
    ValueList out;
    for (const auto& kv : v.entries().items) out.push_back(Value::tuple({Value(kv.first), kv.second}));
    return Value::list(std::move(out));
  }
  if (name == "list") return Value::list(seq());
  if (name == "reverse") {
    if (v.is_string()) {
      Value st(int64_t{-1});
      return get_slice(v, nullptr, nullptr, &st);
    }
    ValueList l = seq();
    std::reverse(l.begin(), l.end());
    return Value::list(std::move(l));
  }
  if (name == "selectattr" || name == "rejectattr" || name == "select" || name == "reject") {
    bool attr_mode = name == "selectattr" || name == "rejectattr";
    bool keep_if = name == "selectattr" || name == "select";
    size_t ti = attr_mode ? 1 : 0;
    std::string attr = attr_mode ? (a.positional.empty() ? "" : a.positional[0].to_string()) : "";
    std::string test = ti < a.positional.size() ? a.positional[ti].to_string() : "";
    CallArgs targs = rest_args(a, ti + 1);
    ValueList out;
    for (const auto& e : seq()) {
      Value x = attr_mode ? lookup_attr(e, attr) : e;
      bool ok = test.empty() ? x.truthy() : apply_test(test, x, targs);
      if (ok == keep_if) out.push_back(e);
    }
    return Value::list(std::move(out));
  }
  if (name == "map") {
    ValueList out;
    const Value* attr = nullptr;
    const Value* def = nullptr;
    for (const auto& kv : a.keyword) {
      if (kv.first == "attribute") attr = &kv.second;
      if (kv.first == "default") def = &kv.second;
    }
    for (const auto& e : seq()) {
      if (attr) {
        Value x = lookup_attr(e, attr->to_string());
        out.push_back(x.is_undefined() && def ? *def : x);
      } else {
        if (a.positional.empty()) throw TemplateError("map filter needs a filter name or attribute=");
        out.push_back(apply_filter(a.positional[0].to_string(), e, rest_args(a, 1)));
      }
    }
    return Value::list(std::move(out));
  }
  if (name == "replace") {
    const Value* c = a.get(2, "count");
    return Value(py_replace(v.to_string(), a.get(0, "old") ? a.get(0, "old")->to_string() : "",
                            a.get(1, "new") ? a.get(1, "new")->to_string() : "", given(c) ? c->as_int() : -1));
  }
  if (name == "indent") {
    const Value* w = a.get(0, "width");
    const Value* first = a.get(1, "first");
    const Value* blank = a.get(2, "blank");
    std::string ind = w && w->is_string() ? w->str() : std::string(static_cast<size_t>(w ? w->as_int() : 4), ' ');
    return Value(indent_text(v.to_string(), ind, first && first->truthy(), blank && blank->truthy()));
  }
  if (name == "int") {
    if (v.is_number()) return Value(v.as_int());
    if (v.kind() == K::Bool) return Value(int64_t{v.as_bool()});
    try {
      return Value(static_cast<int64_t>(std::stoll(v.to_string())));
    } catch (...) {
      const Value* d = a.get(0, "default");
      return d ? *d : Value(int64_t{0});
    }
  }
  if (name == "float") {
    if (v.is_number()) return Value(v.as_double());
    try {
      return Value(std::stod(v.to_string()));
    } catch (...) {
      const Value* d = a.get(0, "default");
      return d ? *d : Value(0.0);
    }
  }
  if (name == "abs") return v.kind() == K::Int ? Value(static_cast<int64_t>(std::llabs(v.as_int()))) : Value(std::fabs(v.as_double()));
  if (name == "round") {
    const Value* p = a.get(0, "precision");
    const Value* m = a.get(1, "method");
    double scale = std::pow(10.0, p ? p->as_int() : 0);
    double x = v.as_double() * scale;
    std::string method = m ? m->to_string() : "common";
    double r = method == "floor" ? std::floor(x) : method == "ceil" ? std::ceil(x) : std::nearbyint(x);
    return Value(r / scale);
  }
  if (name == "unique") {
    ValueList out;
    for (const auto& e : seq())
      if (std::none_of(out.begin(), out.end(), [&](const Value& o) { return o.equals(e); })) out.push_back(e);
    return Value::list(std::move(out));
  }
  if (name == "sort") {
    const Value* rev = a.get(0, "reverse");
    const Value* attr = a.get(2, "attribute");
    ValueList l = seq();
    std::stable_sort(l.begin(), l.end(), [&](const Value& x, const Value& y) {
      return given(attr) ? lookup_attr(x, attr->to_string()).less(lookup_attr(y, attr->to_string())) : x.less(y);
    });
    if (rev && rev->truthy()) std::reverse(l.begin(), l.end());
    return Value::list(std::move(l));
  }
  if (name == "dictsort") {
    if (!v.is_dict()) throw TemplateError("dictsort filter: expected a mapping");
    ValueList out;
    auto items = v.entries().items;
    std::stable_sort(items.begin(), items.end(), [](auto& x, auto& y) { return x.first < y.first; });
    for (const auto& kv : items) out.push_back(Value::tuple({Value(kv.first), kv.second}));
    return Value::list(std::move(out));
  }
  if (name == "sum") {
    const Value* attr = a.get(1, "attribute");
    const Value* start = a.get(2, "start");
    Value acc = start ? *start : Value(int64_t{0});
    for (const auto& e : seq()) acc = arithmetic("+", acc, given(attr) ? lookup_attr(e, attr->to_string()) : e);
    return acc;
  }
  if (name == "min" || name == "max") {
    ValueList l = seq();
    if (l.empty()) return Value::undefined();
    Value best = l[0];
    for (const auto& e : l)
      if (name == "min" ? e.less(best) : best.less(e)) best = e;
    return best;
  }
  if (name == "wordcount")
    return Value(static_cast<int64_t>(call_method(Value(v.to_string()), "split", CallArgs{}).items().size()));
  if (name == "batch") {
    int64_t n = a.get(0, "linecount") ? a.get(0, "linecount")->as_int() : 1;
    ValueList out, cur;
    for (const auto& e : seq()) {
      cur.push_back(e);
      if (static_cast<int64_t>(cur.size()) == n) out.push_back(Value::list(std::move(cur))), cur.clear();
    }
    if (!cur.empty()) out.push_back(Value::list(std::move(cur)));
    return Value::list(std::move(out));
  }
  if (name == "pprint") return Value(v.repr());
  throw TemplateError("no filter named '" + name + "'");
}

}  // namespace pdserve::tokenizer::jinja
