// GBNF text → Grammar (grammar.h). Follows llama.cpp's grammar-parser rules for spacing:
// newlines end a rule except inside parentheses and after `::=` or `|`.
#include <algorithm>
#include <map>

#include "grammar/grammar.h"

namespace pdserve::grammar {

namespace {

bool is_word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

class GbnfParser {
 public:
  GbnfParser(std::string_view t, uint64_t max_size) : t_(t), max_size_(max_size) {}

  Result<Grammar> run() {
    skip_space(true);
    while (pos_ < t_.size()) {
      const size_t name_at = pos_;
      std::string name = word();
      if (name.empty()) return fail("expected a rule name");
      skip_space(false);
      if (t_.substr(pos_, 3) != "::=") return fail("expected '::=' after rule name '" + name + "'");
      pos_ += 3;
      skip_space(true);
      const int32_t id = g_.rule_id(name);
      if (defined_.count(id)) {
        pos_ = name_at;
        return fail("rule '" + name + "' is defined twice");
      }
      defined_[id] = true;
      if (!alternates(id, false)) return err_;
      if (pos_ < t_.size() && t_[pos_] != '\n' && t_[pos_] != '\r') return fail("expected a newline or end of input");
      skip_space(true);
    }
    auto it = std::find(g_.rule_names.begin(), g_.rule_names.end(), "root");
    if (it == g_.rule_names.end() || !defined_.count(static_cast<int32_t>(it - g_.rule_names.begin())))
      return Status::InvalidArgument("grammar has no 'root' rule");
    g_.root = static_cast<int32_t>(it - g_.rule_names.begin());
    if (Status s = g_.validate(); !s.ok()) return s;
    g_.drop_dead_alternatives();
    if (max_size_ != kNoSizeLimit && g_.expanded_size(max_size_) > max_size_)
      return Status::ResourceExhausted(grammar_too_large_message(max_size_));
    return std::move(g_);
  }

 private:
  Status fail(const std::string& what) {
    int line = 1;
    for (size_t i = 0; i < pos_ && i < t_.size(); ++i) line += t_[i] == '\n';
    err_ = Status::InvalidArgument("line " + std::to_string(line) + ": " + what);
    return err_;
  }
  bool at_end() const { return pos_ >= t_.size(); }

  void skip_space(bool newlines) {
    while (pos_ < t_.size()) {
      const char c = t_[pos_];
      if (c == ' ' || c == '\t') ++pos_;
      else if (c == '#') { while (pos_ < t_.size() && t_[pos_] != '\n') ++pos_; }
      else if (newlines && (c == '\n' || c == '\r')) ++pos_;
      else break;
    }
  }

  std::string word() {
    const size_t b = pos_;
    while (pos_ < t_.size() && is_word_char(t_[pos_])) ++pos_;
    return std::string(t_.substr(b, pos_ - b));
  }

  bool hex(int n, uint32_t& out) {
    out = 0;
    for (int i = 0; i < n; ++i, ++pos_) {
      if (at_end()) return false;
      const char c = t_[pos_];
      int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (v < 0) return false;
      out = out * 16 + static_cast<uint32_t>(v);
    }
    return true;
  }

  /// One (possibly escaped) code point of a literal or class.
  bool codepoint(uint32_t& cp) {
    if (at_end()) return static_cast<void>(fail("unexpected end of input")), false;
    const unsigned char c = static_cast<unsigned char>(t_[pos_]);
    if (c == '\\') {
      ++pos_;
      if (at_end()) return static_cast<void>(fail("unexpected end of input after '\\'")), false;
      const char e = t_[pos_++];
      switch (e) {
        case 'n': cp = '\n'; return true;
        case 'r': cp = '\r'; return true;
        case 't': cp = '\t'; return true;
        case '\\': case '"': case '[': case ']': case '-': case '^': case '\'': cp = static_cast<unsigned char>(e); return true;
        case 'x': if (hex(2, cp)) return true; break;
        case 'u': if (hex(4, cp)) return true; break;
        case 'U': if (hex(8, cp) && cp <= 0x10FFFF) return true; break;
        default: --pos_; return static_cast<void>(fail(std::string("unknown escape '\\") + e + "'")), false;
      }
      return static_cast<void>(fail("invalid hex escape")), false;
    }
    // Decode one UTF-8 character of the grammar text.
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || pos_ + len > t_.size()) return static_cast<void>(fail("invalid UTF-8 in grammar")), false;
    cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (int i = 1; i < len; ++i) cp = (cp << 6) | (static_cast<unsigned char>(t_[pos_ + i]) & 0x3F);
    pos_ += len;
    return true;
  }

  /// Parses `a | b | ...` into the alternatives of `rule`.
  bool alternates(int32_t rule, bool nested) {
    for (;;) {
      std::vector<Element> seq;
      if (!sequence(seq, nested)) return false;
      g_.add_alt(rule, seq);
      if (pos_ < t_.size() && t_[pos_] == '|') {
        ++pos_;
        skip_space(true);
        continue;
      }
      return true;
    }
  }

  bool sequence(std::vector<Element>& seq, bool nested) {
    size_t last_start = std::string::npos;
    while (!at_end()) {
      const char c = t_[pos_];
      const size_t start = seq.size();
      if (c == '"') {
        ++pos_;
        while (!at_end() && t_[pos_] != '"') {
          uint32_t cp;
          if (!codepoint(cp)) return false;
          std::string bytes;
          append_utf8(cp, bytes);
          for (char b : bytes) seq.push_back(g_.byte(static_cast<uint8_t>(b)));
        }
        if (at_end()) return static_cast<void>(fail("unterminated literal")), false;
        ++pos_;
      } else if (c == '[') {
        ++pos_;
        bool neg = false;
        if (!at_end() && t_[pos_] == '^') { neg = true; ++pos_; }
        std::vector<CodepointRange> ranges;
        while (!at_end() && t_[pos_] != ']') {
          uint32_t lo, hi;
          if (!codepoint(lo)) return false;
          hi = lo;
          if (pos_ + 1 < t_.size() && t_[pos_] == '-' && t_[pos_ + 1] != ']') {
            ++pos_;
            if (!codepoint(hi)) return false;
            if (hi < lo) return static_cast<void>(fail("character range out of order")), false;
          }
          ranges.push_back({lo, hi});
        }
        if (at_end()) return static_cast<void>(fail("unterminated character class")), false;
        ++pos_;
        seq.push_back(codepoint_class(g_, ranges, neg));
      } else if (c == '.') {
        ++pos_;
        seq.push_back(codepoint_class(g_, {}, true));
      } else if (c == '(') {
        ++pos_;
        skip_space(true);
        // One recursion per open group: bounded, so a hostile grammar cannot overflow the stack.
        if (++depth_ > kMaxGroupDepth)
          return static_cast<void>(fail("groups nested deeper than " + std::to_string(kMaxGroupDepth))), false;
        const int32_t sub = g_.new_rule("group");
        const bool ok = alternates(sub, true);
        --depth_;
        if (!ok) return false;
        if (at_end() || t_[pos_] != ')') return static_cast<void>(fail("expected ')'")), false;
        ++pos_;
        seq.push_back({Element::kRule, sub});
      } else if (is_word_char(c)) {
        seq.push_back({Element::kRule, g_.rule_id(word())});
      } else if (c == '<') {
        return static_cast<void>(fail("token references (<...>) are not supported")), false;
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (last_start == std::string::npos) return static_cast<void>(fail(std::string("'") + c + "' without a preceding symbol")), false;
        int min = 0, max = -1;
        ++pos_;
        if (c == '+') min = 1;
        else if (c == '?') max = 1;
        else if (c == '{') {
          skip_space(nested);
          if (!number(min)) return false;
          skip_space(nested);
          max = min;
          if (!at_end() && t_[pos_] == ',') {
            ++pos_;
            skip_space(nested);
            max = -1;
            if (!at_end() && t_[pos_] >= '0' && t_[pos_] <= '9' && !number(max)) return false;
            skip_space(nested);
          }
          if (at_end() || t_[pos_] != '}') return static_cast<void>(fail("expected '}'")), false;
          ++pos_;
          if (max >= 0 && max < min) return static_cast<void>(fail("repetition {m,n} with n < m")), false;
        }
        std::vector<Element> item(seq.begin() + static_cast<long>(last_start), seq.end());
        seq.resize(last_start);
        // Refuse before copying when the copies alone pass the limit: min in place, then
        // a rule per optional copy (item, a reference, two ends) or one star rule.
        const uint64_t n = item.size();
        const uint64_t added = static_cast<uint64_t>(min) * n +
                               (max < 0 ? n + 4 : static_cast<uint64_t>(max - min) * (n + 3) + (max > min));
        const uint64_t after = g_.elems.size() + seq.size() + added;
        if (max_size_ != kNoSizeLimit && after > max_size_) {
          err_ = Status::ResourceExhausted(grammar_too_large_message(max_size_));
          return false;
        }
        repeat(item, min, max, seq);
        skip_space(nested);
        continue;  // the repetition is not itself repeatable
      } else {
        break;
      }
      last_start = start;
      skip_space(nested);
    }
    return true;
  }

  bool number(int& out) {
    const size_t b = pos_;
    long v = 0;
    while (!at_end() && t_[pos_] >= '0' && t_[pos_] <= '9') {
      v = v * 10 + (t_[pos_++] - '0');
      if (v > 10000) return static_cast<void>(fail("repetition count too large (max 10000)")), false;
    }
    if (pos_ == b) return static_cast<void>(fail("expected a number")), false;
    out = static_cast<int>(v);
    return true;
  }

  /// Appends item{min,max} (max < 0: unbounded) to seq, with helper rules.
  void repeat(const std::vector<Element>& item, int min, int max, std::vector<Element>& seq) {
    for (int i = 0; i < min; ++i) seq.insert(seq.end(), item.begin(), item.end());
    if (max < 0) {  // star ::= item star | ε
      const int32_t star = g_.new_rule("star");
      std::vector<Element> alt = item;
      alt.push_back({Element::kRule, star});
      g_.add_alt(star, alt);
      g_.add_alt(star, {});
      seq.push_back({Element::kRule, star});
      return;
    }
    // opt_k ::= item opt_{k-1} | ε   (k = max - min optional items, nested)
    int32_t inner = -1;
    for (int k = 0; k < max - min; ++k) {
      const int32_t opt = g_.new_rule("opt");
      std::vector<Element> alt = item;
      if (inner >= 0) alt.push_back({Element::kRule, inner});
      g_.add_alt(opt, alt);
      g_.add_alt(opt, {});
      inner = opt;
    }
    if (inner >= 0) seq.push_back({Element::kRule, inner});
  }

  std::string_view t_;
  uint64_t max_size_;
  size_t pos_ = 0;
  static constexpr int kMaxGroupDepth = 100;
  int depth_ = 0;  // open '(' groups (each one a recursion)
  Grammar g_;
  std::map<int32_t, bool> defined_;
  Status err_ = Status::Ok();
};

}  // namespace

Result<Grammar> parse_gbnf(std::string_view text, uint64_t max_size) { return GbnfParser(text, max_size).run(); }

}  // namespace pdserve::grammar
