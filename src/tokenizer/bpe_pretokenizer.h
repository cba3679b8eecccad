// Byte-level BPE pre-tokenization (`tokenizer.ggml.model = gpt2`), after llama.cpp's
// unicode_regex_split (src/unicode.cpp) and the per-`tokenizer.ggml.pre` regex lists of
// llm_tokenizer_bpe (src/llama-vocab.cpp):
//   * the input is decoded to code points the way llama.cpp does (an undecodable byte
//     becomes U+FFFD) and re-encoded, so the words hold canonical UTF-8;
//   * the regexes of the pre-type run one after the other, each splitting every piece the
//     previous ones left into matches and the unmatched gaps between them;
//   * every word is then mapped to GPT-2's byte-level alphabet (bytes_to_unicode).
// Matching uses PCRE2 (UTF + UCP) on the code points, with `\s` spelled out as llama.cpp's
// whitespace set (Unicode White_Space) so that it agrees with llama.cpp's regex semantics
// (its std::regex "collapsed" fallback and its hand-written gpt2/llama3 splitters).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace pdserve::tokenizer {

/// What llama.cpp derives from `tokenizer.ggml.pre` for a BPE vocabulary.
struct BpePreConfig {
  std::vector<std::string> regexes;  // applied in order (llama.cpp regex_exprs)
  bool ignore_merges = false;        // a word that is a vocab token is emitted whole
  bool add_bos = false;              // default of tokenizer.ggml.add_bos_token
  bool no_bos = false;               // default BOS id is "none" (chatglm)
};

/// llama.cpp's settings for pre-tokenizer `pre` ("" means "default", as llama.cpp falls
/// back to). nullopt for pre-types this implementation does not support.
std::optional<BpePreConfig> bpe_pre_config(std::string_view pre);

/// Compiled regex list of one pre-type. Immutable after creation and safe to share
/// between threads (each split() uses its own match data).
class BpePreTokenizer {
 public:
  /// Compiles `regexes` (llama.cpp spelling); an error names the regex that failed.
  static Result<BpePreTokenizer> create(const std::vector<std::string>& regexes);

  /// Words of `text` as canonical UTF-8 (not yet byte-level encoded), in order; their
  /// concatenation is `text` with undecodable bytes replaced by U+FFFD.
  std::vector<std::string> split(std::string_view text) const;

 private:
  struct Compiled;
  std::vector<std::shared_ptr<const Compiled>> regexes_;
};

/// GPT-2 bytes_to_unicode: the UTF-8 text of the code point that stands for byte `b`.
const std::string& byte_to_unicode(uint8_t b);

/// Inverse of byte_to_unicode on code points: the byte, or -1 when `cpt` stands for none.
int unicode_to_byte(uint32_t cpt);

/// Appends the byte-level form of `word` (each byte → byte_to_unicode) to `out`.
void byte_encode(std::string_view word, std::string& out);

/// The bytes a byte-level token text stands for (llama.cpp llama_decode_text): each code
/// point maps back through bytes_to_unicode; one outside that alphabet is rendered as
/// llama.cpp does, "[UNK_BYTE_0x<hex of its UTF-8>" + the whole token text + "]".
std::string byte_decode(std::string_view text);

}  // namespace pdserve::tokenizer
