#include "tokenizer/jinja/lexer.h"

#include <cctype>
#include <cstring>

#include "tokenizer/jinja/value.h"

namespace pdserve::tokenizer::jinja {

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

class Lexer {
 public:
  Lexer(const std::string& src, const LexOptions& opts) : src_(src), opts_(opts) {}

  std::vector<Token> run() {
    size_t pos = 0;
    bool strip_next = false;  // `-%}`: drop all leading whitespace of the next text
    bool trim_next = false;   // trim_blocks: drop one leading newline of the next text
    while (pos < src_.size()) {
      size_t start = find_tag(pos);
      std::string text = src_.substr(pos, start - pos);
      size_t text_pos = pos;
      if (strip_next) {
        size_t k = 0;
        while (k < text.size() && is_space(text[k])) ++k;
        text.erase(0, k);
        text_pos += k;
      } else if (trim_next && !text.empty() && text[0] == '\n') {
        text.erase(0, 1);
        ++text_pos;
      }
      strip_next = trim_next = false;
      if (start >= src_.size()) {
        push_text(text, text_pos);
        break;
      }
      char kind = src_[start + 1];  // '{', '%' or '#'
      char mod = start + 2 < src_.size() ? src_[start + 2] : '\0';
      if (mod == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      } else if (mod != '+' && kind != '{' && opts_.lstrip_blocks) {
        size_t nl = text.rfind('\n');
        size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        bool line_starting = text_pos == 0 || src_[text_pos - 1] == '\n';
        if (l_pos > 0 || line_starting) {
          bool ws = true;
          for (size_t k = l_pos; k < text.size(); ++k)
            if (text[k] != ' ' && text[k] != '\t') ws = false;
          if (ws) text.erase(l_pos);
        }
      }
      push_text(text, text_pos);
      size_t p = start + 2 + ((mod == '-' || mod == '+') ? 1 : 0);
      if (kind == '#') {
        size_t end = src_.find("#}", p);
        if (end == std::string::npos) fail(start, "unterminated comment");
        bool minus = end > p && src_[end - 1] == '-';
        bool plus = end > p && src_[end - 1] == '+';
        pos = end + 2;
        strip_next = minus;
        trim_next = !minus && !plus && opts_.trim_blocks;
        continue;
      }
      push(kind == '{' ? TokenType::VarBegin : TokenType::BlockBegin, kind == '{' ? "{{" : "{%", start);
      char close = kind == '{' ? '}' : '%';
      pos = lex_expr(p, close, &strip_next, &trim_next);
      push(kind == '{' ? TokenType::VarEnd : TokenType::BlockEnd, kind == '{' ? "}}" : "%}", pos - 2);
      if (kind == '{') trim_next = false;
      if (kind == '%' && is_raw()) pos = lex_raw(pos, &strip_next, &trim_next);
    }
    push(TokenType::Eof, "", src_.size());
    return std::move(toks_);
  }

 private:
  size_t find_tag(size_t pos) const {
    while (true) {
      size_t p = src_.find('{', pos);
      if (p == std::string::npos || p + 1 >= src_.size()) return src_.size();
      char c = src_[p + 1];
      if (c == '{' || c == '%' || c == '#') return p;
      pos = p + 1;
    }
  }

  // `{% raw %}` ... `{% endraw %}`: the body is text.
  bool is_raw() const {
    size_t n = toks_.size();
    return n >= 3 && toks_[n - 2].type == TokenType::Name && toks_[n - 2].value == "raw" &&
           toks_[n - 3].type == TokenType::BlockBegin;
  }
  size_t lex_raw(size_t pos, bool* strip_next, bool* trim_next) {
    toks_.resize(toks_.size() - 3);
    size_t p = pos;
    while (true) {
      size_t s = src_.find("{%", p);
      if (s == std::string::npos) fail(pos, "missing endraw");
      size_t q = s + 2;
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) ++q;
      while (q < src_.size() && is_space(src_[q])) ++q;
      if (src_.compare(q, 6, "endraw") == 0) {
        std::string text = src_.substr(pos, s - pos);
        if (*strip_next) {
          size_t k = 0;
          while (k < text.size() && is_space(text[k])) ++k;
          text.erase(0, k);
        } else if (*trim_next && !text.empty() && text[0] == '\n') {
          text.erase(0, 1);
        }
        if (src_[s + 2] == '-')
          while (!text.empty() && is_space(text.back())) text.pop_back();
        push_text(text, pos);
        size_t e = src_.find("%}", q);
        if (e == std::string::npos) fail(s, "unterminated endraw");
        *strip_next = src_[e - 1] == '-';
        *trim_next = !*strip_next && src_[e - 1] != '+' && opts_.trim_blocks;
        return e + 2;
      }
      p = s + 2;
    }
  }

  size_t lex_expr(size_t p, char close, bool* strip_next, bool* trim_next) {
    while (true) {
      while (p < src_.size() && is_space(src_[p])) ++p;
      if (p >= src_.size()) fail(p, "unexpected end of template inside a tag");
      char c = src_[p];
      auto at = [&](size_t i) { return i < src_.size() ? src_[i] : '\0'; };
      if ((c == '-' || c == '+') && at(p + 1) == close && at(p + 2) == '}') {
        *strip_next = c == '-';
        *trim_next = close == '%' && c != '+' && c != '-' && opts_.trim_blocks;
        return p + 3;
      }
      if (c == close && at(p + 1) == '}') {
        *strip_next = false;
        *trim_next = close == '%' && opts_.trim_blocks;
        return p + 2;
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t s = p;
        while (p < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[p])) || src_[p] == '_')) ++p;
        push(TokenType::Name, src_.substr(s, p - s), s);
        continue;
      }
      if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t s = p;
        while (p < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[p])) || src_[p] == '_')) ++p;
        bool is_float = false;
        if (at(p) == '.' && std::isdigit(static_cast<unsigned char>(at(p + 1)))) {
          is_float = true;
          ++p;
          while (p < src_.size() && std::isdigit(static_cast<unsigned char>(src_[p]))) ++p;
        }
        if (at(p) == 'e' || at(p) == 'E') {
          size_t q = p + 1;
          if (at(q) == '+' || at(q) == '-') ++q;
          if (std::isdigit(static_cast<unsigned char>(at(q)))) {
            is_float = true;
            p = q;
            while (p < src_.size() && std::isdigit(static_cast<unsigned char>(src_[p]))) ++p;
          }
        }
        std::string num;
        for (size_t k = s; k < p; ++k)
          if (src_[k] != '_') num += src_[k];
        push(is_float ? TokenType::Float : TokenType::Int, num, s);
        continue;
      }
      if (c == '"' || c == '\'') {
        size_t s = p++;
        std::string val;
        while (true) {
          if (p >= src_.size()) fail(s, "unterminated string");
          char d = src_[p++];
          if (d == c) break;
          if (d == '\\' && p < src_.size()) {
            char e = src_[p++];
            switch (e) {
              case 'n': val += '\n'; break;
              case 't': val += '\t'; break;
              case 'r': val += '\r'; break;
              case '\\': val += '\\'; break;
              case '\'': val += '\''; break;
              case '"': val += '"'; break;
              case '\n': break;
              default: val += '\\'; val += e;
            }
            continue;
          }
          val += d;
        }
        push(TokenType::String, val, s);
        continue;
      }
      static const char* ops[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">",
                                  "(", ")", "[", "]", "{", "}", ",", ".", ":", "|", "="};
      bool matched = false;
      for (const char* op : ops) {
        size_t n = std::strlen(op);
        if (src_.compare(p, n, op) == 0) {
          push(TokenType::Op, op, p);
          p += n;
          matched = true;
          break;
        }
      }
      if (!matched) fail(p, std::string("unexpected character '") + c + "'");
    }
  }

  void push_text(const std::string& text, size_t at) {
    if (!text.empty()) push(TokenType::Text, text, at);
  }
  void push(TokenType t, std::string v, size_t at) {
    Token tok{t, std::move(v), 1, 1};
    position(at, &tok.line, &tok.col);
    toks_.push_back(std::move(tok));
  }
  // Line/column of byte `at`, counted on from the last asked position when possible.
  void position(size_t at, int* line, int* col) const {
    if (at < pos_at_) pos_at_ = 0, pos_line_ = 1, pos_col_ = 1;
    for (; pos_at_ < at && pos_at_ < src_.size(); ++pos_at_) {
      if (src_[pos_at_] == '\n') { ++pos_line_; pos_col_ = 1; } else { ++pos_col_; }
    }
    *line = pos_line_;
    *col = pos_col_;
  }
  mutable size_t pos_at_ = 0;
  mutable int pos_line_ = 1, pos_col_ = 1;
  [[noreturn]] void fail(size_t at, const std::string& msg) const {
    int l, c;
    position(at, &l, &c);
    throw TemplateError("line " + std::to_string(l) + ", column " + std::to_string(c) + ": " + msg);
  }

  const std::string& src_;
  LexOptions opts_;
  std::vector<Token> toks_;
};

}  // namespace

std::vector<Token> lex(const std::string& src, const LexOptions& opts) { return Lexer(src, opts).run(); }

}  // namespace pdserve::tokenizer::jinja
