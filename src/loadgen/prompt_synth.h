// Prompt synthesis for `pdserve bench`: plain-text prompts whose tokenization is exactly a
// requested number of tokens, built from blocks so that requests sharing a trace hash id
// share identical token blocks (and a prefix cache sees the trace's real sharing).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "tokenizer/tokenizer.h"

namespace pdserve::loadgen {

class PromptSynthesizer {
 public:
  struct Prompt {
    std::string text;             // what is sent as `prompt`
    std::vector<int32_t> tokens;  // its tokenization, BOS included when the vocab adds one
  };

  /// Finds the vocab's single-token words (a piece " " + ASCII letters that encodes back to
  /// that one token and can never merge with a neighbouring word). Errors when there are
  /// too few. `seed` changes every block's content.
  static Result<PromptSynthesizer> create(const tokenizer::Tokenizer& tok, uint64_t seed = 0);

  /// A prompt of exactly `num_tokens` tokens as the server tokenizes it (BOS counted when
  /// vocab().add_bos). Positions [j*block_tokens, (j+1)*block_tokens) form block j: for
  /// j < hash_ids.size() its tokens depend only on hash_ids[j] (and j == 0), otherwise on
  /// (`request_seed`, j), so distinct requests do not share them. The result is verified by
  /// re-encoding; errors when num_tokens < min_tokens() or verification fails.
  Result<Prompt> synthesize(int64_t num_tokens, const std::vector<int64_t>& hash_ids, int64_t block_tokens,
                            uint64_t request_seed) const;

  /// Smallest prompt: BOS plus one word (or one word without BOS), so the text is never empty.
  int64_t min_tokens() const { return (add_bos_ ? 2 : 1) + (add_eos_ ? 1 : 0); }
  /// Number of distinct single-token words the prompts draw from.
  size_t pool_size() const { return pool_.size(); }

 private:
  PromptSynthesizer() = default;
  void append_block(std::vector<int32_t>& out, uint64_t block_seed, int64_t count) const;

  const tokenizer::Tokenizer* tok_ = nullptr;
  std::vector<int32_t> pool_;          // word token ids
  std::vector<std::string> pool_text_;  // their text, with the leading space
  bool strip_leading_space_ = false;   // the tokenizer adds the first word's space itself (SPM)
  bool add_bos_ = false;
  int32_t bos_id_ = -1;
  bool add_special_ = false;  // what the server passes to encode (vocab().add_bos)
  bool add_eos_ = false;  // the tokenizer appends EOS when adding BOS (counted in the length)
  int32_t eos_id_ = -1;
  uint64_t seed_ = 0;
};

}  // namespace pdserve::loadgen
