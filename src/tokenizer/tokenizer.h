// Tokenizers built from GGUF metadata (`tokenizer.ggml.*` keys).
// SPM (`tokenizer.ggml.model = llama`): SentencePiece BPE with score-based merges,
// byte fallback <0xNN> and the leading-space (U+2581) rule, as llama.cpp's llm_tokenizer_spm.
// BPE (`tokenizer.ggml.model = gpt2`): byte-level BPE with ranked merges and the regex
// pre-tokenizer named by `tokenizer.ggml.pre`, as llama.cpp's llm_tokenizer_bpe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "gguf/gguf.h"

namespace pdserve::tokenizer {

/// GGUF `tokenizer.ggml.token_type` values (llama.cpp `llama_token_attr` legacy types).
enum class TokenType : int32_t {
  UNDEFINED = 0, NORMAL = 1, UNKNOWN = 2, CONTROL = 3, USER_DEFINED = 4, UNUSED = 5, BYTE = 6,
};

/// The vocabulary of a model: pieces, scores, types and the special ids.
/// A byte range [offset, offset + length) of a text.
struct TextSpan {
  size_t offset = 0;
  size_t length = 0;
};

struct Vocab {
  std::string model;                // "llama" (SPM) or "gpt2" (BPE)
  std::string pre;                  // tokenizer.ggml.pre (BPE pre-tokenizer name)
  std::vector<std::string> tokens;  // raw pieces as stored (SPM uses U+2581 for space)
  std::vector<float> scores;
  std::vector<TokenType> types;
  std::vector<std::string> merges;  // tokenizer.ggml.merges ("a b" per BPE rank), BPE only
  int32_t bos_id = -1, eos_id = -1, unk_id = -1, pad_id = -1, eot_id = -1;
  bool add_bos = true;              // tokenizer.ggml.add_bos_token (default: SPM and llama3 BPE)
  bool add_eos = false;
  bool add_space_prefix = true;     // tokenizer.ggml.add_space_prefix (SPM default: true)
  std::string chat_template;        // tokenizer.chat_template, empty when absent
  std::unordered_map<std::string, int32_t> token_to_id;

  // Derived at load time the way llama.cpp's llama_vocab::impl::load does (not stored in GGUF):
  /// End-of-generation ids: EOS, EOT, EOM and the tokens llama.cpp recognises by text
  /// ("<|eot_id|>", "<|im_end|>", "<|end|>", "<|endoftext|>", ...), sorted.
  std::vector<int32_t> eog_ids;
  /// Control, user-defined and unknown ids, longest text first (llama.cpp
  /// cache_special_tokens): the texts `parse_special` splits the input on.
  std::vector<int32_t> special_ids;
  /// Per-token strip flags (llama.cpp LLAMA_TOKEN_ATTR_LSTRIP/RSTRIP; set for Phi-3):
  /// whitespace before (kLstrip) / after (kRstrip) a matched special token is dropped.
  enum : uint8_t { kLstrip = 1, kRstrip = 2 };
  std::vector<uint8_t> strip;

  /// Id of the piece `text`, or -1.
  int32_t find(std::string_view text) const;

  /// Reads the vocabulary; errors name the missing/invalid key.
  static Result<Vocab> from_gguf(const gguf::GgufFile& f);
  int32_t size() const { return static_cast<int32_t>(tokens.size()); }
};

/// A short fingerprint of what a vocabulary means (16 hex digits): SHA-256 over the model and
/// pre-tokenizer names, every token's text, score and type, the merges, the special ids and
/// the add_bos / add_eos / add_space_prefix flags — everything that maps text to ids and ids
/// to text. Two processes agree on every token id exactly when their fingerprints agree
/// (the chat template is not part of it: it does not change what an id means).
std::string vocab_fingerprint(const Vocab& v);

/// Encodes text to token ids and token ids to bytes. Thread-safe (const).
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  /// Builds the tokenizer named by `tokenizer.ggml.model`; error for unsupported models.
  static Result<std::unique_ptr<Tokenizer>> from_gguf(const gguf::GgufFile& f);

  /// Token ids for `text`. `add_bos` prepends BOS when the vocab has one and wants it
  /// (callers usually pass vocab().add_bos); like llama.cpp's `add_special` it also appends
  /// EOS when the vocab sets add_eos. With `parse_special`, text equal to a
  /// control/user-defined token (e.g. "<|im_start|>") becomes that token; otherwise the
  /// text is plain (what /v1/completions does with user prompts) — except, as in
  /// llama.cpp, USER_DEFINED tokens, which are always matched.
  virtual std::vector<int32_t> encode(std::string_view text, bool add_bos,
                                      bool parse_special = false) const = 0;

  /// A rendered chat prompt: as encode(text, add_bos, /*parse_special=*/true), except that
  /// a control or unknown token is never matched where its text overlaps `plain` (sorted,
  /// disjoint ranges: the message content, render_chat's content_spans) — there the text
  /// is plain as with parse_special = false. Without special-token text in `plain` the
  /// result equals encode(text, add_bos, true).
  std::vector<int32_t> encode_chat(std::string_view text, bool add_bos, const std::vector<TextSpan>& plain) const;

  /// The bytes token `id` contributes to output text (llama.cpp token_to_piece with
  /// special=false): SPM "▁" → ' ', byte tokens <0xNN> → that byte, user-defined tokens →
  /// their text, control and unknown tokens → "" (empty). Out-of-range ids → "".
  virtual std::string token_to_piece(int32_t id) const;

  /// Concatenated pieces of `ids` (no leading-space stripping).
  std::string decode(const std::vector<int32_t>& ids) const;

  /// True for end-of-generation ids (EOS, EOT).
  bool is_eog(int32_t id) const;

  const Vocab& vocab() const { return vocab_; }
  /// vocab_fingerprint(vocab()), computed once at construction.
  const std::string& fingerprint() const { return fingerprint_; }

 protected:
  explicit Tokenizer(Vocab v) : vocab_(std::move(v)), fingerprint_(vocab_fingerprint(vocab_)) {}
  /// Fills the token_to_piece table: NORMAL tokens through `normal_piece(text)` (the
  /// model's own rule: SPM "▁" → ' ', BPE byte-level decoding), USER_DEFINED → their text,
  /// BYTE <0xNN> → that byte (llama.cpp token_to_byte), everything else → "".
  void build_pieces(const std::function<std::string(const std::string&)>& normal_piece);
  Vocab vocab_;
  std::string fingerprint_;
  std::vector<std::string> pieces_;  // token_to_piece table
};

/// Incremental detokenizer for streaming: emits only complete UTF-8 characters; a partial
/// multi-byte sequence is held back until completed, and `flush()` returns what is left.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok) : tok_(tok) {}
  /// Appends token `id`; returns the newly completed text (possibly empty).
  std::string push(int32_t id);
  /// Appends raw bytes; returns the newly completed text.
  std::string push_bytes(std::string_view bytes);
  /// Returns any held-back bytes (an incomplete sequence at the end of the output).
  std::string flush();

 private:
  const Tokenizer& tok_;
  std::string pending_;
};

}  // namespace pdserve::tokenizer
