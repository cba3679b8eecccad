// jinja2's builtin filters and tests (jinja2/filters.py, jinja2/tests.py) plus
// HuggingFace's `tojson` (json.dumps with ensure_ascii=False, indent, sort_keys).
#pragma once

#include <string>

#include "tokenizer/jinja/value.h"

namespace pdserve::tokenizer::jinja {

/// `v | name(args)`; throws TemplateError for an unknown filter or bad arguments.
Value apply_filter(const std::string& name, const Value& v, const CallArgs& args);
/// `v is name(args)`; throws TemplateError for an unknown test.
bool apply_test(const std::string& name, const Value& v, const CallArgs& args);

}  // namespace pdserve::tokenizer::jinja
