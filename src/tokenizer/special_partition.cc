// Special-token partitioning, as llama.cpp tokenizer_st_partition (src/llama-vocab.cpp).
#include "tokenizer/special_partition.h"

#include <algorithm>

namespace pdserve::tokenizer {

namespace {

/// C-locale isspace, as llama.cpp applies to the text next to LSTRIP/RSTRIP tokens.
bool is_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

/// True when [b, e) overlaps a range of `plain` (sorted, disjoint).
bool overlaps(const std::vector<TextSpan>& plain, size_t b, size_t e) {
  // The first span that ends after b.
  auto it = std::upper_bound(plain.begin(), plain.end(), b,
                             [](size_t pos, const TextSpan& s) { return pos < s.offset + s.length; });
  return it != plain.end() && it->offset < e;
}

/// Splits one raw fragment on every occurrence of token `id`, appending to `out`;
/// occurrences overlapping `plain` (when given) are left as text.
void split_fragment(const Vocab& v, std::string_view text, int32_t id, Fragment frag,
                    std::vector<Fragment>& out, const std::vector<TextSpan>* plain) {
  const std::string& tok = v.tokens[id];
  const uint8_t strip = v.strip.empty() ? 0 : v.strip[id];
  size_t off = frag.offset, len = frag.length;
  while (true) {
    size_t m = text.substr(0, off + len).find(tok, off);
    while (plain && m != std::string_view::npos && overlaps(*plain, m, m + tok.size()))
      m = text.substr(0, off + len).find(tok, m + 1);
    if (m == std::string_view::npos) {
      if (len > 0) out.push_back({-1, off, len});
      return;
    }
    if (m > off) {
      size_t left = m - off;
      if (strip & Vocab::kLstrip)
        while (left > 0 && is_space(text[off + left - 1])) --left;
      if (left > 0) out.push_back({-1, off, left});
    }
    out.push_back({id, 0, 0});
    size_t end = m + tok.size();
    if (end >= off + len) return;
    size_t right = off + len - end;
    if (strip & Vocab::kRstrip)
      while (right > 0 && is_space(text[end])) ++end, --right;
    off = end;
    len = right;
  }
}

}  // namespace

std::vector<Fragment> partition_special(const Vocab& v, std::string_view text, bool parse_special,
                                        const std::vector<TextSpan>* plain) {
  std::vector<Fragment> frags;
  if (text.empty()) return frags;
  frags.push_back({-1, 0, text.size()});
  std::vector<Fragment> next;
  for (int32_t id : v.special_ids) {
    TokenType t = v.types[id];
    const bool control = t == TokenType::CONTROL || t == TokenType::UNKNOWN;
    if (!parse_special && control) continue;
    const std::vector<TextSpan>* keep_plain = control && plain && !plain->empty() ? plain : nullptr;
    const std::string& tok = v.tokens[id];
    bool any = false;  // skip the rebuild when the token occurs nowhere (the common case)
    for (const Fragment& f : frags) {
      if (f.is_text() && text.substr(f.offset, f.length).find(tok) != std::string_view::npos) {
        any = true;
        break;
      }
    }
    if (!any) continue;
    next.clear();
    for (const Fragment& f : frags) {
      if (f.is_text()) {
        split_fragment(v, text, id, f, next, keep_plain);
      } else {
        next.push_back(f);
      }
    }
    frags.swap(next);
  }
  return frags;
}

}  // namespace pdserve::tokenizer
