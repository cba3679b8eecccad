// Jinja lexer: template source → tokens, with jinja2's whitespace control as the
// HuggingFace/llama.cpp chat template environments set it up (trim_blocks and
// lstrip_blocks on; `{%-`/`-%}` strip all whitespace on that side, `{%+`/`+%}` disable
// the lstrip/trim). Source of the rules: jinja2/lexer.py.
#pragma once

#include <string>
#include <vector>

namespace pdserve::tokenizer::jinja {

enum class TokenType {
  Text,        // literal template text (whitespace control already applied)
  VarBegin,    // {{
  VarEnd,      // }}
  BlockBegin,  // {%
  BlockEnd,    // %}
  Name,        // identifier or keyword
  Int,
  Float,
  String,      // value: the unescaped string
  Op,          // operator or punctuation
  Eof,
};

struct Token {
  TokenType type;
  std::string value;
  int line = 1;
  int col = 1;
};

struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

/// Tokenises `src`; throws TemplateError ("line L, column C: ...") on an unterminated tag,
/// string or comment, or an unknown character.
std::vector<Token> lex(const std::string& src, const LexOptions& opts = {});

}  // namespace pdserve::tokenizer::jinja
