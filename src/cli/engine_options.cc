#include "cli/choice_option.h"
#include "cli/commands.h"
#include "kv/redis_store.h"

namespace pdserve::cli {

void add_engine_options(CLI::App& cmd, engine::EngineConfig& cfg) {
  cmd.add_option("-m,--model", cfg.model_path, "GGUF model file")->required();
  cmd.add_option("--model-name", cfg.model_name, "model id reported by the API (default: file stem)");
  cmd.add_option("-t,--threads", cfg.threads, "compute threads (default: all cores)")->check(CLI::Range(0, 1024));
  cmd.add_flag("--mmap", cfg.mmap,
               "keep the weights memory-mapped from the file (shared page cache, 4 KiB pages) instead of a private "
               "copy on transparent huge pages (the default: faster decode, the file's size in private memory)");
  cmd.add_option("--block-size", cfg.block_size, "tokens per KV block")->default_val(16)->check(CLI::Range(1, 1024));
  auto* mb = cmd.add_option("--kv-cache-mb", cfg.kv_cache_mb, "KV cache size in MiB")->check(CLI::Range(1, 1 << 30));
  cmd.add_option("--num-kv-blocks", cfg.num_kv_blocks, "KV cache size in blocks")->check(CLI::Range(1, 1 << 30))->excludes(mb);
  add_choice_option(cmd, "--kv-dtype", cfg.kv_dtype, kv_dtype_choices(), "KV cache dtype: f16, f32, bf16, q8_0 or q4_0 (q8_0/q4_0: head_dim a multiple of 32)", "f16");
  cmd.add_option("--max-batched-tokens", cfg.max_batched_tokens, "token budget per engine step")->default_val(2048)->check(CLI::Range(1, 1 << 30));
  cmd.add_option("--max-seqs", cfg.max_seqs, "running sequences per step")->default_val(64)->check(CLI::Range(1, 1 << 30));
  cmd.add_option("--ctx-size", cfg.ctx_size, "context length (default: the model's)")->check(CLI::Range(0, 1 << 30));
  cmd.add_flag("--no-prefix-cache{false}", cfg.prefix_cache, "turn the radix prefix cache off");
  add_choice_option(cmd, "--eviction", cfg.eviction, eviction_choices(), "prefix-cache eviction: lru or lfu", "lru");
  cmd.add_option("--max-cache-salts", cfg.max_cache_salts,
                 "distinct cache_salt values of unfinished requests (429 for a new one beyond) and salted "
                 "prefix-cache namespaces kept (idle ones evicted, least recently used first); 0 = no cap")
      ->default_val(4096)
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  cmd.add_option("--long-prefill-threshold", cfg.long_prefill_threshold,
                 "max prompt tokens of one request per step (0 = the whole budget)")->check(CLI::Range(0, 1 << 30));
  add_choice_option(cmd, "--scheduling-policy", cfg.scheduling_policy, scheduling_choices(),
                    "fcfs or priority (request field 'priority', lower first)", "fcfs");
  cmd.add_option("--fault-step-delay-ms", cfg.fault_step_delay_ms,
                 "testing: sleep this long after each engine step (slows generation down; aborts and "
                 "shutdown wait for the sleep in progress)")
      ->check(CLI::Range(0, 1000));
  cmd.add_option("--request-timeout", cfg.request_timeout_s, "abort requests running longer than this (seconds, 0 = never)")
      ->check(kFinite & CLI::Range(0.0, 1e9));
  // Per-sequence token eviction (kv/token_eviction.h).
  cmd.add_option("--kv-budget", cfg.kv_budget, "KV tokens kept per sequence (0 = keep all); see --kv-evict")
      ->default_val(0)->check(CLI::Range(0, 1 << 30));
  add_choice_option(cmd, "--kv-evict", cfg.kv_evict.policy, kv_evict_choices(),
                    "token eviction under --kv-budget: h2o (sinks + recent + heavy hitters) or streaming (sinks + recent)", "h2o");
  cmd.add_option("--kv-sinks", cfg.kv_evict.sinks, "leading tokens (attention sinks) always kept under --kv-budget")
      ->default_val(4)->check(CLI::Range(0, 1 << 30));
  cmd.add_option_function<std::string>(
         "--kv-recent",
         [&cfg](const std::string& v) {
           // A count of tokens, or (with a '.') a ratio of the budget in [0, 1).
           if (v.find('.') != std::string::npos) {
             cfg.kv_evict.recent = -1;
             cfg.kv_evict.recent_ratio = std::stod(v);
           } else {
             cfg.kv_evict.recent = std::stoi(v);
           }
         },
         "h2o recent window under --kv-budget: tokens (e.g. 64) or a ratio of the budget (e.g. 0.5, the default)")
      ->check([](const std::string& v) -> std::string {
        char* end = nullptr;
        const bool ratio = v.find('.') != std::string::npos;
        const double x = std::strtod(v.c_str(), &end);
        if (end == v.c_str() || *end != '\0' || !std::isfinite(x)) return v + " is not a number";
        if (ratio ? (x < 0 || x >= 1) : (x < 0 || x > (1 << 30) || x != std::floor(x)))
          return v + " must be a token count >= 0 or a ratio in [0, 1)";
        return {};
      });
  // Speculative decoding (engine/spec_proposer.h): outputs stay those of plain decoding.
  CLI::Option* spec = add_choice_option(cmd, "--speculative", cfg.spec.method, spec_choices(),
                    "speculative decoding proposer: off, ngram (prompt lookup), layerskip (--draft-layers) or draft (--draft-model)", "off");
  // The proposer's knobs without a proposer are a usage error ("--spec-k requires --speculative"),
  // not silently ignored.
  cmd.add_option("--spec-k", cfg.spec.k, "most tokens proposed per sequence and step")->default_val(4)->check(CLI::Range(1, 64))->needs(spec);
  cmd.add_flag("--no-spec-adaptive{false}", cfg.spec.adaptive, "keep k fixed (no backoff when proposals are rejected)")->needs(spec);
  cmd.add_option("--spec-ngram-min", cfg.spec.ngram_min, "ngram: shortest suffix matched")->default_val(1)->check(CLI::Range(1, 1 << 20))->needs(spec);
  cmd.add_option("--spec-ngram-max", cfg.spec.ngram_max, "ngram: longest suffix matched")->default_val(4)->check(CLI::Range(1, 1 << 20))->needs(spec);
  cmd.add_option("--draft-layers", cfg.spec.draft_layers, "layerskip: layers of the model that propose")->needs(spec);
  cmd.add_option("--draft-model", cfg.spec.draft_model, "draft: GGUF of the proposing model (same vocabulary)")->needs(spec);
  // KV store tiers below the pool (kv/kv_tiers.h).
  auto* dir = cmd.add_option("--kv-offload-dir", cfg.kv_tiers.offload_dir,
                             "disk tier: keep prompt KV blocks in this directory (shared by restarts)");
  cmd.add_option_function<double>(
         "--kv-offload-gb", [&cfg](double gb) { cfg.kv_tiers.offload_bytes = static_cast<int64_t>(gb * (1 << 30)); },
         "size bound of --kv-offload-dir in GiB (default 10; least recently used blocks are deleted)")
      ->check(kFinite & CLI::Range(1e-6, 1e6))->needs(dir);
  // A malformed URL is a usage error, reported before the model loads (the engine opens the
  // tier only after loading it). CLI11 prefixes the message with the flag's name.
  cmd.add_option("--kv-store", cfg.kv_tiers.store_url, "shared tier: a Redis server, redis://HOST:PORT[/DB]")
      ->check(CLI::Validator(
          [](std::string& url) -> std::string {
            auto parsed = kv::parse_redis_url(url);
            if (parsed.ok()) return {};
            std::string why = parsed.error();
            const std::string flag = "--kv-store ";
            return why.rfind(flag, 0) == 0 ? why.substr(flag.size()) : why;
          },
          "URL"));
  cmd.add_option("--kv-store-timeout-ms", cfg.kv_tiers.timeout_ms, "timeout of one --kv-store call (ms)")
      ->default_val(200)->check(CLI::Range(1, 1 << 30));
  cmd.add_option("--kv-restore", cfg.kv_tiers.restore,
                 "use the blocks a tier already holds (warm restart); false: start the disk tier empty")->default_val(true);
  cmd.add_option("--kv-snapshot-interval", cfg.kv_tiers.snapshot_interval_s,
                 "seconds between snapshots of the disk tier's index (0 = at shutdown only)")
      ->default_val(0)->check(kFinite & CLI::Range(0.0, 1e9));
}

}  // namespace pdserve::cli
