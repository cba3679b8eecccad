// Jinja syntax tree: expressions and statements as the parser builds them and the
// evaluator walks them. Node kinds follow jinja2/nodes.py.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace pdserve::tokenizer::jinja {

struct Expr;
using ExprPtr = std::shared_ptr<Expr>;

struct Expr {
  enum class Kind {
    Literal,  // lit
    Name,     // s
    Attr,     // a[0].s
    Item,     // a[0][a[1]]
    Slice,    // a[0][a[1]:a[2]:a[3]] (absent parts are null)
    Call,     // a[0](a[1..], kw)
    Filter,   // a[0] | s(a[1..], kw); a[0] null inside {% filter %}
    Test,     // a[0] is [not] s(a[1..])
    Unary,    // s a[0]  (s: "not", "-", "+")
    Binary,   // a[0] s a[1]  (s: "or", "and", "in", "not in", "==", "+", "~", ...)
    Cond,     // a[0] if a[1] else a[2] (a[2] may be null)
    List,     // [a...]
    Tuple,    // (a...)
    Dict,     // {a[0]: a[1], a[2]: a[3], ...}
  };
  Kind kind;
  std::string s;
  Value lit;
  std::vector<ExprPtr> a;
  std::vector<std::pair<std::string, ExprPtr>> kw;
  bool negated = false;
  int line = 0, col = 0;
};

struct Stmt;
using StmtPtr = std::shared_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind {
    Text,      // text
    Output,    // {{ expr }}
    If,        // branches (cond, body)...; else_body
    For,       // targets in expr [if cond]; body; else_body
    Set,       // targets = expr, or attr target: targets[0].attr = expr
    SetBlock,  // {% set targets[0] %}body{% endset %} (optional filter in expr)
    Macro,     // name(params) body
    CallBlock, // {% call(params) expr %}body{% endcall %}
    FilterBlock,  // {% filter expr %}body (expr: Filter chain with null input)
    Break,
    Continue,
  };
  Kind kind;
  std::string text;
  ExprPtr expr;
  ExprPtr cond;
  std::vector<std::pair<ExprPtr, Body>> branches;
  std::vector<std::string> targets;
  std::string attr;
  std::vector<std::pair<std::string, ExprPtr>> params;  // macro/caller params, default or null
  Body body;
  Body else_body;
  int line = 0, col = 0;
};

}  // namespace pdserve::tokenizer::jinja
