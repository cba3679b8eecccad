#include "grammar/regex_to_gbnf.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "grammar/grammar.h"

namespace pdserve::grammar {

std::string gbnf_literal_char(uint32_t cp) {
  char buf[16];
  if (cp == '"') return "\\\"";
  if (cp == '\\') return "\\\\";
  if (cp == '\n') return "\\n";
  if (cp == '\r') return "\\r";
  if (cp == '\t') return "\\t";
  if (cp < 0x20 || cp == 0x7F) {
    std::snprintf(buf, sizeof buf, "\\x%02X", cp);
    return buf;
  }
  std::string s;
  append_utf8(cp, s);
  return s;
}

namespace {

using Ranges = std::vector<CodepointRange>;

std::string class_char(uint32_t cp) {
  char buf[16];
  if (cp < 0x20 || cp == 0x7F || cp == ']' || cp == '[' || cp == '\\' || cp == '-' || cp == '^' || cp == '"') {
    std::snprintf(buf, sizeof buf, "\\x%02X", cp);
    return buf;
  }
  if (cp > 0xFFFF) {
    std::snprintf(buf, sizeof buf, "\\U%08X", cp);
    return buf;
  }
  std::string s;
  append_utf8(cp, s);
  return s;
}

Ranges normalize(Ranges r, bool negate) {
  std::sort(r.begin(), r.end(), [](auto& a, auto& b) { return a.lo < b.lo; });
  Ranges m;
  for (auto x : r) {
    if (!m.empty() && x.lo <= m.back().hi + 1) m.back().hi = std::max(m.back().hi, x.hi);
    else m.push_back(x);
  }
  if (!negate) return m;
  Ranges c;
  uint32_t next = 0;
  for (auto x : m) {
    if (x.lo > next) c.push_back({next, x.lo - 1});
    next = x.hi + 1;
  }
  if (next <= 0x10FFFF) c.push_back({next, 0x10FFFF});
  return c;
}

/// r minus [lo, hi].
Ranges subtract(const Ranges& r, uint32_t lo, uint32_t hi) {
  Ranges out;
  for (auto x : r) {
    if (x.hi < lo || x.lo > hi) { out.push_back(x); continue; }
    if (x.lo < lo) out.push_back({x.lo, lo - 1});
    if (x.hi > hi) out.push_back({hi + 1, x.hi});
  }
  return out;
}

bool contains(const Ranges& r, uint32_t cp) {
  for (auto x : r)
    if (cp >= x.lo && cp <= x.hi) return true;
  return false;
}

class RegexParser {
 public:
  RegexParser(std::string_view p, bool json) : p_(p), json_(json) {}

  Result<std::string> run() {
    if (!p_.empty() && p_[0] == '^') ++pos_;
    std::string e = alternation();
    if (!err_.empty()) return Status::InvalidArgument(err_);
    if (pos_ < p_.size() && p_[pos_] == '$' && pos_ + 1 == p_.size()) ++pos_;
    if (pos_ < p_.size()) {
      if (p_[pos_] == ')') return Status::InvalidArgument("unbalanced ')' at offset " + std::to_string(pos_));
      return Status::InvalidArgument(std::string("unexpected '") + p_[pos_] + "' at offset " + std::to_string(pos_));
    }
    return e;
  }

 private:
  bool fail(const std::string& m) {
    if (err_.empty()) err_ = m + " at offset " + std::to_string(pos_);
    return false;
  }
  bool more() const { return pos_ < p_.size() && err_.empty(); }
  static constexpr int kMaxGroupDepth = 100;
  int depth_ = 0;

  std::string alternation() {
    std::vector<std::string> alts{sequence()};
    while (more() && p_[pos_] == '|') {
      ++pos_;
      alts.push_back(sequence());
    }
    if (alts.size() == 1) return alts[0];
    std::string s = "(";
    for (size_t i = 0; i < alts.size(); ++i) s += (i ? " | " : "") + (alts[i].empty() ? std::string("\"\"") : alts[i]);
    return s + ")";
  }

  std::string sequence() {
    std::string s;
    while (more()) {
      const char c = p_[pos_];
      if (c == '|' || c == ')') break;
      if (c == '$' && pos_ + 1 == p_.size()) break;
      std::string atom_text;
      if (!atom(atom_text)) return s;
      quantifier(atom_text);
      if (!s.empty()) s += ' ';
      s += atom_text;
    }
    return s;
  }

  void quantifier(std::string& a) {
    if (!more()) return;
    const char c = p_[pos_];
    std::string q;
    if (c == '*' || c == '+' || c == '?') {
      q = c;
      ++pos_;
    } else if (c == '{') {
      const size_t close = p_.find('}', pos_);
      if (close == std::string_view::npos) return static_cast<void>(fail("unterminated '{'"));
      std::string_view body = p_.substr(pos_ + 1, close - pos_ - 1);
      bool ok = !body.empty() && body[0] != ',';
      for (char ch : body) ok = ok && ((ch >= '0' && ch <= '9') || ch == ',');
      if (!ok || std::count(body.begin(), body.end(), ',') > 1) return static_cast<void>(fail("invalid repetition '{" + std::string(body) + "}'"));
      q = "{" + std::string(body) + "}";
      pos_ = close + 1;
    } else {
      return;
    }
    if (more() && (p_[pos_] == '?' || p_[pos_] == '+')) ++pos_;  // lazy / possessive
    if (more() && (p_[pos_] == '*' || p_[pos_] == '+' || p_[pos_] == '?' || p_[pos_] == '{'))
      return static_cast<void>(fail("nested quantifier"));
    a = "(" + a + ")" + q;
  }

  bool hexv(int n, uint32_t& v) {
    v = 0;
    for (int i = 0; i < n; ++i) {
      if (pos_ >= p_.size()) return fail("truncated hex escape");
      const char h = p_[pos_++];
      const int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
      if (d < 0) return fail("invalid hex escape");
      v = v * 16 + d;
    }
    return true;
  }

  /// After a backslash: a single code point (returns true, sets cp) or a class (sets
  /// cls); fails on refused escapes.
  bool escape(uint32_t& cp, Ranges& cls, bool& is_class, bool& negated) {
    is_class = negated = false;
    if (pos_ >= p_.size()) return fail("trailing '\\'");
    const char e = p_[pos_++];
    switch (e) {
      case 'n': cp = '\n'; return true;
      case 'r': cp = '\r'; return true;
      case 't': cp = '\t'; return true;
      case 'f': cp = '\f'; return true;
      case 'v': cp = '\v'; return true;
      case '0': cp = 0; return true;
      case 'x': return hexv(2, cp);
      case 'u':
        if (pos_ < p_.size() && p_[pos_] == '{') {
          const size_t close = p_.find('}', pos_);
          if (close == std::string_view::npos || close == pos_ + 1 || close - pos_ > 7) return fail("invalid \\u{...} escape");
          ++pos_;
          if (!hexv(static_cast<int>(close - pos_), cp)) return false;
          ++pos_;
          return cp <= 0x10FFFF || fail("code point out of range");
        }
        return hexv(4, cp);
      case 'd': case 'D': is_class = true; negated = e == 'D'; cls = {{'0', '9'}}; return true;
      case 'w': case 'W': is_class = true; negated = e == 'W'; cls = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}; return true;
      case 's': case 'S': is_class = true; negated = e == 'S'; cls = {{'\t', '\r'}, {' ', ' '}}; return true;
      case 'b': case 'B': return fail("word boundaries (\\b, \\B) are not supported");
      default:
        if (e >= '1' && e <= '9') return fail("back-references are not supported");
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) return fail(std::string("unknown escape '\\") + e + "'");
        cp = static_cast<unsigned char>(e);
        return true;
    }
  }

  bool utf8_char(uint32_t& cp) {
    const unsigned char c = static_cast<unsigned char>(p_[pos_]);
    const int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || pos_ + len > p_.size()) return fail("invalid UTF-8");
    cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (int i = 1; i < len; ++i) cp = (cp << 6) | (static_cast<unsigned char>(p_[pos_ + i]) & 0x3F);
    pos_ += len;
    return true;
  }

  /// A literal code point as GBNF; in JSON-string mode, the escaped form when JSON needs one.
  std::string literal(uint32_t cp) const {
    if (json_ && (cp == '"' || cp == '\\' || cp < 0x20)) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "u%04x", cp);
      return std::string("\"\\\\") + (cp == '"' ? std::string("\\\"") : cp == '\\' ? std::string("\\\\") : std::string(buf)) + "\"";
    }
    return "\"" + gbnf_literal_char(cp) + "\"";
  }

  /// A set of code points as GBNF (an alternation in JSON mode when it contains
  /// characters JSON escapes).
  std::string class_expr(Ranges r) {
    r = normalize(std::move(r), false);
    std::vector<std::string> extra;
    if (json_) {
      for (uint32_t cp : {uint32_t{'"'}, uint32_t{'\\'}})
        if (contains(r, cp)) extra.push_back(literal(cp));
      for (uint32_t cp = 0; cp < 0x20; ++cp)
        if (contains(r, cp)) extra.push_back(literal(cp));
      r = subtract(subtract(subtract(r, '"', '"'), '\\', '\\'), 0, 0x1F);
    }
    std::string s;
    if (!r.empty()) {
      s = "[";
      for (auto x : r) {
        s += class_char(x.lo);
        if (x.hi != x.lo) s += "-" + class_char(x.hi);
      }
      s += "]";
    }
    if (extra.empty()) return s.empty() ? "[^\\x00-\\U0010FFFF]" : s;  // an empty class matches nothing
    std::string alt = "(" + s;
    for (auto& e : extra) alt += (alt.size() > 1 ? " | " : "") + e;
    return alt + ")";
  }

  bool bracket(std::string& out) {
    ++pos_;  // '['
    bool neg = false;
    if (pos_ < p_.size() && p_[pos_] == '^') { neg = true; ++pos_; }
    Ranges r;
    bool first = true;
    while (pos_ < p_.size() && (p_[pos_] != ']' || first)) {
      first = false;
      uint32_t lo = 0;
      if (p_[pos_] == '\\') {
        ++pos_;
        Ranges c;
        bool is_class, negated;
        if (!escape(lo, c, is_class, negated)) return false;
        if (is_class) {
          if (negated) return fail("negated shorthand classes inside [] are not supported");
          r.insert(r.end(), c.begin(), c.end());
          continue;
        }
      } else if (p_[pos_] == '[' && pos_ + 1 < p_.size() && p_[pos_ + 1] == ':') {
        return fail("POSIX classes ([:name:]) are not supported");
      } else if (!utf8_char(lo)) {
        return false;
      }
      uint32_t hi = lo;
      if (pos_ + 1 < p_.size() && p_[pos_] == '-' && p_[pos_ + 1] != ']') {
        ++pos_;
        if (p_[pos_] == '\\') {
          ++pos_;
          Ranges c;
          bool is_class, negated;
          if (!escape(hi, c, is_class, negated)) return false;
          if (is_class) return fail("a class cannot end a range");
        } else if (!utf8_char(hi)) {
          return false;
        }
        if (hi < lo) return fail("range out of order");
      }
      r.push_back({lo, hi});
    }
    if (pos_ >= p_.size()) return fail("unterminated '['");
    ++pos_;  // ']'
    out = class_expr(normalize(r, neg));
    return true;
  }

  bool atom(std::string& out) {
    const char c = p_[pos_];
    if (c == '(') {
      ++pos_;
      if (pos_ < p_.size() && p_[pos_] == '?') {
        ++pos_;
        if (pos_ < p_.size() && p_[pos_] == ':') {
          ++pos_;
        } else if (pos_ < p_.size() && (p_[pos_] == '<' || p_[pos_] == 'P') &&
                   !(p_.substr(pos_, 2) == "<=" || p_.substr(pos_, 2) == "<!")) {
          if (p_[pos_] == 'P') ++pos_;
          const size_t close = p_.find('>', pos_);
          if (close == std::string_view::npos) return fail("unterminated group name");
          pos_ = close + 1;
        } else {
          return fail("lookaround and inline flags ((?=, (?!, (?<=, (?<!, (?i)) are not supported");
        }
      }
      // The parser recurses once per open group: bound it (fuzz_grammar overflowed the
      // stack with ~10,000 nested '(').
      if (++depth_ > kMaxGroupDepth) return fail("groups nested deeper than " + std::to_string(kMaxGroupDepth));
      std::string inner = alternation();
      --depth_;
      if (!err_.empty()) return false;
      if (pos_ >= p_.size() || p_[pos_] != ')') return fail("missing ')'");
      ++pos_;
      out = "(" + (inner.empty() ? std::string("\"\"") : inner) + ")";
      return true;
    }
    if (c == '[') return bracket(out);
    if (c == '.') {
      ++pos_;
      if (dot_.empty()) dot_ = class_expr(normalize({{'\n', '\n'}}, true));  // built once: a long run of '.' is common
      out = dot_;
      return true;
    }
    if (c == '^' || c == '$') return fail("anchors are only supported at the start (^) and end ($)");
    if (c == '*' || c == '+' || c == '?' || c == '{') return fail(std::string("nothing to repeat before '") + c + "'");
    uint32_t cp;
    if (c == '\\') {
      ++pos_;
      Ranges cls;
      bool is_class, negated;
      if (!escape(cp, cls, is_class, negated)) return false;
      if (is_class) {
        out = class_expr(normalize(cls, negated));
        return true;
      }
    } else if (!utf8_char(cp)) {
      return false;
    }
    out = literal(cp);
    return true;
  }

  std::string_view p_;
  bool json_;
  size_t pos_ = 0;
  std::string err_;
  std::string dot_;  // the GBNF of '.'
};

}  // namespace

Result<std::string> regex_to_gbnf_expr(std::string_view pattern, bool json_string, uint64_t max_size) {
  auto r = RegexParser(pattern, json_string).run();
  if (!r.ok()) return Status::InvalidArgument("invalid or unsupported regular expression: " + r.error());
  if (r->empty()) return std::string("\"\"");
  // A repeated part that can match the empty string ("()*", "(a?)+") compiles to a left
  // recursive rule, which the matcher refuses: refuse the expression now, naming why
  // (found by tests/fuzz/fuzz_grammar).
  auto g = parse_gbnf("root ::= " + *r + "\n", max_size);
  if (g.code() == StatusCode::ResourceExhausted) return g.status();
  Status valid = g.ok() ? g->validate() : g.status();
  if (!valid.ok()) {
    const bool left_recursive = valid.message().find("left recursive") != std::string::npos;
    return Status::InvalidArgument("invalid or unsupported regular expression: " +
                                   (left_recursive ? "a repeated part can match the empty string (" + valid.message() + ")"
                                                   : valid.message()));
  }
  return r;
}

Result<std::string> regex_to_gbnf(std::string_view pattern, uint64_t max_size) {
  auto e = regex_to_gbnf_expr(pattern, false, max_size);
  if (!e.ok()) return e.status();
  return "root ::= " + *e + "\n";
}

}  // namespace pdserve::grammar
