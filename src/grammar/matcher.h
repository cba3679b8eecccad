// Constrained decoding over a vocabulary: a pushdown automaton over bytes (the grammar's
// stacks), memoised into numbered states, and per-state allowed-token masks computed by
// walking a trie of the tokens' bytes (so a token is checked once per distinct prefix,
// and a dead prefix prunes its whole subtree). The design follows llama.cpp's grammar
// stacks (llama-grammar.cpp) with persistent, interned stack frames and tail calls, as
// in XGrammar (Dong et al. 2024).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "grammar/grammar.h"

namespace pdserve::grammar {

/// The token byte strings of a vocabulary in DFS order of their trie: node i has
/// `bytes[i]`, `depth[i]` (1 = a first byte), `end[i]` (the index after its subtree) and
/// the tokens whose bytes end at it. Tokens with no bytes are never in the trie.
struct TokenTrie {
  std::vector<uint8_t> bytes;
  std::vector<uint16_t> depth;
  std::vector<int32_t> end;
  std::vector<int32_t> tok_begin;  // tokens ending at node i: toks[tok_begin[i] .. tok_begin[i+1])
  std::vector<int32_t> toks;
  int max_depth = 0;

  /// `pieces[id]`: the bytes token id produces (empty: never allowed by a grammar).
  static TokenTrie build(const std::vector<std::string>& pieces);
};

/// A vocabulary as the matcher sees it: each token's bytes, its trie and the
/// end-of-generation ids (allowed exactly when the grammar accepts). n_vocab may exceed
/// pieces.size() (model rows without a token); those ids are never allowed.
struct TokenVocab {
  std::vector<std::string> pieces;
  std::vector<int32_t> eog_ids;
  int n_vocab = 0;
  TokenTrie trie;
  TokenVocab(std::vector<std::string> pieces_, std::vector<int32_t> eog, int n_vocab_);
};

/// A grammar bound to a vocabulary. Thread-safe; shared by every sequence decoding with
/// the same grammar (a sequence's own state is one int). States are memoised: the cost of
/// a mask is paid once per distinct grammar state.
class GrammarMatcher {
 public:
  static constexpr int32_t kDead = -1;
  static constexpr int kMaxCachedMasks = 2048;

  GrammarMatcher(Grammar g, std::shared_ptr<const TokenVocab> vocab);

  /// The state before any output.
  int32_t initial_state() const { return initial_; }
  /// The state after `b`, or kDead when the grammar does not allow it.
  int32_t advance_byte(int32_t state, uint8_t b);
  /// The state after token `id` (its bytes), kDead when not allowed. An end-of-generation
  /// token leaves the state as it is when the grammar accepts, else kDead.
  int32_t advance_token(int32_t state, int32_t id);
  /// Whether the output so far is a complete sentence of the grammar.
  bool accepting(int32_t state);
  /// Allowed-token bitmap for `state` (kDead: all zero): bit (id % 32) of word id / 32,
  /// n_vocab bits. The pointer stays valid until the next mask() call: at most
  /// kMaxCachedMasks masks are kept, then all but the newest are dropped (recomputed when
  /// needed), which bounds the memory of grammars with very many states.
  const uint32_t* mask(int32_t state);
  /// Words of a mask: (n_vocab + 31) / 32.
  int mask_words() const { return (vocab_->n_vocab + 31) / 32; }
  int num_states();
  /// Stack frames created so far (at most g.expanded_size() for a grammar without
  /// recursion; each a position in a copy of a rule).
  int num_frames();
  const TokenVocab& vocab() const { return *vocab_; }

 private:
  struct Frame {
    int32_t pos;     // index into g_.elems: the element to match next
    int32_t parent;  // the frame to return to, -1 for none
  };
  struct State {
    std::vector<int32_t> leaves;  // frames whose element is kBytes (sorted, unique)
    bool accept = false;
    std::vector<int32_t> next;    // [256] transitions, -2 = not computed yet
    std::unique_ptr<uint32_t[]> mask;
  };

  int32_t frame(int32_t pos, int32_t parent);
  void expand(int32_t pos, int32_t parent, std::vector<int32_t>& leaves, bool& accept);
  int32_t intern_state(std::vector<int32_t> leaves, bool accept);
  int32_t step_locked(int32_t state, uint8_t b);

  Grammar g_;
  std::shared_ptr<const TokenVocab> vocab_;
  std::mutex mu_;
  std::vector<Frame> frames_;
  std::unordered_map<uint64_t, int32_t> frame_ids_;
  std::vector<State> states_;
  std::unordered_map<std::string, int32_t> state_ids_;
  std::unordered_set<uint64_t> visited_;  // expand(): pairs seen in the current step
  int32_t initial_ = kDead;
  std::unique_ptr<uint32_t[]> dead_mask_;
  std::vector<int32_t> masked_;  // states holding a cached mask
};

}  // namespace pdserve::grammar
