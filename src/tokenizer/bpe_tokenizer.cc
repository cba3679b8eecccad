// Byte-level BPE after llama.cpp src/llama-vocab.cpp: llm_tokenizer_bpe_session::tokenize
// (symbols = UTF-8 characters of the byte-level word, a priority queue of adjacent pairs
// that have a merge rank, lowest rank first and leftmost on ties; unknown results fall
// back to single-byte tokens) and the BPE cases of impl::tokenize / impl::token_to_piece.
#include "tokenizer/bpe_tokenizer.h"

#include <algorithm>
#include <cstdlib>

#include "tokenizer/special_partition.h"

namespace pdserve::tokenizer {

namespace {

size_t utf8_len(char c) {
  static constexpr size_t kLookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLookup[static_cast<uint8_t>(c) >> 4];
}

struct Symbol {
  int prev;
  int next;
  uint32_t off;  // into the word
  uint32_t n;    // bytes; 0 once merged into the left neighbour
};

struct Bigram {
  int left;
  int right;
  int rank;
  uint32_t size;
};

/// Heap order: the top is the lowest rank, and on equal ranks the leftmost pair
/// (llm_bigram_bpe::comparator).
struct BigramAfter {
  bool operator()(const Bigram& l, const Bigram& r) const {
    return l.rank > r.rank || (l.rank == r.rank && l.left > r.left);
  }
};

}  // namespace

Result<std::unique_ptr<BpeTokenizer>> BpeTokenizer::create(Vocab v) {
  // llama.cpp refuses a BPE vocabulary without merges ("cannot find tokenizer merges").
  if (v.merges.empty()) return Status::NotFound("missing required metadata key 'tokenizer.ggml.merges'");
  auto cfg = bpe_pre_config(v.pre);
  if (!cfg) return Status::InvalidArgument("unsupported BPE pre-tokenizer '" + v.pre + "' (tokenizer.ggml.pre)");
  auto pre = BpePreTokenizer::create(cfg->regexes);
  if (!pre.ok()) return pre.status();
  return std::unique_ptr<BpeTokenizer>(new BpeTokenizer(std::move(v), std::move(pre).value(), cfg->ignore_merges));
}

BpeTokenizer::BpeTokenizer(Vocab v, BpePreTokenizer pre, bool ignore_merges)
    : Tokenizer(std::move(v)), pre_(std::move(pre)), ignore_merges_(ignore_merges) {
  const int32_t n = vocab_.size();
  index_.reserve(n);
  for (int32_t id = 0; id < n; ++id) index_.emplace(vocab_.tokens[id], id);
  // "first second", split at the first space after the first byte (llama.cpp); a merge
  // without one maps ("", "") like there.
  ranks_.reserve(vocab_.merges.size());
  for (size_t i = 0; i < vocab_.merges.size(); ++i) {
    std::string_view m = vocab_.merges[i];
    const size_t pos = m.find(' ', 1);
    std::pair<std::string_view, std::string_view> key;
    if (pos != std::string_view::npos) key = {m.substr(0, pos), m.substr(pos + 1)};
    ranks_.emplace(key, static_cast<int>(i));
  }
  build_pieces([](const std::string& text) { return byte_decode(text); });
}

int32_t BpeTokenizer::lookup(std::string_view piece) const {
  auto it = index_.find(piece);
  return it == index_.end() ? -1 : it->second;
}

int BpeTokenizer::rank(std::string_view left, std::string_view right) const {
  auto it = ranks_.find({left, right});
  return it == ranks_.end() ? -1 : it->second;
}

void BpeTokenizer::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (int32_t id = lookup(word); id >= 0) {
      out.push_back(id);
      return;
    }
  }
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  for (size_t off = 0; off < word.size();) {
    const int index = static_cast<int>(symbols.size());
    const size_t n = std::min(utf8_len(word[off]), word.size() - off);
    Symbol s{index - 1, 0, static_cast<uint32_t>(off), static_cast<uint32_t>(n)};
    off += n;
    s.next = off == word.size() ? -1 : index + 1;
    symbols.push_back(s);
  }
  const auto text = [&](const Symbol& s) { return word.substr(s.off, s.n); };

  std::vector<Bigram> heap;
  const auto try_add = [&](int left, int right) {
    if (left == -1 || right == -1) return;
    const int r = rank(text(symbols[left]), text(symbols[right]));
    if (r < 0) return;
    heap.push_back({left, right, r, symbols[left].n + symbols[right].n});
    std::push_heap(heap.begin(), heap.end(), BigramAfter{});
  };
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add(i - 1, i);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), BigramAfter{});
    const Bigram b = heap.back();
    heap.pop_back();
    Symbol& l = symbols[b.left];
    Symbol& r = symbols[b.right];
    // Outdated: one side has been merged since (symbols only grow rightwards, so equal
    // sizes mean equal text, llama.cpp's check).
    if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }

  for (int i = 0; i != -1; i = symbols[i].next) {
    const std::string_view s = text(symbols[i]);
    if (int32_t id = lookup(s); id >= 0) {
      out.push_back(id);
      continue;
    }
    // No such token: each byte of the (byte-level) text on its own, if it is one.
    for (char c : s) {
      if (int32_t id = lookup(std::string_view(&c, 1)); id >= 0) out.push_back(id);
    }
  }
}

void BpeTokenizer::encode_text(std::string_view text, std::vector<int32_t>& out) const {
  std::string encoded;
  for (const std::string& word : pre_.split(text)) {
    encoded.clear();
    byte_encode(word, encoded);
    encode_word(encoded, out);
  }
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
  std::vector<int32_t> out;
  const bool add_special = add_bos;
  if (add_special && vocab_.add_bos && vocab_.bos_id >= 0) out.push_back(vocab_.bos_id);
  for (const Fragment& f : partition_special(vocab_, text, parse_special)) {
    if (f.is_text()) {
      encode_text(text.substr(f.offset, f.length), out);
    } else {
      out.push_back(f.token);
    }
  }
  if (add_special && vocab_.add_eos && vocab_.eos_id >= 0) out.push_back(vocab_.eos_id);
  return out;
}

}  // namespace pdserve::tokenizer
