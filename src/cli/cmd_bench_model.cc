// `pdserve bench-model`: raw model throughput, no engine or server — model::Model with a
// kv::KvCache and kv::BlockPool driven directly, like llama-bench: prompt processing of
// p tokens in one batch (pp), n single-token decode steps (tg), then B sequences
// decoding together (batched decode). With --kv-budget the batched sequences evict tokens
// as the engine's decode steps do (kv::KvCacheManager::evict_tokens after every step, the
// attention-mass rows of h2o accumulated from the forward pass: engine.cc / scheduler.cc).
// --profile adds a per-op table (model/op_profile.h) of the pp step, the tg steps and the
// batched decode steps.

#include <algorithm>
#include <cmath>
#include <map>
#include <cstdio>
#include <random>
#include <span>

#include "base/clock.h"
#include "cli/choice_option.h"
#include "cli/commands.h"
#include "kernels/matmul.h"
#include "kernels/parallel.h"
#include "kv/kv_cache_manager.h"
#include "model/model.h"

namespace pdserve::cli {

void add_bench_model_command(CLI::App& app, BenchModelArgs& a) {
  CLI::App* cmd = app.add_subcommand("bench-model", "model throughput without the engine: pp, tg and batched decode tokens/s");
  cmd->add_option("-m,--model", a.model, "GGUF model")->required();
  cmd->add_option("-p,--prompt-tokens", a.p, "prompt tokens processed in one batch (0 = skip)")->default_val(512)->check(CLI::Range(0, 1 << 20));
  cmd->add_option("-n,--gen-tokens", a.n, "single-token decode steps after the prompt (0 = skip)")->default_val(128)->check(CLI::Range(0, 1 << 20));
  cmd->add_option("-t,--threads", a.threads, "compute threads (default: all cores)")->default_val(0)->check(CLI::Range(0, 1024));
  cmd->add_option("--batch", a.batch, "batched-decode sequence counts (comma-separated; 0 = skip)")->delimiter(',')->default_str("1,8,32");
  cmd->add_option("--batch-prompt", a.batch_prompt, "prompt tokens of each batched sequence")->default_val(8)->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--batch-steps", a.batch_steps, "decode steps of the batched runs")->default_val(16)->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--seed", a.seed, "random token ids seed")->default_val(1);
  add_choice_option(*cmd, "--kv-dtype", a.kv_dtype, kv_dtype_choices(), "KV cache dtype", "f16");
  cmd->add_option("--batch-kv", a.random_kv,
                  "how the batched prompts' K/V get into the cache: prefill (computed by the model) or random "
                  "(random values written in the cache dtype: the decode steps read as much and cost the same, "
                  "without the long prefill)")
      ->transform(CLI::CheckedTransformer(std::map<std::string, bool>{{"prefill", false}, {"random", true}}))
      ->default_str("prefill");
  cmd->add_option("--kv-budget", a.kv_budget, "KV tokens kept per batched sequence (0 = keep all), as the engine's flag")
      ->default_val(0)
      ->check(CLI::Range(0, 1 << 20));
  add_choice_option(*cmd, "--kv-evict", a.evict.policy, kv_evict_choices(), "token eviction under --kv-budget", "h2o");
  cmd->add_option("-d,--depth", a.depth,
                  "decode (tg) at this context: the sequence starts with D random K/V entries instead of the prompt "
                  "(long-context decode without the long prefill; 0 = tg after the pp prompt)")
      ->default_val(0)
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_flag("--profile", a.profile, "print a per-op time breakdown of the pp step, of a tg (decode) step and of a batched decode step");
  cmd->add_flag("--mmap", a.mmap, "weights memory-mapped from the file instead of a private copy on huge pages (as serve --mmap)");
}

namespace {

struct Seq {
  kv::KvSeq kv;
  int pos = 0;
  int prompt_len = 0;
};

/// Drives a Model over a paged KV cache.
struct Driver {
  model::Model& m;
  kv::KvCacheManager& kv;
  int block_size;
  int budget = 0;  // --kv-budget (0 = no eviction)
  const kv::TokenEvictionConfig* evict = nullptr;
  std::vector<float> mass;  // the step's attention-mass rows (h2o)

  bool reserve(Seq& s, int upto) { return kv.allocate_slots(s.kv, upto); }
  void release(Seq& s) {
    kv.free(s.kv);
    s.pos = 0;
  }
  /// Feeds `toks[i]` (count[i] tokens) to seqs[i] together in one forward pass; logits of
  /// each sequence's last token (in the model's workspace, valid until the next step).
  bool step(std::vector<Seq*>& seqs, const std::vector<std::vector<int32_t>>& toks, std::span<const float>& logits) {
    model::Batch b;
    // As EngineImpl::step: a token at position pos goes to slot index pos - num_evicted and
    // attends to that many + 1 entries; h2o sequences get an attention-mass row per token.
    const bool any_evicted = std::any_of(seqs.begin(), seqs.end(), [](const Seq* s) { return s->kv.num_evicted > 0; });
    const bool h2o = budget > 0 && evict->needs_attention_mass();
    size_t mass_floats = 0;
    for (size_t i = 0; i < seqs.size() && h2o; ++i)
      for (size_t j = 0; j < toks[i].size(); ++j) mass_floats += seqs[i]->pos + j - seqs[i]->kv.num_evicted + 1;
    mass.assign(mass_floats, 0.f);
    size_t mass_at = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      Seq& s = *seqs[i];
      if (!reserve(s, s.pos + static_cast<int>(toks[i].size()))) return false;
      b.block_tables.push_back(s.kv.block_table.blocks.data());
      for (int32_t t : toks[i]) {
        const int entry = s.pos - s.kv.num_evicted;
        b.tokens.push_back(t);
        b.positions.push_back(s.pos);
        b.slot_mapping.push_back(s.kv.block_table.slot(entry, block_size));
        if (any_evicted) b.n_keys.push_back(entry + 1);
        if (h2o) {
          b.attn_mass.push_back(mass.data() + mass_at);
          mass_at += entry + 1;
        }
        b.seq_ids.push_back(static_cast<int32_t>(i));
        b.gemm_order.push_back(kernels::gemm_order_flag(s.pos, s.prompt_len));
        ++s.pos;
      }
      b.logits_rows.push_back(b.n_tokens() - 1);
    }
    logits = {m.forward(b, kv.layers()), b.logits_rows.size() * static_cast<size_t>(m.config().n_vocab)};
    mass_at = 0;
    for (size_t i = 0; i < seqs.size() && budget > 0; ++i) {
      Seq& s = *seqs[i];
      for (size_t j = 0; j < toks[i].size() && h2o; ++j) {
        const int keys = s.pos - static_cast<int>(toks[i].size()) + static_cast<int>(j) - s.kv.num_evicted + 1;
        kv::add_attention_mass(s.kv.attn_mass, mass.data() + mass_at, keys);
        mass_at += keys;
      }
      if (s.pos >= s.prompt_len) kv.evict_tokens(s.kv, s.pos, *evict, budget);  // as Scheduler::on_computed
    }
    return true;
  }
  /// Puts random K/V (uniform in [-1, 1), in the cache dtype through kernels::kv_store,
  /// the model's own write path) at positions [0, n) of `s` instead of computing them;
  /// h2o gets a random accumulated mass per position. Then evicts as after a prefill.
  bool fill_random(Seq& s, int n, std::mt19937& rng) {
    if (!reserve(s, n)) return false;
    const auto& c = m.config();
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    std::vector<float> k(static_cast<size_t>(c.n_head_kv) * c.head_dim), v(k.size());
    for (const kernels::KvLayerView& layer : kv.layers())
      for (int p = 0; p < n; ++p) {
        for (auto& x : k) x = u(rng);
        for (auto& x : v) x = u(rng);
        kernels::kv_store(layer, s.kv.block_table.slot(p, block_size), k.data(), v.data());
      }
    s.pos = n;
    if (budget > 0) {
      if (evict->needs_attention_mass()) {
        s.kv.attn_mass.resize(n);
        for (auto& x : s.kv.attn_mass) x = 1.f + u(rng);
      }
      kv.evict_tokens(s.kv, n, *evict, budget);
    }
    return true;
  }
};

/// The per-op table of `prof` (summed over prof.forwards passes) per pass, in ms and % of
/// the pass; `step_secs` = the bench's own wall time per pass (the clock around step()).
void print_profile(const std::string& what, const model::OpProfile& prof, double step_secs) {
  if (prof.forwards == 0) return;
  const double per = 1e6 * static_cast<double>(prof.forwards);  // ns -> ms per pass
  const double total = static_cast<double>(prof.total_ns) / per;
  std::printf("\nprofile, %s (%lld forward passes): %.3f ms in forward(), %.3f ms per step()\n", what.c_str(),
              static_cast<long long>(prof.forwards), total, step_secs * 1e3);
  std::printf("| %-30s | %9s | %6s |\n", "op", "ms", "%");
  std::printf("|%s|%s|%s|\n", std::string(32, '-').c_str(), std::string(11, '-').c_str(), std::string(8, '-').c_str());
  for (int i = 0; i < static_cast<int>(model::Op::kCount); ++i) {
    const double ms = static_cast<double>(prof.ns[i]) / per;
    std::printf("| %-30s | %9.3f | %5.1f%% |\n", model::op_name(static_cast<model::Op>(i)), ms, 100.0 * ms / total);
  }
  const double outside = step_secs * 1e3 - total;
  std::printf("| %-30s | %9.3f | %6s |\n", "outside forward() (KV, batch)", outside, "");
}

}  // namespace

int run_bench_model(const BenchModelArgs& a) {
  auto loaded = model::Model::load(a.model, a.mmap ? gguf::FileMemory::kMmap : gguf::FileMemory::kHugePages);
  if (!loaded.ok()) {
    std::fprintf(stderr, "error: %s\n", loaded.error().c_str());
    return 1;
  }
  model::Model& m = *loaded.value();
  const auto& c = m.config();
  if (a.threads > 0) kernels::set_compute_threads(a.threads);
  const int threads = kernels::compute_threads();

  // Weight bytes one decode token reads: every 2-D tensor except the embedding table
  // (one row looked up) — unless it doubles as the output head (tied embeddings).
  const bool tied = m.file().find_tensor("output.weight") == nullptr;
  uint64_t wbytes = 0;
  for (const auto& t : m.file().tensors())
    if (t.dims.size() >= 2 && (t.name != "token_embd.weight" || tied)) wbytes += t.nbytes;

  const int bs = 16;
  int max_batch = 0;
  for (int b : a.batch) max_batch = std::max(max_batch, b);
  const int need_single = (std::max(a.p, a.depth) + a.n + 1 + bs - 1) / bs;
  const int need_batched = max_batch * ((a.batch_prompt + a.batch_steps + bs - 1) / bs);
  const int32_t num_blocks = std::max(need_single, need_batched) + 4;
  if (std::max(a.p, a.depth) + a.n + 1 > c.n_ctx)
    std::fprintf(stderr, "warning: %s + n exceeds the model's context (%d)\n", a.depth > a.p ? "depth" : "p", c.n_ctx);

  kv::KvCacheShape shape;
  shape.n_layers = c.n_layer;
  shape.n_kv_heads = c.n_head_kv;
  shape.head_dim = c.head_dim;
  shape.block_size = bs;
  shape.num_blocks = num_blocks;
  shape.dtype = a.kv_dtype;
  if (!kernels::kv_dtype_fits(a.kv_dtype, c.head_dim)) {
    std::fprintf(stderr, "error: --kv-dtype %s needs a head dimension that is a multiple of 32; this model's head_dim is %d\n",
                 kv::kv_dtype_name(a.kv_dtype), c.head_dim);
    return 1;
  }
  if (a.kv_budget > 0) {
    if (std::string why = a.evict.check(a.kv_budget); !why.empty()) {
      std::fprintf(stderr, "error: %s\n", why.c_str());
      return 1;
    }
  }
  kv::KvCacheManager kv(shape, /*prefix_caching=*/false, kv::EvictionPolicy::kLru);
  Driver d{m, kv, bs, 0, nullptr, {}};

  std::mt19937 rng(static_cast<uint32_t>(a.seed));
  std::uniform_int_distribution<int32_t> tok(0, c.n_vocab - 1);
  auto random_tokens = [&](int n) {
    std::vector<int32_t> v(n);
    for (auto& t : v) t = tok(rng);
    return v;
  };

  // Multiply-adds per token in the weight matmuls (rows x cols of the same tensors; the
  // attention's Q.K and P.V are not included): 2 ops each.
  uint64_t welems = 0;
  for (const auto& t : m.file().tensors())
    if (t.dims.size() >= 2 && (t.name != "token_embd.weight" || tied)) welems += t.dims[0] * t.dims[1];
  std::printf("model %s: %s, %d layers, n_embd %d, n_vocab %d; weights read per token %.1f MiB (%llu bytes); "
              "%.3f GOP per token in the weight matmuls\n",
              a.model.c_str(), c.arch.c_str(), c.n_layer, c.n_embd, c.n_vocab, wbytes / 1048576.0,
              static_cast<unsigned long long>(wbytes), 2.0 * static_cast<double>(welems) / 1e9);
  const std::string tiled = m.relaid_bytes() > 0 ? " (" + std::to_string(m.relaid_bytes() >> 20) + " MiB of them in 16-row tiles)" : "";
  std::printf("threads %d, weights %s%s, KV cache %s, block size %d, %d blocks\n", threads,
              a.mmap ? "memory-mapped (--mmap)" : "copied to huge pages", tiled.c_str(), kv::kv_dtype_name(a.kv_dtype), bs,
              num_blocks);
  if (a.random_kv || a.kv_budget > 0)
    std::printf("batched prompts: K/V %s; KV budget %d (%s)\n", a.random_kv ? "random (not computed)" : "prefilled", a.kv_budget,
                a.kv_budget > 0 ? kv::token_eviction_name(a.evict.policy) : "keep all");
  std::fflush(stdout);

  // The workspace for the largest step (the prompt, or the batched sequences' prompts), so
  // that no timed step allocates.
  m.reserve(std::max({1, a.p, max_batch * a.batch_prompt}), std::max(1, max_batch));
  std::span<const float> logits;
  bool finite = true;
  auto check = [&] {
    for (float x : logits)
      if (!std::isfinite(x)) { finite = false; break; }
  };
  {  // warm-up: one token touches every weight page
    Seq s;
    std::vector<Seq*> v{&s};
    d.step(v, {random_tokens(1)}, logits);
    d.release(s);
  }

  struct Row { std::string test; int tokens; double secs; };
  std::vector<Row> rows;
  struct Profiled { std::string what; model::OpProfile prof; double secs; };
  std::vector<Profiled> profiles;
  Seq main_seq;
  main_seq.prompt_len = a.p;
  if (a.p > 0) {
    std::vector<Seq*> v{&main_seq};
    model::OpProfile prof;
    if (a.profile) m.set_profile(&prof);
    const double t0 = now_seconds();
    d.step(v, {random_tokens(a.p)}, logits);
    rows.push_back({"pp" + std::to_string(a.p), a.p, now_seconds() - t0});
    m.set_profile(nullptr);
    if (a.profile) profiles.push_back({"prefill: pp" + std::to_string(a.p) + ", one step", prof, rows.back().secs});
    check();
  }
  int tg_ctx = a.p;
  if (a.depth > 0 && a.n > 0) {  // tg at a given context: random K/V instead of the prompt's
    d.release(main_seq);
    main_seq.prompt_len = a.depth;
    if (!d.fill_random(main_seq, a.depth, rng)) {
      std::fprintf(stderr, "error: KV pool too small for depth %d\n", a.depth);
      return 1;
    }
    tg_ctx = a.depth;
  }
  if (a.n > 0) {
    std::vector<Seq*> v{&main_seq};
    model::OpProfile prof;
    if (a.profile) m.set_profile(&prof);
    const double t0 = now_seconds();
    for (int i = 0; i < a.n; ++i) d.step(v, {random_tokens(1)}, logits);
    rows.push_back({"tg" + std::to_string(a.n) + (tg_ctx > 0 ? " @ ctx " + std::to_string(tg_ctx) : ""), a.n, now_seconds() - t0});
    m.set_profile(nullptr);
    if (a.profile)
      profiles.push_back({"decode: tg" + std::to_string(a.n) + " @ ctx " + std::to_string(tg_ctx) + ", per step", prof,
                          rows.back().secs / a.n});
    check();
  }
  d.release(main_seq);
  d.budget = a.kv_budget;  // the batched runs only
  d.evict = &a.evict;

  for (int B : a.batch) {
    if (B <= 0) continue;
    std::vector<Seq> seqs(B);
    std::vector<Seq*> v;
    std::vector<std::vector<int32_t>> toks;
    for (auto& s : seqs) {
      s.prompt_len = a.batch_prompt;
      v.push_back(&s);
      toks.push_back(random_tokens(a.batch_prompt));
    }
    bool placed = true;
    if (a.random_kv) {
      for (auto& s : seqs) placed = placed && d.fill_random(s, a.batch_prompt, rng);
    } else {
      placed = d.step(v, toks, logits);
    }
    if (!placed) {
      std::fprintf(stderr, "error: KV pool too small for batch %d\n", B);
      return 1;
    }
    model::OpProfile prof;
    if (a.profile) m.set_profile(&prof);
    const double t0 = now_seconds();
    for (int st = 0; st < a.batch_steps; ++st) {
      for (auto& t : toks) t = random_tokens(1);
      d.step(v, toks, logits);
    }
    const double secs = now_seconds() - t0;
    m.set_profile(nullptr);
    int held = 0;  // KV entries the sequences attend to at the end
    for (auto& s : seqs) held += s.pos - s.kv.num_evicted;
    std::printf("batch %d: context %d, %d KV entries per sequence at the end, %lld blocks in use\n", B, seqs[0].pos,
                held / B, static_cast<long long>(kv.usage().used));
    rows.push_back({"batched decode B=" + std::to_string(B) + " (" + std::to_string(a.batch_steps) + " steps)",
                    B * a.batch_steps, secs});
    if (a.profile)
      profiles.push_back({"batched decode B=" + std::to_string(B) + ", per step", prof, secs / a.batch_steps});
    check();
    for (auto& s : seqs) d.release(s);
  }

  std::printf("\n| %-34s | %7s | %8s | %9s |\n", "test", "tokens", "time s", "tok/s");
  std::printf("|%s|%s|%s|%s|\n", std::string(36, '-').c_str(), std::string(9, '-').c_str(), std::string(10, '-').c_str(),
              std::string(11, '-').c_str());
  for (const Row& r : rows)
    std::printf("| %-34s | %7d | %8.2f | %9.2f |\n", r.test.c_str(), r.tokens, r.secs, r.tokens / r.secs);
  for (const Profiled& p : profiles) print_profile(p.what, p.prof, p.secs);
  if (!finite) {
    std::fprintf(stderr, "error: non-finite logits\n");
    return 1;
  }
  return 0;
}

}  // namespace pdserve::cli
