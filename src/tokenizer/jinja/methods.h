// Python methods templates call on values: str (strip, split, startswith, replace, ...),
// dict (items, keys, values, get, ...), list (append, pop, ...).
#pragma once

#include <string>

#include "tokenizer/jinja/value.h"

namespace pdserve::tokenizer::jinja {

/// True when `obj` has a method `name` (so obj.name is a bound method).
bool has_method(const Value& obj, const std::string& name);
/// obj.name(args); throws TemplateError on bad arguments.
Value call_method(const Value& obj, const std::string& name, const CallArgs& args);

/// Python str helpers shared with the filters.
std::string py_strip(const std::string& s, const Value* chars, bool left, bool right);
std::string py_title(const std::string& s);
std::string py_capitalize(const std::string& s);
std::string py_upper(const std::string& s);
std::string py_lower(const std::string& s);
std::string py_replace(const std::string& s, const std::string& from, const std::string& to, int64_t count);

}  // namespace pdserve::tokenizer::jinja
