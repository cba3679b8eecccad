// SPM tokenizer after llama.cpp src/llama-vocab.cpp: llm_tokenizer_spm_session::tokenize
// (symbols = UTF-8 chars, a priority queue of adjacent pairs that form a vocab piece,
// merged by score), resegment (byte fallback), and the SPM case of impl::tokenize.
#include "tokenizer/spm_tokenizer.h"

#include <algorithm>
#include <cstdlib>
#include <queue>

#include "tokenizer/special_partition.h"

namespace pdserve::tokenizer {

namespace {

constexpr std::string_view kSpace = "\xe2\x96\x81";  // U+2581, SPM's escaped space

/// Byte length of the UTF-8 sequence led by `c` (llama.cpp unicode_len_utf8; 1 for
/// stray continuation bytes).
size_t utf8_len(char c) {
  static constexpr size_t kLookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLookup[static_cast<uint8_t>(c) >> 4];
}

struct Symbol {
  int prev;
  int next;
  const char* text;
  size_t n;
};

struct Bigram {
  int left;
  int right;
  float score;
  size_t size;
};

/// Highest score on top; on equal scores the leftmost pair (llm_bigram_spm::comparator).
struct BigramLess {
  bool operator()(const Bigram& l, const Bigram& r) const {
    return l.score < r.score || (l.score == r.score && l.left > r.left);
  }
};

std::string escape_spaces(std::string_view text, bool prefix) {
  std::string out;
  out.reserve(text.size() + 8);
  if (prefix) out += kSpace;
  for (char c : text) {
    if (c == ' ') {
      out += kSpace;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

SpmTokenizer::SpmTokenizer(Vocab v) : Tokenizer(std::move(v)) {
  const int32_t n = vocab_.size();
  index_.reserve(n);
  for (int32_t id = 0; id < n; ++id) index_.emplace(vocab_.tokens[id], id);
  static const char* hex = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    const char buf[6] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
    int32_t id = lookup(std::string_view(buf, 6));
    const char raw = static_cast<char>(b);
    if (id < 0) id = lookup(std::string_view(&raw, 1));
    if (id < 0) id = vocab_.unk_id;
    byte_token_[b] = id;
  }
  build_pieces(&SpmTokenizer::normal_piece);
}

int32_t SpmTokenizer::lookup(std::string_view piece) const {
  auto it = index_.find(piece);
  return it == index_.end() ? -1 : it->second;
}

void SpmTokenizer::encode_fragment(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t offs = 0; offs < text.size();) {
    const int index = static_cast<int>(symbols.size());
    size_t n = std::min(utf8_len(text[offs]), text.size() - offs);
    Symbol s{index - 1, 0, text.data() + offs, n};
    offs += n;
    s.next = offs == text.size() ? -1 : index + 1;
    symbols.push_back(s);
  }

  std::priority_queue<Bigram, std::vector<Bigram>, BigramLess> queue;
  auto try_add = [&](int left, int right) {
    if (left == -1 || right == -1) return;
    std::string_view piece(symbols[left].text, symbols[left].n + symbols[right].n);
    int32_t id = lookup(piece);
    if (id < 0) return;
    queue.push({left, right, vocab_.scores[id], piece.size()});
  };
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    Bigram b = queue.top();
    queue.pop();
    Symbol& l = symbols[b.left];
    Symbol& r = symbols[b.right];
    // Stale entry: one side was merged away since it was queued.
    if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }

  // Resegment: every merged symbol is a vocab piece; an unmerged character that is not
  // one falls back to byte tokens (llama.cpp's rev_merge path can never apply to it).
  for (int i = symbols.empty() ? -1 : 0; i != -1; i = symbols[i].next) {
    const Symbol& s = symbols[i];
    int32_t id = lookup(std::string_view(s.text, s.n));
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    for (size_t j = 0; j < s.n; ++j) {
      int32_t b = byte_token_[static_cast<uint8_t>(s.text[j])];
      if (b >= 0) out.push_back(b);
    }
  }
}

std::vector<int32_t> SpmTokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
  std::vector<int32_t> out;
  const bool add_special = add_bos;
  if (add_special && vocab_.add_bos && vocab_.bos_id >= 0) out.push_back(vocab_.bos_id);
  // llama.cpp prefixes a space to the first raw fragment and to every raw fragment that
  // follows a special token.
  bool prev_special = true;
  for (const Fragment& f : partition_special(vocab_, text, parse_special)) {
    if (f.is_text()) {
      const bool prefix = vocab_.add_space_prefix && prev_special;
      encode_fragment(escape_spaces(text.substr(f.offset, f.length), prefix), out);
      prev_special = false;
    } else {
      out.push_back(f.token);
      prev_special = true;
    }
  }
  if (add_special && vocab_.add_eos && vocab_.eos_id >= 0) out.push_back(vocab_.eos_id);
  return out;
}

std::string SpmTokenizer::normal_piece(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    if (text.compare(i, kSpace.size(), kSpace) == 0) {
      out += ' ';
      i += kSpace.size();
    } else {
      out += text[i++];
    }
  }
  return out;
}

}  // namespace pdserve::tokenizer
