#include "loadgen/prompt_synth.h"

#include <algorithm>
#include <random>
#include <set>

namespace pdserve::loadgen {
namespace {

constexpr size_t kMinPool = 8;

// splitmix64: a well-mixed 64-bit seed from (a, b).
uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t z = a + 0x9E3779B97F4A7C15ULL * (b + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

bool is_word_piece(const std::string& p) {
  if (p.size() < 2 || p[0] != ' ') return false;
  return std::all_of(p.begin() + 1, p.end(), [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); });
}

}  // namespace

Result<PromptSynthesizer> PromptSynthesizer::create(const tokenizer::Tokenizer& tok, uint64_t seed) {
  const tokenizer::Vocab& v = tok.vocab();
  PromptSynthesizer s;
  s.tok_ = &tok;
  s.seed_ = seed;
  s.add_bos_ = v.add_bos && v.bos_id >= 0;
  s.bos_id_ = v.bos_id;
  s.add_special_ = v.add_bos;
  s.add_eos_ = v.add_bos && v.add_eos && v.eos_id >= 0;
  s.eos_id_ = v.eos_id;

  // Characters c such that some token's text contains c followed by a space: a word ending
  // in such a c could merge with the next word's leading space. Words ending otherwise
  // cannot (any token spanning the boundary would contain "c "), so each word tokenizes
  // alone, whatever surrounds it.
  std::set<char> joins_space;
  std::vector<std::pair<int32_t, std::string>> candidates;
  for (int32_t id = 0; id < v.size(); ++id) {
    const std::string p = tok.token_to_piece(id);
    for (size_t i = 0; i + 1 < p.size(); ++i)
      if (p[i + 1] == ' ' && p[i] != ' ') joins_space.insert(p[i]);
    if (v.types[id] == tokenizer::TokenType::NORMAL && is_word_piece(p)) candidates.emplace_back(id, p);
  }
  // Does the tokenizer add the first word's space itself (SPM add_space_prefix), or does the
  // text carry it (byte-level BPE)? Pick the convention under which more words round-trip.
  std::vector<size_t> keep_ok, strip_ok;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const auto& [id, p] = candidates[i];
    if (joins_space.count(p.back())) continue;
    if (tok.encode(p, false) == std::vector<int32_t>{id}) keep_ok.push_back(i);
    if (tok.encode(p.substr(1), false) == std::vector<int32_t>{id}) strip_ok.push_back(i);
  }
  s.strip_leading_space_ = strip_ok.size() > keep_ok.size();
  for (size_t i : s.strip_leading_space_ ? strip_ok : keep_ok) {
    s.pool_.push_back(candidates[i].first);
    s.pool_text_.push_back(candidates[i].second);
  }
  if (s.pool_.size() < kMinPool)
    return Status::InvalidArgument("tokenizer has only " + std::to_string(s.pool_.size()) +
                         " usable single-token words (need " + std::to_string(kMinPool) + ") to synthesize prompts");
  return s;
}

void PromptSynthesizer::append_block(std::vector<int32_t>& out, uint64_t block_seed, int64_t count) const {
  std::mt19937_64 rng(block_seed);
  std::uniform_int_distribution<size_t> pick(0, pool_.size() - 1);
  for (int64_t i = 0; i < count; ++i) out.push_back(static_cast<int32_t>(pick(rng)));  // pool indices
}

Result<PromptSynthesizer::Prompt> PromptSynthesizer::synthesize(int64_t num_tokens,
                                                                 const std::vector<int64_t>& hash_ids,
                                                                 int64_t block_tokens, uint64_t request_seed) const {
  if (num_tokens < min_tokens())
    return Status::InvalidArgument("prompt length " + std::to_string(num_tokens) + " below the minimum " +
                         std::to_string(min_tokens()));
  // A vocab that appends EOS (add_eos) spends the last position on it.
  const int64_t body = num_tokens - (add_eos_ ? 1 : 0);
  if (block_tokens <= 0) block_tokens = body;
  // Word slots per block: block 0 holds BOS in its first position.
  std::vector<int32_t> words;  // pool indices
  words.reserve(static_cast<size_t>(num_tokens));
  for (int64_t j = 0, begin = 0; begin < body; ++j, begin += block_tokens) {
    const int64_t len = std::min(block_tokens, body - begin) - (j == 0 && add_bos_ ? 1 : 0);
    const uint64_t block_seed = static_cast<size_t>(j) < hash_ids.size()
                                    ? mix(seed_, static_cast<uint64_t>(hash_ids[j]))
                                    : mix(mix(seed_ ^ 0xA5A5A5A5A5A5A5A5ULL, request_seed), static_cast<uint64_t>(j));
    // Always draw a whole block from the seed and keep its first `len` words, so a prompt
    // ending inside a shared block holds a prefix of that block.
    std::vector<int32_t> block;
    append_block(block, block_seed, block_tokens);
    words.insert(words.end(), block.begin(), block.begin() + std::max<int64_t>(0, len));
  }
  Prompt p;
  if (add_bos_) p.tokens.push_back(bos_id_);
  for (int32_t w : words) {
    p.tokens.push_back(pool_[w]);
    p.text += pool_text_[w];
  }
  if (add_eos_) p.tokens.push_back(eos_id_);
  if (strip_leading_space_ && !p.text.empty()) p.text.erase(0, 1);
  const std::vector<int32_t> check = tok_->encode(p.text, add_special_);
  if (check != p.tokens)
    return Status::InvalidArgument("synthesized prompt re-encodes to " + std::to_string(check.size()) + " tokens instead of " +
                         std::to_string(p.tokens.size()));
  return p;
}

}  // namespace pdserve::loadgen
