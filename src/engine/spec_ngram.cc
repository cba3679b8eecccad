#include "engine/spec_ngram.h"

#include <algorithm>

#include "engine/sequence.h"

namespace pdserve::engine {

std::vector<int32_t> ngram_lookup(const std::vector<int32_t>& tokens, int n_min, int n_max, int k) {
  const int len = static_cast<int>(tokens.size());
  if (k <= 0) return {};
  for (int n = std::min(n_max, len - 1); n >= std::max(1, n_min); --n) {
    const int32_t* suffix = tokens.data() + len - n;
    // Latest start i < len - n whose n tokens equal the suffix.
    for (int i = len - n - 1; i >= 0; --i) {
      if (!std::equal(suffix, suffix + n, tokens.data() + i)) continue;
      const int from = i + n, to = std::min(len, from + k);
      return std::vector<int32_t>(tokens.begin() + from, tokens.begin() + to);
    }
  }
  return {};
}

void NgramProposer::propose(const std::vector<Sequence*>& seqs, const std::vector<int>& max_k,
                            std::vector<std::vector<int32_t>>& out) {
  out.resize(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) out[i] = ngram_lookup(seqs[i]->tokens, n_min_, n_max_, max_k[i]);
}

}  // namespace pdserve::engine
