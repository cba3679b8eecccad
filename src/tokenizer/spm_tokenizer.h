// SentencePiece-BPE tokenizer (`tokenizer.ggml.model = llama`), as llama.cpp's
// llm_tokenizer_spm_session plus the SPM branch of llama_vocab::impl::tokenize.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace pdserve::tokenizer {

class SpmTokenizer final : public Tokenizer {
 public:
  explicit SpmTokenizer(Vocab v);
  SpmTokenizer(const SpmTokenizer&) = delete;
  SpmTokenizer& operator=(const SpmTokenizer&) = delete;

  std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special = false) const override;

  /// SPM-encodes one raw fragment (spaces already escaped to U+2581), appending to `out`:
  /// bigram merges by score (highest first, leftmost on ties), byte fallback for the rest.
  void encode_fragment(std::string_view text, std::vector<int32_t>& out) const;

 private:
  int32_t lookup(std::string_view piece) const;
  /// A NORMAL token's text as output bytes: U+2581 → ' ' (llama.cpp token_to_piece).
  static std::string normal_piece(const std::string& text);

  std::unordered_map<std::string_view, int32_t> index_;  // views into vocab_.tokens
  std::array<int32_t, 256> byte_token_{};                // <0xNN>, else the 1-byte piece, else UNK
};

}  // namespace pdserve::tokenizer
