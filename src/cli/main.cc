// pdserve: the command-line entry point. Subcommands: serve, generate, tokenize, info, bench, quantize,
// prefill, decode, router, synth, bench-model, perplexity, profile, calibrate, simulate.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <new>

#include "base/log.h"
#include "cli/commands.h"
#include "cli/parse_command_line.h"
#include "cli/planner_commands.h"
#include "cli/worker_commands.h"
#include "cli/planner_command.h"

int main(int argc, char** argv) {
  CLI::App app{"pdserve: a KV-cache-centric LLM inference server for GGUF models"};
  app.require_subcommand(1);
  app.fallthrough();  // --log-level may follow the subcommand
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error|off")
      ->default_val("info")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));

  pdserve::cli::ServeArgs serve;
  pdserve::cli::add_serve_command(app, serve);
  pdserve::cli::GenerateArgs gen;
  pdserve::cli::add_generate_command(app, gen);
  pdserve::cli::TokenizeArgs tok;
  pdserve::cli::add_tokenize_command(app, tok);
  pdserve::cli::InfoArgs info;
  pdserve::cli::add_info_command(app, info);
  pdserve::cli::BenchArgs bench;
  pdserve::cli::add_bench_command(app, bench);
  pdserve::cli::QuantizeArgs quant;
  pdserve::cli::add_quantize_command(app, quant);

  pdserve::cli::WorkerArgs prefill_worker, decode_worker;
  pdserve::cli::add_prefill_command(app, prefill_worker);
  pdserve::cli::add_decode_command(app, decode_worker);

  pdserve::cli::RouterArgs router;
  pdserve::cli::add_router_command(app, router);

  pdserve::cli::SynthArgs synth;
  pdserve::cli::add_synth_command(app, synth);
  pdserve::cli::BenchModelArgs bench_model;
  pdserve::cli::add_bench_model_command(app, bench_model);

  pdserve::cli::PerplexityArgs perplexity;
  pdserve::cli::add_perplexity_command(app, perplexity);

  std::string hash_key;
  pdserve::cli::add_hash_key_command(app, hash_key);

  pdserve::cli::PlannerArgs planner;
  pdserve::cli::add_planner_command(app, planner);
  pdserve::cli::ProfileArgs profile;
  pdserve::cli::add_profile_command(app, profile);
  pdserve::cli::CalibrateArgs calibrate;
  pdserve::cli::add_calibrate_command(app, calibrate);
  pdserve::cli::SimulateArgs simulate;
  pdserve::cli::add_simulate_command(app, simulate);

  // --log-level belongs to the top-level app, so each subcommand's --help names it too.
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
    sub->footer("Global options (before or after the subcommand):\n  --log-level TEXT            "
                "trace|debug|info|warn|error|off (default: info)");

  if (const int rc = pdserve::cli::parse_command_line(app, argc, argv); rc >= 0) return rc;
  pdserve::set_log_level(log_level);
  // An exception no command handles (memory the machine cannot give for the sizes asked, e.g.
  // --max-seqs 100000000) is a one-line error, not an abort.
  try {
    if (app.got_subcommand("serve")) return pdserve::cli::run_serve(serve);
    if (app.got_subcommand("generate")) return pdserve::cli::run_generate(gen);
    if (app.got_subcommand("tokenize")) return pdserve::cli::run_tokenize(tok);
    if (app.got_subcommand("info")) return pdserve::cli::run_info(info);
    if (app.got_subcommand("quantize")) return pdserve::cli::run_quantize(quant);
    if (app.got_subcommand("bench")) return pdserve::cli::run_bench(bench);
    if (app.got_subcommand("prefill")) return pdserve::cli::run_prefill(prefill_worker);
    if (app.got_subcommand("decode")) return pdserve::cli::run_decode(decode_worker);
    if (app.got_subcommand("router")) return pdserve::cli::run_router(router);
    if (app.got_subcommand("synth")) return pdserve::cli::run_synth(synth);
    if (app.got_subcommand("bench-model")) return pdserve::cli::run_bench_model(bench_model);
    if (app.got_subcommand("perplexity")) return pdserve::cli::run_perplexity(perplexity);
    if (app.got_subcommand("planner")) return pdserve::cli::run_planner(planner);
    if (app.got_subcommand("hash-key")) return pdserve::cli::run_hash_key(hash_key);
    if (app.got_subcommand("profile")) return pdserve::cli::run_profile(profile);
    if (app.got_subcommand("calibrate")) return pdserve::cli::run_calibrate(calibrate);
    if (app.got_subcommand("simulate")) return pdserve::cli::run_simulate(simulate);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: out of memory: a size asked for (a flag's value or a file's) is more than this machine can allocate\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 2;
}
