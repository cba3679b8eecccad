// Jinja values: the dynamic type the interpreter computes with, modelled on the Python
// objects HuggingFace templates see under jinja2 (None, bool, int, float, str, list, dict,
// callables, namespace, Undefined). Lists, dicts and namespaces are shared by reference
// (as Python objects), so `ns.x = ...` and `list.append` are visible to every holder.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace pdserve::tokenizer::jinja {

class Value;
using ValueList = std::vector<Value>;

/// Insertion-ordered string-keyed map (Python dicts keep insertion order).
struct ValueDict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(const std::string& key) const;
  Value* find(const std::string& key);
  void set(const std::string& key, Value v);
};

/// Positional and keyword arguments of a call.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  /// Positional `i`, else keyword `name`, else nullptr.
  const Value* get(size_t i, const std::string& name) const;
};

using Function = std::function<Value(const CallArgs&)>;

/// Error raised while lexing, parsing or rendering; `what()` carries "line L, column C".
class TemplateError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Bounds on what a template may build or run, so that a model file's or --chat-template-file's
/// template can neither crash nor exhaust the server (each past it is a TemplateError).
inline constexpr int kMaxNesting = 200;                  // parser: nested expressions and blocks
inline constexpr int kMaxValueDepth = 512;               // lists and dicts inside each other (e.g. x.append(x))
inline constexpr int64_t kMaxItems = 1'000'000;          // a list built by range() or *
inline constexpr size_t kMaxStringBytes = 16u << 20;     // a string built by *, and the rendered text
inline constexpr int64_t kMaxSteps = 1'000'000;          // statements and loop iterations in one render

class Value {
 public:
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Function, Namespace };

  Value() = default;  // Undefined
  static Value undefined(std::string name = {});
  static Value none();
  Value(bool b);
  Value(int64_t i);
  Value(int i) : Value(static_cast<int64_t>(i)) {}
  Value(double d);
  Value(std::string s);
  Value(const char* s) : Value(std::string(s)) {}
  static Value list(ValueList items = {});
  /// A list that prints as a Python tuple: (a, b).
  static Value tuple(ValueList items = {});
  bool is_tuple() const { return tuple_; }
  static Value dict(ValueDict d = {});
  static Value namespace_(ValueDict d = {});
  static Value function(Function f);
  /// JSON → Value (objects keep their key order; integers stay Int).
  static Value from_json(const nlohmann::ordered_json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float; }
  bool is_list() const { return kind_ == Kind::List; }
  bool is_dict() const { return kind_ == Kind::Dict || kind_ == Kind::Namespace; }
  bool is_callable() const { return kind_ == Kind::Function; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::Float ? static_cast<int64_t>(d_) : i_; }
  double as_double() const { return kind_ == Kind::Int ? static_cast<double>(i_) : d_; }
  const std::string& str() const { return *s_; }
  ValueList& items() const { return *l_; }
  ValueDict& entries() const { return *m_; }
  const Function& fn() const { return *f_; }
  const std::string& undefined_name() const { return s_ ? *s_ : empty_; }

  /// Python truthiness (empty string/list/dict, 0, None and Undefined are false).
  bool truthy() const;
  /// str(x) as jinja2 prints it: None → "None", True → "True", lists/dicts as Python repr,
  /// Undefined → "".
  std::string to_string() const;
  /// repr(x) (strings quoted as Python does).
  std::string repr() const { return repr_at(0); }
  /// json.dumps(x, ensure_ascii=False, indent=indent) (indent < 0: one line, ", " / ": ").
  std::string to_json(int indent = -1) const;
  nlohmann::ordered_json to_json_value() const { return to_json_value_at(0); }
  /// Python ==.
  bool equals(const Value& o) const;
  /// Python <; throws TemplateError for unorderable kinds.
  bool less(const Value& o) const;
  /// Type name for error messages.
  const char* type_name() const;

 private:
  std::string repr_at(int depth) const;
  nlohmann::ordered_json to_json_value_at(int depth) const;

  Kind kind_ = Kind::Undefined;
  bool tuple_ = false;
  bool b_ = false;
  int64_t i_ = 0;
  double d_ = 0;
  std::shared_ptr<std::string> s_;
  std::shared_ptr<ValueList> l_;
  std::shared_ptr<ValueDict> m_;
  std::shared_ptr<Function> f_;
  static const std::string empty_;
};

}  // namespace pdserve::tokenizer::jinja
