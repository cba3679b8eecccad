// `pdserve perplexity`: teacher-forced negative log-likelihood per token under token
// eviction (--kv-budget, kv/token_eviction.h) — the quality side of the KV budget. The
// texts are sampled from the model itself (temperature 1, fixed seeds, full f16 KV), then each
// is fed one token per step through model::Model with a kv::KvCacheManager, evicting after
// every token exactly as the engine does for generated tokens (the same select_kept,
// evict_tokens and attention-mass pass), and scored by -log p(next token).
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "cli/choice_option.h"
#include "cli/commands.h"
#include "engine/sampler.h"
#include "kernels/parallel.h"
#include "kv/kv_cache_manager.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace pdserve::cli {

void add_perplexity_command(CLI::App& app, PerplexityArgs& a) {
  CLI::App* cmd = app.add_subcommand(
      "perplexity", "teacher-forced NLL per token of self-sampled texts: full KV vs h2o / streaming eviction at KV budgets");
  cmd->add_option("-m,--model", a.model, "GGUF model")->required();
  cmd->add_option("--texts", a.texts, "texts to sample (seeds seed .. seed + texts - 1)")->default_val(20)->check(CLI::Range(1, 10000));
  cmd->add_option("--tokens", a.tokens, "tokens per text (BOS + sampled), at most the context length")->default_val(512)->check(CLI::Range(2, 1 << 20));
  cmd->add_option("--seed", a.seed, "first sampling seed")->default_val(1);
  cmd->add_option("--budgets", a.budgets, "KV budgets as fractions of --tokens (comma-separated)")->delimiter(',')->default_str("0.5,0.2,0.1");
  add_choice_option(*cmd, "--kv-dtype", a.kv_dtype, kv_dtype_choices(), "KV cache dtype", "f16");
  cmd->add_option("--kv-sinks", a.evict.sinks, "attention sinks kept")->default_val(4)->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--kv-recent-ratio", a.evict.recent_ratio, "h2o recent window as a ratio of the budget")
      ->default_val(0.5)->check(kFinite & CLI::Range(0.0, 0.999));
  cmd->add_option("-t,--threads", a.threads, "compute threads (default: all cores)")->default_val(0)->check(CLI::Range(0, 1024));
}

namespace {

/// Runs `text` one token per step; budget 0 = full KV. With `sample` (the text holds only
/// its first token) the next tokens are drawn from the logits instead (EOS masked, so each
/// text runs its full length) and appended. Returns the summed NLL of tokens 1..n-1.
double run_text(model::Model& m, std::vector<int32_t>& text, int n, kernels::KvDtype dtype,
                const kv::TokenEvictionConfig& cfg, int budget, std::mt19937_64* sample, int32_t eos) {
  const model::ModelConfig& c = m.config();
  kv::KvCacheShape shape;
  shape.n_layers = c.n_layer;
  shape.n_kv_heads = c.n_head_kv;
  shape.head_dim = c.head_dim;
  shape.block_size = 16;
  shape.num_blocks = (n + 15) / 16 + 2;
  shape.dtype = dtype;
  kv::KvCacheManager kv(shape, false, kv::EvictionPolicy::kLru);
  kv::KvSeq s;
  const bool mass = budget > 0 && cfg.needs_attention_mass();
  std::vector<float> row, logits(c.n_vocab);
  engine::SamplingParams sp;
  sp.temperature = 1.f;
  double nll = 0;
  for (int t = 0; t + 1 < n; ++t) {
    if (!kv.allocate_slots(s, t + 1)) {
      std::fprintf(stderr, "error: KV pool exhausted at token %d\n", t);
      std::exit(1);
    }
    const int entry = t - s.num_evicted;
    model::Batch b;
    b.tokens = {text[t]};
    b.positions = {t};
    b.slot_mapping = {s.block_table.slot(entry, shape.block_size)};
    b.seq_ids = {0};
    b.block_tables = {s.block_table.blocks.data()};
    b.logits_rows = {0};
    if (s.num_evicted > 0) b.n_keys = {entry + 1};
    if (mass) {
      row.assign(entry + 1, 0.f);
      b.attn_mass = {row.data()};
    }
    const float* l = m.forward(b, kv.layers());
    std::copy_n(l, c.n_vocab, logits.begin());
    if (sample) {
      if (eos >= 0) logits[eos] = -INFINITY;
      text.push_back(engine::sample_token(logits.data(), c.n_vocab, sp, *sample));
    }
    double mx = -INFINITY, sum = 0;
    for (float v : logits) mx = std::max<double>(mx, v);
    for (float v : logits) sum += std::exp(v - mx);
    nll += mx + std::log(sum) - logits[text[t + 1]];
    if (mass) kv::add_attention_mass(s.attn_mass, row.data(), entry + 1);
    if (budget > 0) kv.evict_tokens(s, t + 1, cfg, budget);
  }
  kv.free(s);
  return nll;
}

}  // namespace

int run_perplexity(const PerplexityArgs& a) {
  if (a.threads > 0) {
    omp_set_num_threads(a.threads);  // the load's weight repacking
    kernels::set_compute_threads(a.threads);
  }
  auto m = model::Model::load(a.model);
  if (!m.ok()) {
    std::fprintf(stderr, "error: %s\n", m.error().c_str());
    return 1;
  }
  model::Model& model = *m.value();
  if (a.tokens > model.config().n_ctx) {
    std::fprintf(stderr, "error: --tokens %d is above the model's context length %d\n", a.tokens, model.config().n_ctx);
    return 1;
  }
  auto tok = tokenizer::Tokenizer::from_gguf(model.file());
  if (!tok.ok()) {
    std::fprintf(stderr, "error: %s\n", tok.error().c_str());
    return 1;
  }
  const int32_t bos = tok.value()->vocab().bos_id, eos = tok.value()->vocab().eos_id;
  model.reserve(1, 1);

  // The texts: BOS, then tokens sampled with full f16 KV at temperature 1, seed a.seed + k —
  // the same texts whatever --kv-dtype scores them, so rows of different dtypes compare.
  std::vector<std::vector<int32_t>> texts;
  for (int k = 0; k < a.texts; ++k) {
    std::mt19937_64 rng(a.seed + k);
    std::vector<int32_t> t = {bos >= 0 ? bos : 1};
    run_text(model, t, a.tokens, kernels::KvDtype::F16, a.evict, 0, &rng, eos);
    texts.push_back(std::move(t));
  }

  struct Row {
    std::string name;
    int budget;
    kv::TokenEvictionPolicy policy;
  };
  std::vector<Row> rows = {{"full KV", 0, kv::TokenEvictionPolicy::kH2o}};
  for (double f : a.budgets) {
    const int b = static_cast<int>(std::lround(f * a.tokens));
    for (auto p : {kv::TokenEvictionPolicy::kH2o, kv::TokenEvictionPolicy::kStreaming})
      rows.push_back({std::string(kv::token_eviction_name(p)) + " " + std::to_string(static_cast<int>(std::lround(f * 100))) + " %", b, p});
  }
  std::printf("| KV | budget (tokens) | NLL / token | perplexity | ΔNLL vs full |\n|---|---:|---:|---:|---:|\n");
  double full = 0;
  for (const Row& r : rows) {
    kv::TokenEvictionConfig cfg = a.evict;
    cfg.policy = r.policy;
    cfg.recent = -1;
    if (r.budget > 0)
      if (std::string why = cfg.check(r.budget); !why.empty()) {
        std::fprintf(stderr, "error: %s\n", why.c_str());
        return 1;
      }
    double nll = 0;
    int64_t count = 0;
    for (auto& t : texts) {
      nll += run_text(model, t, a.tokens, a.kv_dtype, cfg, r.budget, nullptr, eos);
      count += a.tokens - 1;
    }
    const double mean = nll / static_cast<double>(count);
    if (r.budget == 0) full = mean;
    std::printf("| %s %s | %s | %.4f | %.3f | %+.4f |\n", kv::kv_dtype_name(a.kv_dtype), r.name.c_str(),
                r.budget ? std::to_string(r.budget).c_str() : "all", mean, std::exp(mean), mean - full);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace pdserve::cli
