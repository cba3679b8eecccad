#include "tokenizer/jinja/template.h"

#include <algorithm>
#include <cstdint>
#include <unordered_map>

#include "tokenizer/jinja/filters.h"
#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/ops.h"
#include "tokenizer/jinja/parser.h"

namespace pdserve::tokenizer::jinja {

namespace {

struct Frame {
  std::unordered_map<std::string, Value> vars;
  Frame* parent = nullptr;

  const Value* lookup(const std::string& n) const {
    for (const Frame* f = this; f; f = f->parent) {
      auto it = f->vars.find(n);
      if (it != f->vars.end()) return &it->second;
    }
    return nullptr;
  }
};

enum class Flow { Normal, Break, Continue };

bool located(const std::string& msg) { return msg.rfind("line ", 0) == 0; }

[[noreturn]] void rethrow_at(const TemplateError& e, int line, int col) {
  if (located(e.what())) throw e;
  throw TemplateError("line " + std::to_string(line) + ", column " + std::to_string(col) + ": " + e.what());
}

class Evaluator {
 public:
  explicit Evaluator(const RenderOptions& opts) : opts_(opts) {}

  void install_globals(Frame& f) {
    f.vars["range"] = Value::function([](const CallArgs& a) {
      int64_t start = 0, stop, step = 1;
      if (a.positional.empty()) throw TemplateError("range expected at least 1 argument");
      if (a.positional.size() == 1) {
        stop = a.positional[0].as_int();
      } else {
        start = a.positional[0].as_int();
        stop = a.positional[1].as_int();
        if (a.positional.size() > 2) step = a.positional[2].as_int();
      }
      if (step == 0) throw TemplateError("range() arg 3 must not be zero");
      const __int128 span = step > 0 ? static_cast<__int128>(stop) - start : static_cast<__int128>(start) - stop;
      const __int128 count = span <= 0 ? 0 : (span - 1) / (step > 0 ? step : -static_cast<__int128>(step)) + 1;
      if (count > kMaxItems)
        throw TemplateError("range() of " + std::to_string(static_cast<int64_t>(std::min<__int128>(count, INT64_MAX))) +
                            " items is larger than a template may build (" + std::to_string(kMaxItems) + ")");
      ValueList out;
      for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.emplace_back(i);
      return Value::list(std::move(out));
    });
    auto make_dict = [](const CallArgs& a, bool ns) {
      ValueDict d;
      for (const auto& p : a.positional)
        if (p.is_dict())
          for (const auto& kv : p.entries().items) d.set(kv.first, kv.second);
      for (const auto& kv : a.keyword) d.set(kv.first, kv.second);
      return ns ? Value::namespace_(std::move(d)) : Value::dict(std::move(d));
    };
    f.vars["namespace"] = Value::function([make_dict](const CallArgs& a) { return make_dict(a, true); });
    f.vars["dict"] = Value::function([make_dict](const CallArgs& a) { return make_dict(a, false); });
    f.vars["raise_exception"] = Value::function([](const CallArgs& a) -> Value {
      throw TemplateError(a.positional.empty() ? "raise_exception" : a.positional[0].to_string());
    });
    std::time_t now = opts_.now;
    f.vars["strftime_now"] = Value::function([now](const CallArgs& a) {
      std::tm tm{};
      gmtime_r(&now, &tm);
      char buf[256];
      std::string fmt = a.positional.empty() ? "" : a.positional[0].to_string();
      size_t n = std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
      return Value(std::string(buf, n));
    });
  }

  Flow exec(const Body& body, Frame& f, std::string& out) {
    for (const auto& s : body) {
      Flow fl;
      try {
        if (++steps_ > kMaxSteps)
          throw TemplateError("the template ran more than " + std::to_string(kMaxSteps) + " statements");
        fl = exec_one(*s, f, out);
        if (out.size() > kMaxStringBytes)
          throw TemplateError("the template's output is larger than " + std::to_string(kMaxStringBytes) + " bytes");
      } catch (const TemplateError& e) {
        rethrow_at(e, s->line, s->col);
      }
      if (fl != Flow::Normal) return fl;
    }
    return Flow::Normal;
  }

 private:
  Flow exec_one(const Stmt& s, Frame& f, std::string& out) {
    switch (s.kind) {
      case Stmt::Kind::Text: out += s.text; return Flow::Normal;
      case Stmt::Kind::Output: out += eval(*s.expr, f).to_string(); return Flow::Normal;
      case Stmt::Kind::If:
        for (const auto& br : s.branches)
          if (eval(*br.first, f).truthy()) return exec(br.second, f, out);
        return exec(s.else_body, f, out);
      case Stmt::Kind::For: return exec_for(s, f, out);
      case Stmt::Kind::Set: {
        Value v = eval(*s.expr, f);
        if (!s.attr.empty()) {
          const Value* ns = f.lookup(s.targets[0]);
          if (!ns || ns->kind() != Value::Kind::Namespace)
            throw TemplateError("cannot assign attribute on non-namespace object '" + s.targets[0] + "'");
          ns->entries().set(s.attr, v);
        } else {
          assign(s.targets, v, f);
        }
        return Flow::Normal;
      }
      case Stmt::Kind::SetBlock: {
        std::string buf;
        exec(s.body, f, buf);
        Value v(buf);
        if (s.expr) v = eval_filter_chain(*s.expr, v, f);
        assign(s.targets, v, f);
        return Flow::Normal;
      }
      case Stmt::Kind::Macro: f.vars[s.text] = make_macro(s, f); return Flow::Normal;
      case Stmt::Kind::CallBlock: {
        const Expr& call = *s.expr;
        Value callee = eval(*call.a[0], f);
        CallArgs args = eval_args(call, f);
        const Stmt* sp = &s;
        Frame* def = &f;
        args.keyword.emplace_back("caller", Value::function([this, sp, def](const CallArgs& ca) {
          return invoke_body(sp->params, sp->body, *def, ca);
        }));
        if (!callee.is_callable()) throw TemplateError("'call' block target is not callable");
        out += callee.fn()(args).to_string();
        return Flow::Normal;
      }
      case Stmt::Kind::FilterBlock: {
        std::string buf;
        exec(s.body, f, buf);
        out += eval_filter_chain(*s.expr, Value(buf), f).to_string();
        return Flow::Normal;
      }
      case Stmt::Kind::Break: return Flow::Break;
      case Stmt::Kind::Continue: return Flow::Continue;
    }
    return Flow::Normal;
  }

  void assign(const std::vector<std::string>& targets, const Value& v, Frame& f) {
    if (targets.size() == 1) {
      f.vars[targets[0]] = v;
      return;
    }
    ValueList items = iterate(v);
    if (items.size() != targets.size())
      throw TemplateError("cannot unpack " + std::to_string(items.size()) + " values into " +
                          std::to_string(targets.size()) + " names");
    for (size_t i = 0; i < targets.size(); ++i) f.vars[targets[i]] = items[i];
  }

  Flow exec_for(const Stmt& s, Frame& f, std::string& out) {
    ValueList all = iterate(eval(*s.expr, f));
    ValueList items;
    if (s.cond) {
      for (const auto& it : all) {
        Frame tmp;
        tmp.parent = &f;
        assign(s.targets, it, tmp);
        if (eval(*s.cond, tmp).truthy()) items.push_back(it);
      }
    } else {
      items = std::move(all);
    }
    if (items.empty()) return exec(s.else_body, f, out);
    int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      if (++steps_ > kMaxSteps)  // an iteration counts as a statement, even with an empty body
        throw TemplateError("the template ran more than " + std::to_string(kMaxSteps) + " statements");
      Frame body;
      body.parent = &f;
      assign(s.targets, items[static_cast<size_t>(i)], body);
      ValueDict loop;
      loop.set("index", Value(i + 1));
      loop.set("index0", Value(i));
      loop.set("revindex", Value(n - i));
      loop.set("revindex0", Value(n - i - 1));
      loop.set("first", Value(i == 0));
      loop.set("last", Value(i == n - 1));
      loop.set("length", Value(n));
      loop.set("depth", Value(int64_t{1}));
      loop.set("depth0", Value(int64_t{0}));
      loop.set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value::undefined("previtem"));
      loop.set("nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value::undefined("nextitem"));
      loop.set("cycle", Value::function([i](const CallArgs& a) {
        if (a.positional.empty()) throw TemplateError("no items for cycling given");
        return a.positional[static_cast<size_t>(i) % a.positional.size()];
      }));
      body.vars["loop"] = Value::namespace_(std::move(loop));
      Flow fl = exec(s.body, body, out);
      if (fl == Flow::Break) break;
    }
    return Flow::Normal;
  }

  Value make_macro(const Stmt& s, Frame& def) {
    const Stmt* sp = &s;
    Frame* dp = &def;
    return Value::function([this, sp, dp](const CallArgs& a) { return invoke_body(sp->params, sp->body, *dp, a); });
  }

  // Runs a macro (or caller) body in a new frame on top of `def`, with params bound.
  Value invoke_body(const std::vector<std::pair<std::string, ExprPtr>>& params, const Body& body, Frame& def,
                    const CallArgs& a) {
    if (++depth_ > 256) {
      --depth_;
      throw TemplateError("maximum macro recursion depth exceeded");
    }
    Frame mf;
    mf.parent = &def;
    for (size_t i = 0; i < params.size(); ++i) {
      const Value* v = a.get(i, params[i].first);
      if (v) {
        mf.vars[params[i].first] = *v;
      } else if (params[i].second) {
        mf.vars[params[i].first] = eval(*params[i].second, mf);
      } else {
        mf.vars[params[i].first] = Value::undefined(params[i].first);
      }
    }
    ValueList varargs;
    for (size_t i = params.size(); i < a.positional.size(); ++i) varargs.push_back(a.positional[i]);
    mf.vars["varargs"] = Value::list(std::move(varargs));
    ValueDict kwargs;
    for (const auto& kv : a.keyword) {
      bool is_param = false;
      for (const auto& p : params) is_param |= p.first == kv.first;
      if (kv.first == "caller") mf.vars["caller"] = kv.second;
      else if (!is_param) kwargs.set(kv.first, kv.second);
    }
    mf.vars["kwargs"] = Value::dict(std::move(kwargs));
    std::string out;
    try {
      exec(body, mf, out);
    } catch (...) {
      --depth_;
      throw;
    }
    --depth_;
    return Value(out);
  }

  CallArgs eval_args(const Expr& e, Frame& f, size_t first = 1) {
    CallArgs a;
    for (size_t i = first; i < e.a.size(); ++i) a.positional.push_back(eval(*e.a[i], f));
    for (const auto& kv : e.kw) a.keyword.emplace_back(kv.first, eval(*kv.second, f));
    return a;
  }

  Value eval_filter_chain(const Expr& e, const Value& input, Frame& f) {
    Value in = e.a[0] ? eval_filter_chain(*e.a[0], input, f) : input;
    return apply_filter(e.s, in, eval_args(e, f));
  }

  Value eval(const Expr& e, Frame& f) {
    try {
      return eval_inner(e, f);
    } catch (const TemplateError& err) {
      rethrow_at(err, e.line, e.col);
    }
  }

  Value eval_inner(const Expr& e, Frame& f) {
    using K = Expr::Kind;
    switch (e.kind) {
      case K::Literal: return e.lit;
      case K::Name: {
        const Value* v = f.lookup(e.s);
        return v ? *v : Value::undefined(e.s);
      }
      case K::Attr: return get_attr(eval(*e.a[0], f), e.s);
      case K::Item: return get_item(eval(*e.a[0], f), eval(*e.a[1], f));
      case K::Slice: {
        Value obj = eval(*e.a[0], f);
        Value parts[3];
        const Value* ptr[3] = {nullptr, nullptr, nullptr};
        for (int i = 0; i < 3; ++i)
          if (e.a[static_cast<size_t>(i) + 1]) {
            parts[i] = eval(*e.a[static_cast<size_t>(i) + 1], f);
            ptr[i] = &parts[i];
          }
        return get_slice(obj, ptr[0], ptr[1], ptr[2]);
      }
      case K::Call: {
        Value callee = eval(*e.a[0], f);
        if (!callee.is_callable()) {
          std::string what = e.a[0]->kind == K::Name || e.a[0]->kind == K::Attr ? e.a[0]->s : "object";
          if (callee.is_undefined()) throw TemplateError("'" + what + "' is undefined");
          throw TemplateError("'" + what + "' is not callable");
        }
        return callee.fn()(eval_args(e, f));
      }
      case K::Filter: {
        if (!e.a[0]) throw TemplateError("filter without input");
        Value in = eval(*e.a[0], f);
        return apply_filter(e.s, in, eval_args(e, f));
      }
      case K::Test: {
        Value in = eval(*e.a[0], f);
        bool r = apply_test(e.s, in, eval_args(e, f));
        return Value(e.negated ? !r : r);
      }
      case K::Unary: {
        Value v = eval(*e.a[0], f);
        if (e.s == "not") return Value(!v.truthy());
        if (e.s == "-") {
          if (v.kind() == Value::Kind::Int) return Value(-v.as_int());
          if (v.kind() == Value::Kind::Float) return Value(-v.as_double());
          throw TemplateError(std::string("bad operand type for unary -: '") + v.type_name() + "'");
        }
        return v;
      }
      case K::Binary: {
        const std::string& op = e.s;
        if (op == "and") {
          Value l = eval(*e.a[0], f);
          return l.truthy() ? eval(*e.a[1], f) : l;
        }
        if (op == "or") {
          Value l = eval(*e.a[0], f);
          return l.truthy() ? l : eval(*e.a[1], f);
        }
        Value l = eval(*e.a[0], f);
        Value r = eval(*e.a[1], f);
        if (op == "==") return Value(l.equals(r));
        if (op == "!=") return Value(!l.equals(r));
        if (op == "<") return Value(l.less(r));
        if (op == ">") return Value(r.less(l));
        if (op == "<=") return Value(!r.less(l));
        if (op == ">=") return Value(!l.less(r));
        if (op == "in") return Value(contains(r, l));
        if (op == "not in") return Value(!contains(r, l));
        return arithmetic(op, l, r);
      }
      case K::Cond: {
        if (eval(*e.a[1], f).truthy()) return eval(*e.a[0], f);
        return e.a[2] ? eval(*e.a[2], f) : Value::undefined();
      }
      case K::List:
      case K::Tuple: {
        ValueList l;
        for (const auto& x : e.a) l.push_back(eval(*x, f));
        return e.kind == K::Tuple ? Value::tuple(std::move(l)) : Value::list(std::move(l));
      }
      case K::Dict: {
        ValueDict d;
        for (size_t i = 0; i + 1 < e.a.size(); i += 2) d.set(eval(*e.a[i], f).to_string(), eval(*e.a[i + 1], f));
        return Value::dict(std::move(d));
      }
    }
    return Value::undefined();
  }

  RenderOptions opts_;
  int depth_ = 0;
  int64_t steps_ = 0;
};

}  // namespace

// jinja2's keep_trailing_newline=False: one trailing newline of the source is dropped.
static std::string drop_trailing_newline(std::string s) {
  if (!s.empty() && s.back() == '\n') {
    s.pop_back();
    if (!s.empty() && s.back() == '\r') s.pop_back();
  }
  return s;
}

Template::Template(const std::string& source) : source_(source), body_(parse(lex(drop_trailing_newline(source)))) {}

std::string Template::render(const ValueDict& vars, const RenderOptions& opts) const {
  Evaluator ev(opts);
  Frame globals;
  ev.install_globals(globals);
  Frame top;
  top.parent = &globals;
  for (const auto& kv : vars.items) top.vars[kv.first] = kv.second;
  std::string out;
  ev.exec(body_, top, out);
  return out;
}

bool Template::mentions(const std::string& name) const { return source_.find(name) != std::string::npos; }

}  // namespace pdserve::tokenizer::jinja
