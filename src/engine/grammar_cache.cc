#include "engine/grammar_cache.h"

namespace pdserve::engine {

Result<std::shared_ptr<grammar::GrammarMatcher>> GrammarCache::get(const std::string& gbnf) {
  std::lock_guard<std::mutex> lk(mu_);
  if (auto it = map_.find(gbnf); it != map_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second.second);
    return it->second.first;
  }
  auto g = grammar::parse_gbnf(gbnf);
  if (!g.ok()) return Status::InvalidArgument("invalid grammar: " + g.error());
  if (!vocab_) {
    const int n = tok_.vocab().size();
    std::vector<std::string> pieces(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) pieces[i] = tok_.token_to_piece(i);
    vocab_ = std::make_shared<grammar::TokenVocab>(std::move(pieces), tok_.vocab().eog_ids, n_vocab_);
  }
  auto m = std::make_shared<grammar::GrammarMatcher>(std::move(*g), vocab_);
  lru_.push_front(gbnf);
  map_[gbnf] = {m, lru_.begin()};
  while (map_.size() > kCapacity) {
    map_.erase(lru_.back());
    lru_.pop_back();
  }
  return m;
}

}  // namespace pdserve::engine
