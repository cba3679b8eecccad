// Token sampling from logits: greedy, temperature, top-k, top-p (Holtzman et al. 2019),
// and the top-N log-probabilities reported to clients.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "engine/request_stream.h"
#include "engine/sampling_params.h"

namespace pdserve::engine {

/// The id of the largest of `logits` ([n], n ≥ 1), the lowest on ties; NaNs never win
/// (0 when every value is NaN).
int32_t argmax(const float* logits, int n);

/// Picks the next token from `logits` ([n_vocab]). temperature 0 ⇒ argmax (lowest id on
/// ties). Otherwise: keep the top_k most likely (if top_k > 0), softmax at `temperature`,
/// drop those less likely than min_p × the most likely (if min_p > 0), keep the smallest
/// set whose mass reaches top_p, draw with `rng` (one uniform draw, the
/// inverse CDF over the candidates: sorted best first when top_k or top_p cut them, else
/// in id order). Deterministic for a given rng state and logits, so a seeded request is
/// reproducible in any batch.
/// `allowed` (optional): a bitmap of n_vocab bits (bit id % 32 of word id / 32, as
/// grammar::GrammarMatcher::mask); only those tokens are candidates — top_k, top_p and
/// the softmax apply to the allowed tokens' logits. Returns -1 when nothing is allowed.
int32_t sample_token(const float* logits, int n_vocab, const SamplingParams& p, std::mt19937_64& rng,
                     const uint32_t* allowed = nullptr);

/// `logits` ([n_vocab], the model's) as the sampler sees them under `p`, in this order (as
/// vLLM): logit_bias added; the repetition penalty (CTRL, Keskar et al. 2019: l / r if l > 0,
/// else l · r) for every id among the last p.repetition_last_n of `tokens` (0 ⇒ all); the
/// presence / frequency penalties of the generated tokens tokens[first_generated..n_tokens)
/// (OpenAI's formula: l[j] -= c[j]·frequency + (c[j] > 0)·presence). `tokens` ([n_tokens]) is
/// the sequence so far, prompt then output. Writes `out` ([n_vocab]); ids out of range are
/// ignored. O(n_vocab + n_tokens). Deterministic: the same tokens give the same logits in
/// any batch.
void adjust_logits(const float* logits, int n_vocab, const SamplingParams& p, const int32_t* tokens, size_t n_tokens,
                   size_t first_generated, float* out);

/// Sets the logits of the ids that would end generation — `eog_ids` (unless p.ignore_eos)
/// and p.stop_token_ids — to -inf (vLLM's min_tokens). Ids out of range are ignored.
void ban_stop_tokens(float* logits, int n_vocab, const SamplingParams& p, const std::vector<int32_t>& eog_ids);

/// Log-probability of `token` and the `n` most likely tokens (best first, ties by lower
/// id) under the raw distribution log_softmax(logits).
TokenLogprob token_logprobs(const float* logits, int n_vocab, int32_t token, int n);

}  // namespace pdserve::engine
