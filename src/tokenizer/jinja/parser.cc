#include "tokenizer/jinja/parser.h"

#include <set>

namespace pdserve::tokenizer::jinja {

namespace {

class Parser {
 public:
  explicit Parser(const std::vector<Token>& t) : t_(t) {}

  Body parse_template() {
    Body b = parse_body({});
    if (peek().type != TokenType::Eof) fail(peek(), "unexpected '" + peek().value + "'");
    return b;
  }

 private:
  const Token& peek(size_t k = 0) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  const Token& next() { return t_[i_ < t_.size() - 1 ? i_++ : i_]; }
  bool is_op(const char* op, size_t k = 0) const { return peek(k).type == TokenType::Op && peek(k).value == op; }
  bool is_name(const char* n, size_t k = 0) const { return peek(k).type == TokenType::Name && peek(k).value == n; }
  bool accept_op(const char* op) {
    if (!is_op(op)) return false;
    ++i_;
    return true;
  }
  bool accept_name(const char* n) {
    if (!is_name(n)) return false;
    ++i_;
    return true;
  }
  void expect_op(const char* op) {
    if (!accept_op(op)) fail(peek(), std::string("expected '") + op + "', got '" + describe(peek()) + "'");
  }
  std::string expect_name() {
    if (peek().type != TokenType::Name) fail(peek(), "expected a name, got '" + describe(peek()) + "'");
    return next().value;
  }
  void expect(TokenType type, const char* what) {
    if (peek().type != type) fail(peek(), std::string("expected ") + what + ", got '" + describe(peek()) + "'");
    ++i_;
  }
  static std::string describe(const Token& t) {
    if (t.type == TokenType::Eof) return "end of template";
    return t.value;
  }
  [[noreturn]] static void fail(const Token& t, const std::string& msg) {
    throw TemplateError("line " + std::to_string(t.line) + ", column " + std::to_string(t.col) + ": " + msg);
  }

  template <class N>
  static std::shared_ptr<N> node(typename N::Kind k, const Token& at) {
    auto n = std::make_shared<N>();
    n->kind = k;
    n->line = at.line;
    n->col = at.col;
    return n;
  }

  // Statements until a `{% name %}` with name in `ends` (left unconsumed) or Eof.
  Body parse_body(const std::set<std::string>& ends) {
    const Nest nest(*this, peek());
    Body body;
    while (true) {
      const Token& t = peek();
      if (t.type == TokenType::Eof) {
        if (!ends.empty()) fail(t, "unexpected end of template, expected '" + *ends.begin() + "'");
        return body;
      }
      if (t.type == TokenType::Text) {
        auto s = node<Stmt>(Stmt::Kind::Text, t);
        s->text = t.value;
        ++i_;
        body.push_back(s);
      } else if (t.type == TokenType::VarBegin) {
        ++i_;
        auto s = node<Stmt>(Stmt::Kind::Output, t);
        s->expr = parse_tuple();
        expect(TokenType::VarEnd, "'}}'");
        body.push_back(s);
      } else if (t.type == TokenType::BlockBegin) {
        const Token& kw = peek(1);
        if (kw.type == TokenType::Name && ends.count(kw.value)) return body;
        ++i_;
        if (auto s = parse_statement()) body.push_back(s);
      } else {
        fail(t, "unexpected '" + t.value + "'");
      }
    }
  }

  void end_block() { expect(TokenType::BlockEnd, "'%}'"); }
  // Consumes `{% name %}`.
  void close_tag(const char* name) {
    expect(TokenType::BlockBegin, "'{%'");
    if (!accept_name(name)) fail(peek(), std::string("expected '") + name + "'");
    end_block();
  }

  StmtPtr parse_statement() {
    const Token& kw = peek();
    if (kw.type != TokenType::Name) fail(kw, "expected a statement name");
    std::string name = next().value;
    if (name == "if") return parse_if(kw);
    if (name == "for") return parse_for(kw);
    if (name == "set") return parse_set(kw);
    if (name == "macro") return parse_macro(kw);
    if (name == "call") return parse_call_block(kw);
    if (name == "filter") {
      auto s = node<Stmt>(Stmt::Kind::FilterBlock, kw);
      s->expr = parse_filter_chain(parse_one_filter(nullptr));
      end_block();
      s->body = parse_body({"endfilter"});
      close_tag("endfilter");
      return s;
    }
    if (name == "break" || name == "continue") {
      end_block();
      return node<Stmt>(name == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue, kw);
    }
    if (name == "generation") {  // HF's assistant-mask marker: renders its body as is
      end_block();
      Body b = parse_body({"endgeneration"});
      close_tag("endgeneration");
      auto s = node<Stmt>(Stmt::Kind::If, kw);
      auto lit = node<Expr>(Expr::Kind::Literal, kw);
      lit->lit = Value(true);
      s->branches.emplace_back(lit, std::move(b));
      return s;
    }
    fail(kw, "unknown statement '" + name + "'");
  }

  StmtPtr parse_if(const Token& at) {
    auto s = node<Stmt>(Stmt::Kind::If, at);
    ExprPtr cond = parse_tuple();
    end_block();
    while (true) {
      Body b = parse_body({"elif", "else", "endif"});
      s->branches.emplace_back(cond, std::move(b));
      expect(TokenType::BlockBegin, "'{%'");
      std::string k = next().value;
      if (k == "elif") {
        cond = parse_tuple();
        end_block();
        continue;
      }
      if (k == "else") {
        end_block();
        s->else_body = parse_body({"endif"});
        close_tag("endif");
      } else {
        end_block();
      }
      return s;
    }
  }

  StmtPtr parse_for(const Token& at) {
    auto s = node<Stmt>(Stmt::Kind::For, at);
    do {
      s->targets.push_back(expect_name());
    } while (accept_op(","));
    if (!accept_name("in")) fail(peek(), "expected 'in'");
    s->expr = parse_or();
    if (is_op(",")) {  // for x in a, b
      auto tup = node<Expr>(Expr::Kind::Tuple, peek());
      tup->a.push_back(s->expr);
      while (accept_op(",")) tup->a.push_back(parse_or());
      s->expr = tup;
    }
    if (accept_name("if")) s->cond = parse_or();
    accept_name("recursive");
    end_block();
    s->body = parse_body({"else", "endfor"});
    expect(TokenType::BlockBegin, "'{%'");
    if (next().value == "else") {
      end_block();
      s->else_body = parse_body({"endfor"});
      close_tag("endfor");
    } else {
      end_block();
    }
    return s;
  }

  StmtPtr parse_set(const Token& at) {
    std::string first = expect_name();
    if (accept_op(".")) {
      auto s = node<Stmt>(Stmt::Kind::Set, at);
      s->targets.push_back(first);
      s->attr = expect_name();
      expect_op("=");
      s->expr = parse_tuple();
      end_block();
      return s;
    }
    std::vector<std::string> targets{first};
    while (accept_op(",")) targets.push_back(expect_name());
    if (accept_op("=")) {
      auto s = node<Stmt>(Stmt::Kind::Set, at);
      s->targets = targets;
      s->expr = parse_tuple();
      end_block();
      return s;
    }
    auto s = node<Stmt>(Stmt::Kind::SetBlock, at);
    s->targets = targets;
    if (is_op("|")) s->expr = parse_filter_chain(nullptr);
    end_block();
    s->body = parse_body({"endset"});
    close_tag("endset");
    return s;
  }

  std::vector<std::pair<std::string, ExprPtr>> parse_params() {
    std::vector<std::pair<std::string, ExprPtr>> params;
    expect_op("(");
    while (!accept_op(")")) {
      std::string n = expect_name();
      ExprPtr def;
      if (accept_op("=")) def = parse_expr();
      params.emplace_back(n, def);
      if (!is_op(")")) expect_op(",");
    }
    return params;
  }

  StmtPtr parse_macro(const Token& at) {
    auto s = node<Stmt>(Stmt::Kind::Macro, at);
    s->text = expect_name();
    s->params = parse_params();
    end_block();
    s->body = parse_body({"endmacro"});
    close_tag("endmacro");
    return s;
  }

  StmtPtr parse_call_block(const Token& at) {
    auto s = node<Stmt>(Stmt::Kind::CallBlock, at);
    if (is_op("(")) s->params = parse_params();
    s->expr = parse_expr();
    if (s->expr->kind != Expr::Kind::Call) fail(at, "expected a call in 'call' block");
    end_block();
    s->body = parse_body({"endcall"});
    close_tag("endcall");
    return s;
  }

  // ---- expressions ----

  ExprPtr parse_tuple() {
    const Token& at = peek();
    ExprPtr e = parse_expr();
    if (!is_op(",")) return e;
    auto tup = node<Expr>(Expr::Kind::Tuple, at);
    tup->a.push_back(e);
    while (accept_op(",")) {
      if (peek().type == TokenType::VarEnd || peek().type == TokenType::BlockEnd || is_op(")")) break;
      tup->a.push_back(parse_expr());
    }
    return tup;
  }

  /// Counts one level of nesting for its lifetime (parse_expr, parse_body): a template nested
  /// past kMaxNesting is an error, not a stack overflow.
  struct Nest {
    Parser& p;
    Nest(Parser& parser, const Token& at) : p(parser) {
      if (++p.depth_ > kMaxNesting) {
        --p.depth_;
        fail(at, "nested more than " + std::to_string(kMaxNesting) + " levels deep");
      }
    }
    ~Nest() { --p.depth_; }
  };
  /// The same count for a loop that wraps its expression once more each time round (a + b +
  /// c ..., x.a.b ..., x | f | g ...): the expression tree gets that much deeper, and evaluating
  /// or freeing it recurses as deep.
  struct Chain {
    Parser& p;
    int n = 0;
    explicit Chain(Parser& parser) : p(parser) {}
    void deeper(const Token& at) {
      ++n;
      if (++p.depth_ > kMaxNesting) fail(at, "nested more than " + std::to_string(kMaxNesting) + " levels deep");
    }
    ~Chain() { p.depth_ -= n; }
  };

  ExprPtr parse_expr() {
    const Nest nest(*this, peek());
    Chain chain(*this);
    ExprPtr e = parse_or();
    while (is_name("if")) {
      const Token& at = next();
      chain.deeper(at);
      auto c = node<Expr>(Expr::Kind::Cond, at);
      c->a.push_back(e);
      c->a.push_back(parse_or());
      c->a.push_back(accept_name("else") ? parse_expr() : nullptr);
      e = c;
    }
    return e;
  }

  ExprPtr binary(const std::string& op, ExprPtr l, ExprPtr r, const Token& at) {
    auto b = node<Expr>(Expr::Kind::Binary, at);
    b->s = op;
    b->a = {std::move(l), std::move(r)};
    return b;
  }

  ExprPtr parse_or() {
    Chain chain(*this);
    ExprPtr e = parse_and();
    while (is_name("or")) {
      const Token& at = next();
      chain.deeper(at);
      e = binary("or", e, parse_and(), at);
    }
    return e;
  }
  ExprPtr parse_and() {
    Chain chain(*this);
    ExprPtr e = parse_not();
    while (is_name("and")) {
      const Token& at = next();
      chain.deeper(at);
      e = binary("and", e, parse_not(), at);
    }
    return e;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      const Token& at = next();
      const Nest nest(*this, at);
      auto u = node<Expr>(Expr::Kind::Unary, at);
      u->s = "not";
      u->a.push_back(parse_not());
      return u;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    Chain chain(*this);
    ExprPtr e = parse_math1();
    while (true) {
      const Token& at = peek();
      if (at.type == TokenType::Op &&
          (at.value == "==" || at.value == "!=" || at.value == "<" || at.value == ">" || at.value == "<=" ||
           at.value == ">=")) {
        ++i_;
        chain.deeper(at);
        e = binary(at.value, e, parse_math1(), at);
      } else if (is_name("in")) {
        ++i_;
        chain.deeper(at);
        e = binary("in", e, parse_math1(), at);
      } else if (is_name("not") && is_name("in", 1)) {
        i_ += 2;
        chain.deeper(at);
        e = binary("not in", e, parse_math1(), at);
      } else {
        return e;
      }
    }
  }
  ExprPtr parse_math1() {
    Chain chain(*this);
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& at = next();
      chain.deeper(at);
      e = binary(at.value, e, parse_concat(), at);
    }
    return e;
  }
  ExprPtr parse_concat() {
    Chain chain(*this);
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      const Token& at = next();
      chain.deeper(at);
      e = binary("~", e, parse_math2(), at);
    }
    return e;
  }
  ExprPtr parse_math2() {
    Chain chain(*this);
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& at = next();
      chain.deeper(at);
      e = binary(at.value, e, parse_pow(), at);
    }
    return e;
  }
  ExprPtr parse_pow() {
    Chain chain(*this);
    ExprPtr e = parse_unary(true);
    while (is_op("**")) {
      const Token& at = next();
      chain.deeper(at);
      e = binary("**", e, parse_unary(true), at);
    }
    return e;
  }
  ExprPtr parse_unary(bool with_filter) {
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const Token& at = next();
      const Nest nest(*this, at);
      e = node<Expr>(Expr::Kind::Unary, at);
      e->s = at.value;
      e->a.push_back(parse_unary(false));
    } else {
      e = parse_postfix(parse_primary());
    }
    if (with_filter) e = parse_filters_and_tests(e);
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = peek();
    switch (t.type) {
      case TokenType::Name: {
        ++i_;
        auto lit = node<Expr>(Expr::Kind::Literal, t);
        if (t.value == "true" || t.value == "True") { lit->lit = Value(true); return lit; }
        if (t.value == "false" || t.value == "False") { lit->lit = Value(false); return lit; }
        if (t.value == "none" || t.value == "None") { lit->lit = Value::none(); return lit; }
        auto n = node<Expr>(Expr::Kind::Name, t);
        n->s = t.value;
        return n;
      }
      case TokenType::String: {
        auto lit = node<Expr>(Expr::Kind::Literal, t);
        std::string s;
        while (peek().type == TokenType::String) s += next().value;  // "a" "b" concatenates
        lit->lit = Value(s);
        return lit;
      }
      case TokenType::Int: {
        ++i_;
        auto lit = node<Expr>(Expr::Kind::Literal, t);
        lit->lit = Value(static_cast<int64_t>(std::stoll(t.value)));
        return lit;
      }
      case TokenType::Float: {
        ++i_;
        auto lit = node<Expr>(Expr::Kind::Literal, t);
        lit->lit = Value(std::stod(t.value));
        return lit;
      }
      case TokenType::Op:
        if (t.value == "(") {
          ++i_;
          if (accept_op(")")) return node<Expr>(Expr::Kind::Tuple, t);
          ExprPtr e = parse_expr();
          if (is_op(",")) {
            auto tup = node<Expr>(Expr::Kind::Tuple, t);
            tup->a.push_back(e);
            while (accept_op(",")) {
              if (is_op(")")) break;
              tup->a.push_back(parse_expr());
            }
            e = tup;
          }
          expect_op(")");
          return e;
        }
        if (t.value == "[") {
          ++i_;
          auto l = node<Expr>(Expr::Kind::List, t);
          while (!accept_op("]")) {
            l->a.push_back(parse_expr());
            if (!is_op("]")) expect_op(",");
          }
          return l;
        }
        if (t.value == "{") {
          ++i_;
          auto d = node<Expr>(Expr::Kind::Dict, t);
          while (!accept_op("}")) {
            d->a.push_back(parse_expr());
            expect_op(":");
            d->a.push_back(parse_expr());
            if (!is_op("}")) expect_op(",");
          }
          return d;
        }
        break;
      default: break;
    }
    fail(t, "unexpected '" + describe(t) + "'");
  }

  void parse_call_args(Expr* call) {
    expect_op("(");
    while (!accept_op(")")) {
      if (peek().type == TokenType::Name && is_op("=", 1)) {
        std::string k = next().value;
        ++i_;
        call->kw.emplace_back(k, parse_expr());
      } else {
        call->a.push_back(parse_expr());
      }
      if (!is_op(")")) expect_op(",");
    }
  }

  ExprPtr parse_postfix(ExprPtr e) {
    Chain chain(*this);
    while (true) {
      const Token& at = peek();
      if (is_op(".") || is_op("[") || is_op("(")) chain.deeper(at);
      if (accept_op(".")) {
        if (peek().type == TokenType::Int) {
          auto it = node<Expr>(Expr::Kind::Item, at);
          auto lit = node<Expr>(Expr::Kind::Literal, peek());
          lit->lit = Value(static_cast<int64_t>(std::stoll(next().value)));
          it->a = {e, lit};
          e = it;
          continue;
        }
        auto a = node<Expr>(Expr::Kind::Attr, at);
        a->s = expect_name();
        a->a.push_back(e);
        e = a;
      } else if (accept_op("[")) {
        ExprPtr parts[3];
        int n = 0;
        bool slice = false;
        while (true) {
          if (is_op(":")) {
            ++i_;
            slice = true;
            if (++n > 2) fail(at, "too many ':' in a slice");
            continue;
          }
          if (is_op("]")) break;
          parts[n] = parse_expr();
          if (!is_op(":") && !is_op("]")) expect_op("]");
        }
        expect_op("]");
        if (slice) {
          auto s = node<Expr>(Expr::Kind::Slice, at);
          s->a = {e, parts[0], parts[1], parts[2]};
          e = s;
        } else {
          if (!parts[0]) fail(at, "empty subscript");
          auto it = node<Expr>(Expr::Kind::Item, at);
          it->a = {e, parts[0]};
          e = it;
        }
      } else if (is_op("(")) {
        auto c = node<Expr>(Expr::Kind::Call, at);
        c->line = e->line;  // errors of a call point at the callee, as jinja2's do
        c->col = e->col;
        c->a.push_back(e);
        parse_call_args(c.get());
        e = c;
      } else {
        return e;
      }
    }
  }

  // `| name(args)` ... chain; `input` null inside {% filter %} / {% set x | f %}.
  ExprPtr parse_filter_chain(ExprPtr input) {
    ExprPtr e = std::move(input);
    Chain chain(*this);
    while (accept_op("|")) {
      chain.deeper(peek());
      e = parse_one_filter(e);
    }
    return e;
  }
  ExprPtr parse_one_filter(ExprPtr input) {
    const Token& at = peek();
    auto f = node<Expr>(Expr::Kind::Filter, at);
    f->s = expect_name();
    f->a.push_back(input);
    if (is_op("(")) parse_call_args(f.get());
    return f;
  }

  ExprPtr parse_filters_and_tests(ExprPtr e) {
    Chain chain(*this);
    while (true) {
      if (is_op("|") || is_name("is")) chain.deeper(peek());
      if (accept_op("|")) {
        e = parse_one_filter(e);
      } else if (is_name("is")) {
        const Token& at = next();
        auto t = node<Expr>(Expr::Kind::Test, at);
        t->negated = accept_name("not");
        t->s = expect_name();
        t->a.push_back(e);
        if (is_op("(")) {
          parse_call_args(t.get());
        } else {
          static const std::set<std::string> stop{"and", "or", "else", "if", "in", "not", "is"};
          const Token& n = peek();
          if (n.type == TokenType::String || n.type == TokenType::Int || n.type == TokenType::Float ||
              (n.type == TokenType::Name && !stop.count(n.value)))
            t->a.push_back(parse_postfix(parse_primary()));
        }
        e = t;
      } else {
        return e;
      }
    }
  }

  const std::vector<Token>& t_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

Body parse(const std::vector<Token>& tokens) { return Parser(tokens).parse_template(); }

}  // namespace pdserve::tokenizer::jinja
