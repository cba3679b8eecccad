#include "engine/spec_proposer.h"

#include <algorithm>

#include "engine/spec_model.h"
#include "engine/spec_ngram.h"
#include "model/model.h"

namespace pdserve::engine {

std::string spec_config_error(const SpecConfig& cfg, const model::ModelConfig& target) {
  if (cfg.method == SpecMethod::kOff) return {};
  if (cfg.k < 1 || cfg.k > 64) return "--spec-k must be in [1, 64]; got " + std::to_string(cfg.k);
  if (cfg.method == SpecMethod::kNgram && (cfg.ngram_min < 1 || cfg.ngram_max < cfg.ngram_min))
    return "--spec-ngram-min must be >= 1 and <= --spec-ngram-max; got " + std::to_string(cfg.ngram_min) + " and " +
           std::to_string(cfg.ngram_max);
  if (cfg.method == SpecMethod::kLayerSkip && (cfg.draft_layers < 1 || cfg.draft_layers >= target.n_layer))
    return "--draft-layers must be in [1, " + std::to_string(target.n_layer - 1) + "] for this " +
           std::to_string(target.n_layer) + "-layer model; got " + std::to_string(cfg.draft_layers);
  if (cfg.method == SpecMethod::kDraft && cfg.draft_model.empty()) return "--speculative draft needs --draft-model";
  return {};
}

Result<std::unique_ptr<model::Model>> load_draft_model(const SpecConfig& cfg, const model::Model& target,
                                                       gguf::FileMemory memory) {
  if (cfg.method != SpecMethod::kDraft) return std::unique_ptr<model::Model>();
  auto d = model::Model::load(cfg.draft_model, memory);
  if (!d.ok()) return Status::InvalidArgument("--draft-model: " + d.status().message());
  const model::ModelConfig &dc = d.value()->config(), &tc = target.config();
  const std::string what = "--draft-model " + cfg.draft_model + ": ";
  if (dc.n_vocab != tc.n_vocab)
    return Status::InvalidArgument(what + "its vocabulary has " + std::to_string(dc.n_vocab) + " tokens, the model's " +
                                   std::to_string(tc.n_vocab) + "; a draft model must share the model's vocabulary");
  const gguf::Array* dt = d.value()->file().get_array("tokenizer.ggml.tokens");
  const gguf::Array* tt = target.file().get_array("tokenizer.ggml.tokens");
  if (dt && tt) {
    for (size_t i = 0; i < std::min(dt->items.size(), tt->items.size()); ++i) {
      const std::string *a = dt->items[i].as_string(), *b = tt->items[i].as_string();
      if (a && b && *a != *b)
        return Status::InvalidArgument(what + "token " + std::to_string(i) + " is '" + *a + "' there but '" + *b +
                                       "' in the model; a draft model must share the model's vocabulary");
    }
  }
  return std::move(d.value());
}

std::unique_ptr<Proposer> make_proposer(const SpecConfig& cfg, model::Model& target, kv::KvCacheManager& kv,
                                        std::unique_ptr<model::Model> draft) {
  switch (cfg.method) {
    case SpecMethod::kNgram: return std::make_unique<NgramProposer>(cfg.ngram_min, cfg.ngram_max);
    case SpecMethod::kLayerSkip: return std::make_unique<LayerSkipProposer>(target, kv, cfg.draft_layers);
    case SpecMethod::kDraft: return std::make_unique<DraftModelProposer>(std::move(draft), kv.block_size(), kv.num_blocks());
    default: return nullptr;
  }
}

}  // namespace pdserve::engine
