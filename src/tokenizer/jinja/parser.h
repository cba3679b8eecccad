// Jinja parser: tokens → statement list (grammar and operator precedence of
// jinja2/parser.py: conditional < or < and < not < comparisons/in/is < + - < ~ < * / // %
// < ** < unary < postfix/filters).
#pragma once

#include <vector>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/lexer.h"

namespace pdserve::tokenizer::jinja {

/// Parses a lexed template; throws TemplateError with line/column on a syntax error or
/// an unknown/unclosed statement.
Body parse(const std::vector<Token>& tokens);

}  // namespace pdserve::tokenizer::jinja
