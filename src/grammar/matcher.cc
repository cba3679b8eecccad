#include "grammar/matcher.h"

#include <algorithm>
#include <numeric>
#include <unordered_set>

namespace pdserve::grammar {

TokenTrie TokenTrie::build(const std::vector<std::string>& pieces) {
  std::vector<int32_t> order;
  for (size_t i = 0; i < pieces.size(); ++i)
    if (!pieces[i].empty()) order.push_back(static_cast<int32_t>(i));
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return pieces[a] < pieces[b] || (pieces[a] == pieces[b] && a < b); });
  TokenTrie t;
  // Walk the sorted pieces: each new byte beyond the common prefix with the previous
  // piece opens a node (DFS preorder); `open[d]` is the open node at depth d + 1.
  std::vector<int32_t> open;
  std::vector<std::vector<int32_t>> node_toks;
  const std::string* prev = nullptr;
  for (int32_t id : order) {
    const std::string& p = pieces[id];
    size_t lcp = 0;
    if (prev) while (lcp < prev->size() && lcp < p.size() && (*prev)[lcp] == p[lcp]) ++lcp;
    while (open.size() > lcp) {
      t.end[open.back()] = static_cast<int32_t>(t.bytes.size());
      open.pop_back();
    }
    for (size_t d = lcp; d < p.size(); ++d) {
      open.push_back(static_cast<int32_t>(t.bytes.size()));
      t.bytes.push_back(static_cast<uint8_t>(p[d]));
      t.depth.push_back(static_cast<uint16_t>(d + 1));
      t.end.push_back(0);
      node_toks.emplace_back();
    }
    node_toks[open.back()].push_back(id);
    t.max_depth = std::max<int>(t.max_depth, static_cast<int>(p.size()));
    prev = &p;
  }
  for (int32_t n : open) t.end[n] = static_cast<int32_t>(t.bytes.size());
  t.tok_begin.push_back(0);
  for (auto& v : node_toks) {
    t.toks.insert(t.toks.end(), v.begin(), v.end());
    t.tok_begin.push_back(static_cast<int32_t>(t.toks.size()));
  }
  return t;
}

TokenVocab::TokenVocab(std::vector<std::string> pieces_, std::vector<int32_t> eog, int n_vocab_)
    : pieces(std::move(pieces_)), eog_ids(std::move(eog)), n_vocab(n_vocab_) {
  for (int32_t e : eog_ids)
    if (e >= 0 && e < static_cast<int32_t>(pieces.size())) pieces[e].clear();  // never a byte string
  trie = TokenTrie::build(pieces);
}

GrammarMatcher::GrammarMatcher(Grammar g, std::shared_ptr<const TokenVocab> vocab) : g_(std::move(g)), vocab_(std::move(vocab)) {
  std::vector<int32_t> leaves;
  bool accept = false;
  std::lock_guard<std::mutex> lk(mu_);
  visited_.clear();
  for (int32_t a : g_.rule_alts[g_.root]) expand(a, -1, leaves, accept);
  initial_ = intern_state(std::move(leaves), accept);
}

int32_t GrammarMatcher::frame(int32_t pos, int32_t parent) {
  const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(pos)) << 32) | static_cast<uint32_t>(parent);
  auto [it, fresh] = frame_ids_.try_emplace(key, static_cast<int32_t>(frames_.size()));
  if (fresh) frames_.push_back({pos, parent});
  return it->second;
}

void GrammarMatcher::expand(int32_t pos, int32_t parent, std::vector<int32_t>& leaves, bool& accept) {
  // Iterative over pops; recursive over the alternatives of a referenced rule. A (pos,
  // parent) pair already expanded in this step adds nothing new: skipped (this keeps
  // nested nullable repetitions linear).
  for (;;) {
    const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(pos)) << 32) | static_cast<uint32_t>(parent);
    if (!visited_.insert(key).second) return;
    const Element& e = g_.elems[pos];
    if (e.kind == Element::kBytes) {
      leaves.push_back(frame(pos, parent));
      return;
    }
    if (e.kind == Element::kEnd) {
      if (parent < 0) {
        accept = true;
        return;
      }
      const Frame f = frames_[parent];
      pos = f.pos;
      parent = f.parent;
      continue;
    }
    // A rule reference: push the return position (a tail call pushes nothing).
    const int32_t ret = g_.elems[pos + 1].kind == Element::kEnd ? parent : frame(pos + 1, parent);
    const auto& alts = g_.rule_alts[e.value];
    for (size_t i = 0; i + 1 < alts.size(); ++i) expand(alts[i], ret, leaves, accept);
    pos = alts.back();
    parent = ret;
  }
}

int32_t GrammarMatcher::intern_state(std::vector<int32_t> leaves, bool accept) {
  std::sort(leaves.begin(), leaves.end());
  leaves.erase(std::unique(leaves.begin(), leaves.end()), leaves.end());
  if (leaves.empty() && !accept) return kDead;
  std::string key(reinterpret_cast<const char*>(leaves.data()), leaves.size() * sizeof(int32_t));
  key += accept ? '\1' : '\0';
  auto [it, fresh] = state_ids_.try_emplace(std::move(key), static_cast<int32_t>(states_.size()));
  if (fresh) {
    State s;
    s.leaves = std::move(leaves);
    s.accept = accept;
    s.next.assign(256, -2);
    states_.push_back(std::move(s));
  }
  return it->second;
}

int32_t GrammarMatcher::step_locked(int32_t state, uint8_t b) {
  int32_t cached = states_[state].next[b];
  if (cached != -2) return cached;
  std::vector<int32_t> leaves;
  bool accept = false;
  visited_.clear();
  const std::vector<int32_t> from = states_[state].leaves;  // copy: states_ may grow
  for (int32_t l : from) {
    const Frame f = frames_[l];
    if (g_.sets[g_.elems[f.pos].value].has(b)) expand(f.pos + 1, f.parent, leaves, accept);
  }
  const int32_t next = intern_state(std::move(leaves), accept);
  states_[state].next[b] = next;
  return next;
}

int32_t GrammarMatcher::advance_byte(int32_t state, uint8_t b) {
  if (state < 0) return kDead;
  std::lock_guard<std::mutex> lk(mu_);
  return step_locked(state, b);
}

int32_t GrammarMatcher::advance_token(int32_t state, int32_t id) {
  if (state < 0) return kDead;
  std::lock_guard<std::mutex> lk(mu_);
  if (std::find(vocab_->eog_ids.begin(), vocab_->eog_ids.end(), id) != vocab_->eog_ids.end())
    return states_[state].accept ? state : kDead;
  if (id < 0 || id >= static_cast<int32_t>(vocab_->pieces.size()) || vocab_->pieces[id].empty()) return kDead;
  for (char c : vocab_->pieces[id]) {
    state = step_locked(state, static_cast<uint8_t>(c));
    if (state < 0) return kDead;
  }
  return state;
}

bool GrammarMatcher::accepting(int32_t state) {
  if (state < 0) return false;
  std::lock_guard<std::mutex> lk(mu_);
  return states_[state].accept;
}

int GrammarMatcher::num_states() {
  std::lock_guard<std::mutex> lk(mu_);
  return static_cast<int>(states_.size());
}

int GrammarMatcher::num_frames() {
  std::lock_guard<std::mutex> lk(mu_);
  return static_cast<int>(frames_.size());
}

const uint32_t* GrammarMatcher::mask(int32_t state) {
  std::lock_guard<std::mutex> lk(mu_);
  if (state < 0) {  // dead: nothing is allowed
    if (!dead_mask_) dead_mask_.reset(new uint32_t[mask_words()]());
    return dead_mask_.get();
  }
  if (states_[state].mask) return states_[state].mask.get();
  const int words = mask_words();
  std::unique_ptr<uint32_t[]> m(new uint32_t[words]());
  const TokenTrie& t = vocab_->trie;
  std::vector<int32_t> at(t.max_depth + 1);
  at[0] = state;
  const int32_t n = static_cast<int32_t>(t.bytes.size());
  for (int32_t i = 0; i < n;) {
    const int d = t.depth[i];
    const int32_t s = step_locked(at[d - 1], t.bytes[i]);
    if (s < 0) {
      i = t.end[i];  // no token with this prefix is allowed
      continue;
    }
    at[d] = s;
    for (int32_t k = t.tok_begin[i]; k < t.tok_begin[i + 1]; ++k) {
      const int32_t id = t.toks[k];
      if (id < vocab_->n_vocab) m[id >> 5] |= uint32_t{1} << (id & 31);
    }
    ++i;
  }
  if (states_[state].accept)
    for (int32_t e : vocab_->eog_ids)
      if (e >= 0 && e < vocab_->n_vocab) m[e >> 5] |= uint32_t{1} << (e & 31);
  if (static_cast<int>(masked_.size()) >= kMaxCachedMasks) {
    for (int32_t s : masked_) states_[s].mask.reset();
    masked_.clear();
  }
  states_[state].mask = std::move(m);
  masked_.push_back(state);
  return states_[state].mask.get();
}

}  // namespace pdserve::grammar
