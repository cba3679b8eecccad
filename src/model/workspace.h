// The activations and logits of one forward pass, allocated once and reused by every
// pass that fits (DESIGN.md §2, model/: one reused workspace).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

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
///   rope_cs [2][tokens][head_dim]  RoPE's cos/sin of each token's position (rope_cache),
///                           for the layers of rope_base and for the sliding-window ones
/// and, for a mixture-of-experts config (n_expert > 0; model/moe.h), with k = n_expert_used:
///   router [rows][n_expert]            router logits, then probabilities
///   moe_w [rows][k], moe_sel [rows][k] each token's chosen experts' weights and ids
///   moe_row [rows][k]                  where token t's slot j sits in the by-expert order
///   moe_tok [rows·k]                   the token of each row of the by-expert order
///   moe_count [n_expert + 1]           each expert's first row in that order (prefix sums)
///   moe_x, moe_y [rows·k][n_embd]      gathered inputs / the experts' outputs, by expert
///   moe_gate, moe_up [rows·k][n_ff_exp]
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
    rope_cs = alloc(2 * t * c.head_dim);
    if (c.n_expert > 0) {
      const size_t k = c.n_expert_used, Fe = c.n_ff_exp;
      router = alloc(r * c.n_expert);
      moe_w = alloc(r * k);
      moe_sel.assign(r * k, 0);
      moe_row.assign(r * k, 0);
      moe_tok.assign(r * k, 0);
      moe_count.assign(c.n_expert + 1, 0);
      moe_x = alloc(r * k * E);
      moe_y = alloc(r * k * E);
      moe_gate = alloc(r * k * Fe);
      moe_up = alloc(r * k * Fe);
    }
  }
  int tokens() const { return tokens_; }
  int logits_rows() const { return logits_rows_; }

  std::unique_ptr<float[]> x, xn, proj, q, attn, k, v, gate, up, xo, h, logits, rope_cs;
  std::unique_ptr<float[]> router, moe_w, moe_x, moe_y, moe_gate, moe_up;
  std::vector<int32_t> moe_sel, moe_row, moe_tok, moe_count;

 private:
  static std::unique_ptr<float[]> alloc(size_t n) { return std::make_unique_for_overwrite<float[]>(std::max<size_t>(n, 1)); }

  int tokens_ = 0, logits_rows_ = 0;
};

}  // namespace pdserve::model
