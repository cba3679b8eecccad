// The engine's compiled grammars (structured output): one GrammarMatcher per distinct
// grammar text, bound to the model's vocabulary and shared by every sequence that
// decodes with it (so memoised states and masks carry over between requests).
#pragma once

#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "base/status.h"
#include "grammar/matcher.h"
#include "tokenizer/tokenizer.h"

namespace pdserve::engine {

class GrammarCache {
 public:
  /// `n_vocab`: the model's logits width (may exceed the tokenizer's vocabulary).
  GrammarCache(const tokenizer::Tokenizer& tok, int n_vocab) : tok_(tok), n_vocab_(n_vocab) {}

  /// The matcher of GBNF `gbnf`, compiled on first use; InvalidArgument for a grammar
  /// that does not parse. Keeps the `kCapacity` most recently used grammars. Thread-safe.
  Result<std::shared_ptr<grammar::GrammarMatcher>> get(const std::string& gbnf);

  static constexpr size_t kCapacity = 64;

 private:
  const tokenizer::Tokenizer& tok_;
  int n_vocab_;
  std::mutex mu_;
  std::shared_ptr<const grammar::TokenVocab> vocab_;  // built on first use
  std::list<std::string> lru_;                          // most recent first
  std::unordered_map<std::string, std::pair<std::shared_ptr<grammar::GrammarMatcher>, std::list<std::string>::iterator>> map_;
};

}  // namespace pdserve::engine
