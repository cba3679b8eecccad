#include "tokenizer/jinja/ops.h"

#include <algorithm>
#include <cmath>

#include "tokenizer/jinja/methods.h"

namespace pdserve::tokenizer::jinja {

std::vector<std::string> utf8_chars(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (i + n > s.size()) n = s.size() - i;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

Value get_attr(const Value& obj, const std::string& name) {
  if (obj.kind() == Value::Kind::Dict || obj.is_string() || obj.is_list()) {
    if (has_method(obj, name)) {
      Value self = obj;
      return Value::function([self, name](const CallArgs& args) { return call_method(self, name, args); });
    }
  }
  if (obj.is_dict()) {
    if (const Value* v = obj.entries().find(name)) return *v;
  }
  return Value::undefined(name);
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_dict()) {
    if (key.is_string()) {
      if (const Value* v = obj.entries().find(key.str())) return *v;
      return Value::undefined(key.str());
    }
    return Value::undefined(key.to_string());
  }
  if ((obj.is_list() || obj.is_string()) && (key.kind() == Value::Kind::Int || key.kind() == Value::Kind::Bool)) {
    int64_t i = key.kind() == Value::Kind::Bool ? key.as_bool() : key.as_int();
    if (obj.is_list()) {
      int64_t n = static_cast<int64_t>(obj.items().size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined();
      return obj.items()[static_cast<size_t>(i)];
    }
    auto chars = utf8_chars(obj.str());
    int64_t n = static_cast<int64_t>(chars.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value::undefined();
    return Value(chars[static_cast<size_t>(i)]);
  }
  if (key.is_string()) return get_attr(obj, key.str());
  return Value::undefined();
}

Value get_slice(const Value& obj, const Value* start, const Value* stop, const Value* step) {
  std::vector<Value> elems;
  bool is_str = obj.is_string();
  if (is_str) {
    for (auto& c : utf8_chars(obj.str())) elems.emplace_back(c);
  } else if (obj.is_list()) {
    elems = obj.items();
  } else {
    throw TemplateError(std::string("'") + obj.type_name() + "' object is not subscriptable");
  }
  auto given = [](const Value* v) { return v && !v->is_none() && !v->is_undefined(); };
  int64_t n = static_cast<int64_t>(elems.size());
  int64_t st = given(step) ? step->as_int() : 1;
  if (st == 0) throw TemplateError("slice step cannot be zero");
  int64_t b, e;
  auto clamp = [&](int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; };
  if (st > 0) {
    b = given(start) ? start->as_int() : 0;
    e = given(stop) ? stop->as_int() : n;
    if (b < 0) b += n;
    if (e < 0) e += n;
    b = clamp(b, 0, n);
    e = clamp(e, 0, n);
  } else {
    b = given(start) ? start->as_int() : n - 1;
    e = given(stop) ? stop->as_int() : -n - 1;
    if (b < 0) b += n;
    if (given(stop) && e < 0) e += n;
    b = clamp(b, -1, n - 1);
    e = clamp(e, -1, n - 1);
  }
  ValueList out;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) out.push_back(elems[static_cast<size_t>(i)]);
  if (!is_str) return Value::list(std::move(out));
  std::string s;
  for (auto& v : out) s += v.str();
  return Value(s);
}

bool contains(const Value& container, const Value& item) {
  if (container.is_string()) {
    if (!item.is_string()) throw TemplateError("'in <string>' requires string as left operand");
    return container.str().find(item.str()) != std::string::npos;
  }
  if (container.is_list()) {
    for (const auto& e : container.items())
      if (e.equals(item)) return true;
    return false;
  }
  if (container.is_dict()) return item.is_string() && container.entries().find(item.str()) != nullptr;
  if (container.is_undefined() || container.is_none()) return false;
  throw TemplateError(std::string("argument of type '") + container.type_name() + "' is not iterable");
}

ValueList iterate(const Value& v) {
  if (v.is_list()) return v.items();
  if (v.is_dict()) {
    ValueList keys;
    for (const auto& kv : v.entries().items) keys.emplace_back(kv.first);
    return keys;
  }
  if (v.is_string()) {
    ValueList out;
    for (auto& c : utf8_chars(v.str())) out.emplace_back(c);
    return out;
  }
  if (v.is_undefined() || v.is_none()) return {};
  throw TemplateError(std::string("'") + v.type_name() + "' object is not iterable");
}

Value arithmetic(const std::string& op, const Value& l, const Value& r) {
  if (op == "~") return Value(l.to_string() + r.to_string());
  auto numeric = [](const Value& v) { return v.is_number() || v.kind() == Value::Kind::Bool; };
  auto as_num = [](const Value& v) { return v.kind() == Value::Kind::Bool ? Value(int64_t{v.as_bool()}) : v; };
  if (numeric(l) && numeric(r)) {
    Value a = as_num(l), b = as_num(r);
    bool ints = a.kind() == Value::Kind::Int && b.kind() == Value::Kind::Int;
    if (op == "+") return ints ? Value(a.as_int() + b.as_int()) : Value(a.as_double() + b.as_double());
    if (op == "-") return ints ? Value(a.as_int() - b.as_int()) : Value(a.as_double() - b.as_double());
    if (op == "*") return ints ? Value(a.as_int() * b.as_int()) : Value(a.as_double() * b.as_double());
    if (op == "/") {
      if (b.as_double() == 0) throw TemplateError("division by zero");
      return Value(a.as_double() / b.as_double());
    }
    if (op == "//" || op == "%") {
      if (b.as_double() == 0) throw TemplateError("integer division or modulo by zero");
      if (ints) {
        int64_t x = a.as_int(), y = b.as_int();
        int64_t q = x / y;
        if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
        return op == "//" ? Value(q) : Value(x - q * y);
      }
      double q = std::floor(a.as_double() / b.as_double());
      return op == "//" ? Value(q) : Value(a.as_double() - q * b.as_double());
    }
    if (op == "**") {
      if (ints && b.as_int() >= 0) {
        int64_t res = 1;
        for (int64_t i = 0; i < b.as_int(); ++i) res *= a.as_int();
        return Value(res);
      }
      return Value(std::pow(a.as_double(), b.as_double()));
    }
  }
  if (op == "+") {
    if (l.is_string() && r.is_string()) return Value(l.str() + r.str());
    // An undefined operand next to a string reads as "" (as llama.cpp's engine renders
    // e.g. `'): ' + param.description` for a parameter without a description).
    if ((l.is_string() && r.is_undefined()) || (l.is_undefined() && r.is_string()))
      return Value(l.to_string() + r.to_string());
    if (l.is_list() && r.is_list()) {
      ValueList out = l.items();
      out.insert(out.end(), r.items().begin(), r.items().end());
      return Value::list(std::move(out));
    }
  }
  if (op == "*") {
    const Value* seq = l.is_string() || l.is_list() ? &l : &r;
    const Value* cnt = seq == &l ? &r : &l;
    if ((seq->is_string() || seq->is_list()) && cnt->kind() == Value::Kind::Int) {
      const int64_t n = std::max<int64_t>(0, cnt->as_int());
      const uint64_t unit = seq->is_string() ? seq->str().size() : seq->items().size();
      const uint64_t limit = seq->is_string() ? kMaxStringBytes : static_cast<uint64_t>(kMaxItems);
      if (n > 0 && unit > limit / static_cast<uint64_t>(n))
        throw TemplateError(std::string(seq->is_string() ? "a string" : "a list") + " repeated " + std::to_string(n) +
                            " times is larger than a template may build (" + std::to_string(limit) +
                            (seq->is_string() ? " bytes)" : " items)"));
      if (seq->is_string()) {
        std::string out;
        for (int64_t i = 0; i < cnt->as_int(); ++i) out += seq->str();
        return Value(out);
      }
      ValueList out;
      for (int64_t i = 0; i < cnt->as_int(); ++i) out.insert(out.end(), seq->items().begin(), seq->items().end());
      return Value::list(std::move(out));
    }
  }
  if (l.is_undefined() || r.is_undefined())
    throw TemplateError("'" + (l.is_undefined() ? l.undefined_name() : r.undefined_name()) + "' is undefined");
  throw TemplateError("unsupported operand type(s) for " + op + ": '" + l.type_name() + "' and '" + r.type_name() +
                      "'");
}

}  // namespace pdserve::tokenizer::jinja
