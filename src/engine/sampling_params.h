// Per-request sampling and stopping parameters (OpenAI request fields).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
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
  int top_logprobs = -1;        // -1 ⇒ no logprobs; 0..5 ⇒ sampled token's + N alternatives
  bool ignore_eos = false;      // generate past EOS until max_tokens
  /// Structured output: a GBNF grammar (grammar/grammar.h) the output must match; every
  /// structured-output request field is compiled to one by the API layer. Empty ⇒
  /// unconstrained. Travels to decode and prefill workers with the other fields.
  std::string grammar;

  /// The parameters of choice `k` (0-based) of a request with n > 1 choices: a given seed
  /// becomes seed + k, so each choice is reproducible and differs from its siblings.
  SamplingParams for_choice(int k) const {
    SamplingParams p = *this;
    if (p.seed) p.seed = *p.seed + static_cast<uint64_t>(k);
    return p;
  }
};

}  // namespace pdserve::engine
