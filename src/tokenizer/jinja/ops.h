// Jinja operations on values: attribute and item access, slicing, membership, iteration,
// arithmetic — with Python's semantics as jinja2 exposes them to templates.
#pragma once

#include <string>

#include "tokenizer/jinja/value.h"

namespace pdserve::tokenizer::jinja {

/// obj.name: a dict's method (items, keys, values, get, ...) or key, a string's or list's
/// method bound to it; otherwise Undefined (jinja2's lenient Undefined).
Value get_attr(const Value& obj, const std::string& name);
/// obj[key]: dict key, list/string index (negative from the end); missing → Undefined.
Value get_item(const Value& obj, const Value& key);
/// obj[start:stop:step] on lists and strings (strings by code point); null parts absent.
Value get_slice(const Value& obj, const Value* start, const Value* stop, const Value* step);
/// `item in container` (substring, list element, dict key).
bool contains(const Value& container, const Value& item);
/// The items a for-loop visits: list elements, dict keys, string code points;
/// Undefined/None give none. Throws TemplateError for other kinds.
ValueList iterate(const Value& v);
/// Binary arithmetic/concatenation: + - * / // % ** ~ ; throws TemplateError on bad types.
Value arithmetic(const std::string& op, const Value& l, const Value& r);
/// UTF-8 code points of a string, each as its own string.
std::vector<std::string> utf8_chars(const std::string& s);

}  // namespace pdserve::tokenizer::jinja
