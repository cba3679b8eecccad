// Per-request sampling and stopping parameters (OpenAI request fields).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace pdserve::engine {

/// How to pick tokens and when to stop. Validation (ranges) is done by the API layer;
/// the engine trusts these values.
struct SamplingParams {
  float temperature = 1.0f;     // 0 ⇒ greedy (argmax)
  float top_p = 1.0f;           // nucleus mass in (0, 1]
  int top_k = 0;                // 0 ⇒ disabled
  std::optional<uint64_t> seed; // same seed + same request ⇒ same tokens, whatever the batch
  int max_tokens = 16;          // < 0 ⇒ until EOS or the context end
  std::vector<std::string> stop;  // stop strings, matched on text across token boundaries
  /// vLLM's extensions: ids that end generation like EOS (their text is not returned unless
  /// include_stop_str_in_output); the matched stop string (or stop id's text) returned at
  /// the end of the text; min_tokens: before that many tokens are generated, EOS (unless
  /// ignore_eos) and stop_token_ids cannot be sampled (unless a grammar allows nothing else),
  /// and only a stop string that ends in the text of a later token ends generation (vLLM).
  std::vector<int32_t> stop_token_ids;
  bool include_stop_str_in_output = false;
  int min_tokens = 0;
  int top_logprobs = -1;        // -1 ⇒ no logprobs; 0..5 ⇒ sampled token's + N alternatives
  bool ignore_eos = false;      // generate past EOS until max_tokens
  /// Structured output: a GBNF grammar (grammar/grammar.h) the output must match; every
  /// structured-output request field is compiled to one by the API layer. Empty ⇒
  /// unconstrained. Travels to decode and prefill workers with the other fields.
  std::string grammar;
  /// OpenAI's penalties, in [-2, 2]: before sampling, every token's logit is lowered by
  /// frequency_penalty × (times it was generated so far in this choice) and by
  /// presence_penalty if it was generated at all (the prompt does not count, as OpenAI's
  /// and vLLM's). 0 ⇒ off.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  /// OpenAI's logit_bias: (token id, bias in [-100, 100]) added to that token's logit
  /// before sampling. Logprobs stay those of the raw model (see token_logprobs).
  std::vector<std::pair<int32_t, float>> logit_bias;
  /// The repetition penalty of Keskar et al. 2019 (CTRL), as vLLM's `repetition_penalty` and
  /// llama.cpp's `repeat_penalty`: the logit l of every token that occurs among the last
  /// `repetition_last_n` tokens of the sequence (prompt and output; 0 ⇒ all of them) becomes
  /// l / penalty if l > 0, else l × penalty. > 0; 1 ⇒ off.
  float repetition_penalty = 1.0f;
  int repetition_last_n = 0;
  /// min-p sampling (Nguyen et al. 2024, as vLLM): a token is a candidate only if its
  /// probability at `temperature` is at least min_p × the most likely token's. In [0, 1];
  /// 0 ⇒ off. Applied before top_k and top_p; no effect when greedy.
  float min_p = 0.0f;

  /// Whether sampling sees other logits than the model's (penalties or a bias).
  bool adjusts_logits() const {
    return presence_penalty != 0.0f || frequency_penalty != 0.0f || repetition_penalty != 1.0f || !logit_bias.empty() ||
           min_tokens > 0;
  }

  /// The parameters of choice `k` (0-based) of a request with n > 1 choices: a given seed
  /// becomes seed + k, so each choice is reproducible and differs from its siblings.
  SamplingParams for_choice(int k) const {
    SamplingParams p = *this;
    if (p.seed) p.seed = *p.seed + static_cast<uint64_t>(k);
    return p;
  }
};

}  // namespace pdserve::engine
