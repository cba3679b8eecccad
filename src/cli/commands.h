// Subcommands of the pdserve binary: their arguments, CLI registration and entry points.
// Each run_* returns the process exit code; errors are printed as one line on stderr.
#pragma once

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "loadgen/bench.h"
#include "disagg/grpc_options.h"
#include "disagg/routing_policy.h"
#include "engine/engine.h"

namespace pdserve::cli {

/// Rejects NaN and ±inf, which CLI11's Range / PositiveNumber / NonNegativeNumber let
/// through (every comparison with NaN is false). Compose: `->check(kFinite & CLI::Range(a, b))`.
inline const CLI::Validator kFinite(
    [](std::string& in) -> std::string {
      char* end = nullptr;
      const double v = std::strtod(in.c_str(), &end);
      if (end == in.c_str() || !std::isfinite(v)) return "value " + in + " is not a finite number";
      return {};
    },
    "FINITE");

/// A count: a whole number >= `min` (e.g. instances, requests). CLI11's NonNegativeNumber
/// on an int option says "Value abc not in range 0.000000 to 1797…" for a word.
inline CLI::Validator count_at_least(long long min) {
  return CLI::Validator(
      [min](std::string& in) -> std::string {
        char* end = nullptr;
        errno = 0;
        const long long v = std::strtoll(in.c_str(), &end, 10);
        if (end == in.c_str() || *end != '\0' || errno == ERANGE) return "value " + in + " is not a whole number";
        if (v < min) return "value " + in + " is below " + std::to_string(min);
        return {};
      },
      min > 0 ? "COUNT>=1" : "COUNT");
}
inline const CLI::Validator kCount = count_at_least(0);
inline const CLI::Validator kPositiveCount = count_at_least(1);

/// Adds the engine flags shared by serve and generate (model, threads, KV cache, batching).
void add_engine_options(CLI::App& cmd, engine::EngineConfig& cfg);

/// The OpenAI HTTP front of serve and router.
struct HttpArgs {
  std::string host = "127.0.0.1";
  int port = 8080;
  int http_threads = 256;
  std::string api_key;
  std::string auth_file;  // --auth-file (gateway/auth_config.h)
  size_t max_body_bytes = 8u << 20;
  double http_header_timeout = 10;
  double http_idle_timeout = 5;
  int max_connections_per_client = 256;
  int max_json_depth = 64;
  size_t max_stop_length = 256;
  int max_prompt_tokens = 0;
  int max_completion_tokens = 0;  // --max-completion-tokens (0 = up to the context end)
  size_t max_grammar_states = 1000000;  // --max-grammar-states
  std::string chat_template_file;  // --chat-template-file
  std::string chat_template_date;  // --chat-template-date YYYY-MM-DD (empty: today, UTC)
  std::string chat_template_kwargs;  // --chat-template-kwargs: a JSON object (empty: none)
};
/// Adds --host, --port, --http-threads, --api-key.
void add_http_options(CLI::App& cmd, HttpArgs& a);
/// Serves the OpenAI API over `engine` until SIGINT/SIGTERM, then shuts the engine down.
int serve_http(engine::Engine& engine, const HttpArgs& a);
/// 0 when --auth-file is unset or parses; else prints the error (naming the line) and returns 2.
int check_auth_file(const HttpArgs& a);
/// `pdserve hash-key KEY`: prints the SHA-256 hex of KEY for the auth file.
void add_hash_key_command(CLI::App& app, std::string& key);
int run_hash_key(const std::string& key);

struct ServeArgs {
  engine::EngineConfig engine;
  HttpArgs http;
};
void add_serve_command(CLI::App& app, ServeArgs& a);
int run_serve(const ServeArgs& a);

struct GenerateArgs {
  engine::EngineConfig engine;
  std::string prompt;
  int n = 64;
  float temperature = 0.f;
  float top_p = 1.f;
  int top_k = 0;
  std::optional<uint64_t> seed;
  bool ids = false;
};
void add_generate_command(CLI::App& app, GenerateArgs& a);
int run_generate(const GenerateArgs& a);

struct TokenizeArgs {
  std::string model;
  std::string text;
  bool add_bos = false;
  bool parse_special = false;
};
void add_tokenize_command(CLI::App& app, TokenizeArgs& a);
int run_tokenize(const TokenizeArgs& a);

struct InfoArgs {
  std::string model;
};
void add_info_command(CLI::App& app, InfoArgs& a);
int run_info(const InfoArgs& a);

struct BenchArgs {
  loadgen::BenchConfig cfg;
  std::vector<std::string> trace;  // --trace FORMAT FILE
  std::string json_out, plot_out;
};
void add_bench_command(CLI::App& app, BenchArgs& a);
int run_bench(BenchArgs& a);

struct QuantizeArgs {
  std::string input, output, type;
};
void add_quantize_command(CLI::App& app, QuantizeArgs& a);
int run_quantize(const QuantizeArgs& a);

struct RouterArgs {
  std::string model, model_name;
  HttpArgs http;
  std::vector<std::string> decode, decode_long, prefill;  // HOST:PORT lists (comma-separated)
  disagg::RoutingPolicyKind policy = disagg::RoutingPolicyKind::kLeastLoad;
  int long_prompt_threshold = 1024;
  int prefix_blocks = 2, block_size = 16;
  int health_interval_ms = 500;
  int max_attempts = 0;
  std::string discovery;       // --discovery etcd://HOST:PORT[/PREFIX] | dns://NAME:PORT
  disagg::GrpcTuning grpc;     // --grpc-* link settings
};
/// The --grpc-keepalive-ms, --grpc-keepalive-timeout-ms, --grpc-stream-window and
/// --grpc-bdp-probe flags (cmd_workers.cc).
void add_grpc_tuning_options(CLI::App& cmd, disagg::GrpcTuning& t);
void add_router_command(CLI::App& app, RouterArgs& a);
int run_router(const RouterArgs& a);

struct SynthArgs {
  std::string shape, type = "F16", vocab_from, output;
  uint64_t seed = 1;
  int layers = 0;  // --layers: the shape scaled down to this many blocks (0 = the shape's)
  int sliding_window = 0;  // --sliding-window: the shape's window scaled down (0 = the shape's)
  int ff = 0;  // --ff: the FFN width (each expert's, for a mixture-of-experts shape) scaled down (0 = the shape's)
};
void add_synth_command(CLI::App& app, SynthArgs& a);
int run_synth(const SynthArgs& a);

struct BenchModelArgs {
  std::string model;
  int p = 512, n = 128, threads = 0;
  std::vector<int> batch{1, 8, 32};  // batched-decode sequence counts
  int batch_prompt = 8, batch_steps = 16;
  uint64_t seed = 1;
  kernels::KvDtype kv_dtype = kernels::KvDtype::F16;  // --kv-dtype
  bool random_kv = false;  // --batch-kv random: the batched prompts' K/V written, not computed
  int kv_budget = 0;       // --kv-budget for the batched runs (0 = keep all)
  kv::TokenEvictionConfig evict;  // --kv-evict (defaults as the engine's)
  int depth = 0;         // --depth: tg after this many random KV entries (0 = after the prompt)
  bool profile = false;  // --profile: per-op time breakdown of the pp and tg steps
  bool mmap = false;     // --mmap: weights memory-mapped, not copied to huge pages (as serve's flag)
};
void add_bench_model_command(CLI::App& app, BenchModelArgs& a);
int run_bench_model(const BenchModelArgs& a);

/// `pdserve perplexity` (cmd_perplexity.cc): NLL per token under token eviction.
struct PerplexityArgs {
  std::string model;
  int texts = 20, tokens = 512, threads = 0;
  uint64_t seed = 1;
  std::vector<double> budgets{0.5, 0.2, 0.1};  // fractions of `tokens`
  kernels::KvDtype kv_dtype = kernels::KvDtype::F16;
  kv::TokenEvictionConfig evict;
};
void add_perplexity_command(CLI::App& app, PerplexityArgs& a);
int run_perplexity(const PerplexityArgs& a);

}  // namespace pdserve::cli
