// Speculative decoding settings (`--speculative ...` flags of serve, generate and the
// workers). Proposals never change output: see engine/spec_proposer.h.
#pragma once

#include <string>

namespace pdserve::engine {

/// Which proposer drafts tokens for the target model to verify.
enum class SpecMethod {
  kOff,        // plain decoding
  kNgram,      // prompt lookup over prompt + output so far (spec_ngram.h)
  kLayerSkip,  // self-speculation: the model's first draft_layers layers + its output head
  kDraft,      // a second, smaller model with the same vocabulary and its own paged KV
};

struct SpecConfig {
  SpecMethod method = SpecMethod::kOff;
  int k = 4;                // --spec-k: most tokens proposed per sequence and step
  bool adaptive = true;     // --no-spec-adaptive turns the per-sequence k backoff off
  int ngram_min = 1;        // --spec-ngram-min / --spec-ngram-max: suffix lengths matched
  int ngram_max = 4;
  int draft_layers = 0;     // --draft-layers (layerskip): layers run by the proposer
  std::string draft_model;  // --draft-model (draft): GGUF path
};

/// "off", "ngram", "layerskip", "draft".
inline const char* spec_method_name(SpecMethod m) {
  switch (m) {
    case SpecMethod::kNgram: return "ngram";
    case SpecMethod::kLayerSkip: return "layerskip";
    case SpecMethod::kDraft: return "draft";
    default: return "off";
  }
}

}  // namespace pdserve::engine
