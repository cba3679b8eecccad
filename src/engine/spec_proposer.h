// Speculative decoding's proposers (Leviathan et al. 2023, "Fast Inference from
// Transformers via Speculative Decoding"; Chen et al. 2023): a cheap guess of a decode
// sequence's next tokens, verified by the target model as extra rows of the normal batch
// (EngineImpl::verify_drafts). Proposals only decide how many tokens a step can emit,
// never which: every emitted token is the one plain decoding samples.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/spec_config.h"
#include "gguf/gguf.h"

namespace pdserve::kv {
class KvCacheManager;
}
namespace pdserve::model {
class Model;
struct ModelConfig;
}

namespace pdserve::engine {

struct Sequence;

/// Drafts tokens for decode sequences. Called on the engine thread only.
class Proposer {
 public:
  virtual ~Proposer() = default;

  /// When propose() runs. false: before scheduling, so a sequence asks the scheduler for
  /// exactly the slots of its proposal (cheap proposers: n-gram). true: after
  /// scheduling, for sequences already granted KV slots for `max_k` draft positions (a
  /// model proposer may write its own K/V there, or needs the slot count first).
  virtual bool after_schedule() const = 0;

  /// For each `seqs[i]` (a decode sequence: all but its last token computed), up to
  /// `max_k[i]` tokens that likely follow seqs[i]->tokens, into out[i] (cleared first;
  /// fewer or none is fine).
  virtual void propose(const std::vector<Sequence*>& seqs, const std::vector<int>& max_k,
                       std::vector<std::vector<int32_t>>& out) = 0;

  /// false when a sequence's first proposal costs far more than its later ones (a draft
  /// model first computes the whole prompt): then the cost gate does not probe a
  /// sequence whose rows no acceptance could pay for (spec_next_k).
  virtual bool cheap_probe() const { return true; }

  /// The sequence (id, choice) ended or lost its KV: drop any state kept for it.
  virtual void release(int64_t seq_id, int choice_index) {
    (void)seq_id;
    (void)choice_index;
  }
};

/// "" when `cfg` can run on a target model with config `target`, else a one-line reason
/// naming the flag (e.g. --draft-layers outside [1, n_layer)).
std::string spec_config_error(const SpecConfig& cfg, const model::ModelConfig& target);

/// --speculative draft: loads --draft-model and checks it against `target` (same
/// vocabulary size and tokens, an architecture the engine runs); nullptr for the other
/// methods. `memory`: as Model::load (the engine passes its --mmap). Errors are one line
/// naming the file.
Result<std::unique_ptr<model::Model>> load_draft_model(const SpecConfig& cfg, const model::Model& target,
                                                       gguf::FileMemory memory = gguf::FileMemory::kHugePages);

/// The proposer `cfg` asks for (nullptr for SpecMethod::kOff). `target` and `kv` are the
/// engine's model and KV cache (they outlive the proposer); `draft`: load_draft_model's
/// result. `cfg` must have passed spec_config_error.
std::unique_ptr<Proposer> make_proposer(const SpecConfig& cfg, model::Model& target, kv::KvCacheManager& kv,
                                        std::unique_ptr<model::Model> draft);

}  // namespace pdserve::engine
