// The activations and logits of one forward pass, allocated once and reused by every
// pass that fits (DESIGN.md §2, model/: one reused workspace).
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>

#include "model/model_config.h"

namespace pdserve::model {

/// Buffers for a batch of up to tokens() tokens of which up to logits_rows() need logits,
/// for one ModelConfig. Row-major float32, uninitialised (forward writes before it reads):
///   x [tokens][n_embd]      residual stream
///   xn, proj [rows][n_embd] normed input / projection output (rows = max(tokens, logits_rows),
///                           as the last FFN runs on the logits rows)
///   q, attn [tokens][n_head·head_dim], k, v [tokens][n_head_kv·head_dim]
///   gate, up [rows][n_ff]
///   xo, h [logits_rows][n_embd], logits [logits_rows][n_vocab]
class Workspace {
 public:
  /// Makes room for `n_tokens` tokens and `n_logits_rows` logits rows of a model with
  /// config `c`; allocates (and drops the old contents) only when either exceeds what is
  /// held, keeping the larger of old and new for each. Pages are touched on first use.
  void fit(const ModelConfig& c, int n_tokens, int n_logits_rows) {
    if (n_tokens <= tokens_ && n_logits_rows <= logits_rows_) return;
    tokens_ = std::max(tokens_, n_tokens);
    logits_rows_ = std::max(logits_rows_, n_logits_rows);
    const size_t t = static_cast<size_t>(tokens_), o = static_cast<size_t>(logits_rows_), r = std::max(t, o);
    const size_t E = c.n_embd, F = c.n_ff, nq = size_t(c.n_head) * c.head_dim, nkv = size_t(c.n_head_kv) * c.head_dim;
    x = alloc(t * E);
    xn = alloc(r * E);
    proj = alloc(r * E);
    q = alloc(t * nq);
    attn = alloc(t * nq);
    k = alloc(t * nkv);
    v = alloc(t * nkv);
    gate = alloc(r * F);
    up = alloc(r * F);
    xo = alloc(o * E);
    h = alloc(o * E);
    logits = alloc(o * static_cast<size_t>(c.n_vocab));
  }
  int tokens() const { return tokens_; }
  int logits_rows() const { return logits_rows_; }

  std::unique_ptr<float[]> x, xn, proj, q, attn, k, v, gate, up, xo, h, logits;

 private:
  static std::unique_ptr<float[]> alloc(size_t n) { return std::make_unique_for_overwrite<float[]>(std::max<size_t>(n, 1)); }

  int tokens_ = 0, logits_rows_ = 0;
};

}  // namespace pdserve::model
