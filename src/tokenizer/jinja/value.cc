#include "tokenizer/jinja/value.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>

namespace pdserve::tokenizer::jinja {

const std::string Value::empty_;

const Value* ValueDict::find(const std::string& key) const {
  for (const auto& kv : items)
    if (kv.first == key) return &kv.second;
  return nullptr;
}
Value* ValueDict::find(const std::string& key) {
  for (auto& kv : items)
    if (kv.first == key) return &kv.second;
  return nullptr;
}
void ValueDict::set(const std::string& key, Value v) {
  if (Value* p = find(key)) {
    *p = std::move(v);
  } else {
    items.emplace_back(key, std::move(v));
  }
}

const Value* CallArgs::get(size_t i, const std::string& name) const {
  if (i < positional.size()) return &positional[i];
  for (const auto& kv : keyword)
    if (kv.first == name) return &kv.second;
  return nullptr;
}

Value Value::undefined(std::string name) {
  Value v;
  v.s_ = std::make_shared<std::string>(std::move(name));
  return v;
}
Value Value::none() {
  Value v;
  v.kind_ = Kind::None;
  return v;
}
Value::Value(bool b) : kind_(Kind::Bool), b_(b) {}
Value::Value(int64_t i) : kind_(Kind::Int), i_(i) {}
Value::Value(double d) : kind_(Kind::Float), d_(d) {}
Value::Value(std::string s) : kind_(Kind::String) {
  if (s.size() > kMaxStringBytes)  // whatever built it: ~, +, join, replace, indent, tojson ...
    throw TemplateError("a string of " + std::to_string(s.size()) + " bytes is larger than a template may build (" +
                        std::to_string(kMaxStringBytes) + ")");
  s_ = std::make_shared<std::string>(std::move(s));
}
Value Value::list(ValueList items) {
  if (static_cast<int64_t>(items.size()) > kMaxItems)
    throw TemplateError("a list of " + std::to_string(items.size()) + " items is larger than a template may build (" +
                        std::to_string(kMaxItems) + ")");
  Value v;
  v.kind_ = Kind::List;
  v.l_ = std::make_shared<ValueList>(std::move(items));
  return v;
}
Value Value::tuple(ValueList items) {
  Value v = list(std::move(items));
  v.tuple_ = true;
  return v;
}
Value Value::dict(ValueDict d) {
  Value v;
  v.kind_ = Kind::Dict;
  v.m_ = std::make_shared<ValueDict>(std::move(d));
  return v;
}
Value Value::namespace_(ValueDict d) {
  Value v = dict(std::move(d));
  v.kind_ = Kind::Namespace;
  return v;
}
Value Value::function(Function f) {
  Value v;
  v.kind_ = Kind::Function;
  v.f_ = std::make_shared<Function>(std::move(f));
  return v;
}

Value Value::from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return none();
    case nlohmann::json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::json::value_t::number_integer: return Value(j.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: return Value(static_cast<int64_t>(j.get<uint64_t>()));
    case nlohmann::json::value_t::number_float: return Value(j.get<double>());
    case nlohmann::json::value_t::string: return Value(j.get<std::string>());
    case nlohmann::json::value_t::array: {
      ValueList l;
      for (const auto& e : j) l.push_back(from_json(e));
      return list(std::move(l));
    }
    case nlohmann::json::value_t::object: {
      ValueDict d;
      for (auto it = j.begin(); it != j.end(); ++it) d.items.emplace_back(it.key(), from_json(it.value()));
      return dict(std::move(d));
    }
    default: return none();
  }
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None: return false;
    case Kind::Bool: return b_;
    case Kind::Int: return i_ != 0;
    case Kind::Float: return d_ != 0;
    case Kind::String: return !s_->empty();
    case Kind::List: return !l_->empty();
    case Kind::Dict: return !m_->items.empty();
    default: return true;
  }
}

namespace {

// Python's float repr: the shortest "%.*g" that reads back to the same double.
std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  int prec = 1;
  for (; prec < 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*e", prec - 1, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  std::snprintf(buf, sizeof buf, "%.*e", prec - 1, d);
  int exp = std::atoi(std::strchr(buf, 'e') + 1);
  if (exp < -4 || exp >= 16) {  // Python's repr switches to exponent form here
    std::string s = buf;       // d.ddde+XX: drop trailing zeros of the mantissa
    size_t e = s.find('e');
    std::string mant = s.substr(0, e), ex = s.substr(e);
    if (mant.find('.') != std::string::npos) {
      while (mant.back() == '0') mant.pop_back();
      if (mant.back() == '.') mant.pop_back();
    }
    return mant + ex;
  }
  std::snprintf(buf, sizeof buf, "%.*f", std::max(prec - 1 - exp, 0), d);
  std::string s = buf;
  if (s.find('.') == std::string::npos) s += ".0";
  return s;
}

void json_string(const std::string& s, std::string& out) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

void check_depth(int depth) {
  if (depth > kMaxValueDepth)
    throw TemplateError("a value nested more than " + std::to_string(kMaxValueDepth) +
                        " levels deep (a list or dict that contains itself?)");
}

void json_dump(const Value& v, int indent, int level, std::string& out) {
  check_depth(level);
  auto newline = [&](int lvl) {
    out += '\n';
    out.append(static_cast<size_t>(indent * lvl), ' ');
  };
  switch (v.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None: out += "null"; break;
    case Value::Kind::Bool: out += v.as_bool() ? "true" : "false"; break;
    case Value::Kind::Int: out += std::to_string(v.as_int()); break;
    case Value::Kind::Float: out += float_repr(v.as_double()); break;
    case Value::Kind::String: json_string(v.str(), out); break;
    case Value::Kind::List: {
      if (v.items().empty()) { out += "[]"; break; }
      out += '[';
      bool first = true;
      for (const auto& e : v.items()) {
        if (!first) out += indent >= 0 ? "," : ", ";
        first = false;
        if (indent >= 0) newline(level + 1);
        json_dump(e, indent, level + 1, out);
      }
      if (indent >= 0) newline(level);
      out += ']';
      break;
    }
    case Value::Kind::Dict:
    case Value::Kind::Namespace: {
      if (v.entries().items.empty()) { out += "{}"; break; }
      out += '{';
      bool first = true;
      for (const auto& kv : v.entries().items) {
        if (!first) out += indent >= 0 ? "," : ", ";
        first = false;
        if (indent >= 0) newline(level + 1);
        json_string(kv.first, out);
        out += ": ";
        json_dump(kv.second, indent, level + 1, out);
      }
      if (indent >= 0) newline(level);
      out += '}';
      break;
    }
    case Value::Kind::Function: throw TemplateError("Object of type function is not JSON serializable");
  }
}

std::string py_repr_string(const std::string& s) {
  char q = (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c == static_cast<unsigned char>(q)) { out += '\\'; out += q; }
    else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += q;
  return out;
}

}  // namespace

std::string Value::repr_at(int depth) const {
  check_depth(depth);
  switch (kind_) {
    case Kind::String: return py_repr_string(*s_);
    case Kind::List: {
      std::string out = tuple_ ? "(" : "[";
      for (size_t i = 0; i < l_->size(); ++i) {
        if (i) out += ", ";
        out += (*l_)[i].repr_at(depth + 1);
      }
      if (tuple_) return out + (l_->size() == 1 ? ",)" : ")");
      return out + "]";
    }
    case Kind::Dict: {
      std::string out = "{";
      bool first = true;
      for (const auto& kv : m_->items) {
        if (!first) out += ", ";
        first = false;
        out += py_repr_string(kv.first) + ": " + kv.second.repr_at(depth + 1);
      }
      return out + "}";
    }
    case Kind::Namespace: return "<Namespace>";
    default: return to_string();
  }
}

std::string Value::to_string() const {
  switch (kind_) {
    case Kind::Undefined: return "";
    case Kind::None: return "None";
    case Kind::Bool: return b_ ? "True" : "False";
    case Kind::Int: return std::to_string(i_);
    case Kind::Float: return float_repr(d_);
    case Kind::String: return *s_;
    case Kind::Function: return "<function>";
    default: return repr();
  }
}

std::string Value::to_json(int indent) const {
  std::string out;
  json_dump(*this, indent, 0, out);
  return out;
}

nlohmann::ordered_json Value::to_json_value_at(int depth) const {
  check_depth(depth);
  switch (kind_) {
    case Kind::Bool: return b_;
    case Kind::Int: return i_;
    case Kind::Float: return d_;
    case Kind::String: return *s_;
    case Kind::List: {
      auto j = nlohmann::ordered_json::array();
      for (const auto& e : *l_) j.push_back(e.to_json_value_at(depth + 1));
      return j;
    }
    case Kind::Dict:
    case Kind::Namespace: {
      auto j = nlohmann::ordered_json::object();
      for (const auto& kv : m_->items) j[kv.first] = kv.second.to_json_value_at(depth + 1);
      return j;
    }
    default: return nullptr;
  }
}

bool Value::equals(const Value& o) const {
  if (is_number() && o.is_number()) {
    if (kind_ == Kind::Int && o.kind_ == Kind::Int) return i_ == o.i_;
    return as_double() == o.as_double();
  }
  if (kind_ == Kind::Bool && o.is_number()) return Value(int64_t{b_}).equals(o);
  if (is_number() && o.kind_ == Kind::Bool) return equals(Value(int64_t{o.b_}));
  if (kind_ != o.kind_) return false;
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None: return true;
    case Kind::Bool: return b_ == o.b_;
    case Kind::String: return *s_ == *o.s_;
    case Kind::List:
      if (l_->size() != o.l_->size()) return false;
      for (size_t i = 0; i < l_->size(); ++i)
        if (!(*l_)[i].equals((*o.l_)[i])) return false;
      return true;
    case Kind::Dict:
    case Kind::Namespace:
      if (m_->items.size() != o.m_->items.size()) return false;
      for (const auto& kv : m_->items) {
        const Value* p = o.m_->find(kv.first);
        if (!p || !kv.second.equals(*p)) return false;
      }
      return true;
    default: return f_ == o.f_;
  }
}

bool Value::less(const Value& o) const {
  if ((is_number() || kind_ == Kind::Bool) && (o.is_number() || o.kind_ == Kind::Bool)) {
    auto num = [](const Value& v) { return v.kind_ == Kind::Bool ? (v.b_ ? 1.0 : 0.0) : v.as_double(); };
    if (kind_ == Kind::Int && o.kind_ == Kind::Int) return i_ < o.i_;
    return num(*this) < num(o);
  }
  if (is_string() && o.is_string()) return *s_ < *o.s_;
  if (is_list() && o.is_list()) {
    size_t n = std::min(l_->size(), o.l_->size());
    for (size_t i = 0; i < n; ++i) {
      if ((*l_)[i].less((*o.l_)[i])) return true;
      if ((*o.l_)[i].less((*l_)[i])) return false;
    }
    return l_->size() < o.l_->size();
  }
  throw TemplateError(std::string("'<' not supported between instances of '") + type_name() + "' and '" +
                      o.type_name() + "'");
}

const char* Value::type_name() const {
  switch (kind_) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return "str";
    case Kind::List: return "list";
    case Kind::Dict: return "dict";
    case Kind::Function: return "function";
    case Kind::Namespace: return "Namespace";
  }
  return "?";
}

}  // namespace pdserve::tokenizer::jinja
