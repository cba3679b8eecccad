// Byte-level BPE tokenizer (`tokenizer.ggml.model = gpt2`), as llama.cpp's
// llm_tokenizer_bpe_session plus the BPE case of llama_vocab::impl::tokenize and
// token_to_piece: special-token partitioning, the pre-tokenizer of `tokenizer.ggml.pre`,
// GPT-2 byte-to-unicode, then per word the merges of `tokenizer.ggml.merges` by rank.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/bpe_pretokenizer.h"
#include "tokenizer/tokenizer.h"

namespace pdserve::tokenizer {

class BpeTokenizer final : public Tokenizer {
 public:
  /// Error for a pre-tokenizer (`tokenizer.ggml.pre`) this implementation does not know.
  static Result<std::unique_ptr<BpeTokenizer>> create(Vocab v);
  BpeTokenizer(const BpeTokenizer&) = delete;
  BpeTokenizer& operator=(const BpeTokenizer&) = delete;

  std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special = false) const override;

  /// The pre-tokenizer's words of `text` (canonical UTF-8, before byte-level encoding).
  std::vector<std::string> pre_tokenize(std::string_view text) const { return pre_.split(text); }

  /// BPE-encodes raw text that holds no special tokens, appending to `out`.
  void encode_text(std::string_view text, std::vector<int32_t>& out) const;

 private:
  BpeTokenizer(Vocab v, BpePreTokenizer pre, bool ignore_merges);

  int32_t lookup(std::string_view piece) const;
  int rank(std::string_view left, std::string_view right) const;
  /// Merges one byte-level encoded word and appends its tokens.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  struct PairHash {
    size_t operator()(const std::pair<std::string_view, std::string_view>& p) const {
      const size_t a = std::hash<std::string_view>{}(p.first);
      return a ^ (std::hash<std::string_view>{}(p.second) + 0x9e3779b97f4a7c15ULL + (a << 6) + (a >> 2));
    }
  };

  BpePreTokenizer pre_;
  bool ignore_merges_;
  std::unordered_map<std::string_view, int32_t> index_;  // views into vocab_.tokens
  /// (left, right) → merge rank; views into vocab_.merges. First occurrence wins.
  std::unordered_map<std::pair<std::string_view, std::string_view>, int, PairHash> ranks_;
};

}  // namespace pdserve::tokenizer
