// `pdserve profile`: measures the engine's cost model (planner/profiler.h) and writes it
// as "pdserve-profile-v1" JSON (planner/profile.h).
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>

#include "cli/choice_option.h"
#include "cli/commands.h"
#include "cli/planner_commands.h"
#include "planner/calibrate.h"
#include "planner/plan_observer.h"

namespace pdserve::cli {

namespace {

/// Writes `p` as JSON to `output` ("" or "-": stdout). True when written to a file; throws
/// std::runtime_error when the file cannot be written.
bool write_profile(const planner::Profile& p, const std::string& output) {
  const std::string text = planner::profile_to_json(p);
  if (output.empty() || output == "-") {
    std::fputs(text.c_str(), stdout);
    return false;
  }
  std::ofstream f(output, std::ios::binary);
  f << text;
  if (!f.flush()) throw std::runtime_error("cannot write " + output);
  return true;
}

}  // namespace

void add_profile_command(CLI::App& app, ProfileArgs& a) {
  CLI::App* cmd = app.add_subcommand("profile", "measure the engine's prefill / decode / KV-transfer times into a JSON profile");
  engine::EngineConfig& e = a.opts.engine;
  cmd->add_option("-m,--model", e.model_path, "GGUF model")->required();
  cmd->add_option("-t,--threads", e.threads, "compute threads (default: all cores)")->check(CLI::Range(0, 1024));
  cmd->add_option("--block-size", e.block_size, "tokens per KV block")->default_val(16)->check(CLI::Range(1, 1024));
  add_choice_option(*cmd, "--kv-dtype", e.kv_dtype, kv_dtype_choices(), "KV cache dtype", "f16");
  cmd->add_option("--max-batched-tokens", e.max_batched_tokens, "token budget per engine step")->default_val(2048)->check(CLI::Range(1, 1 << 30));
  cmd->add_option("--max-seqs", e.max_seqs, "running sequences per step")->default_val(64)->check(CLI::Range(1, 1 << 30));
  cmd->add_option("--ctx-size", e.ctx_size, "context length (default: the model's)")->check(CLI::Range(0, 1 << 30));
  cmd->add_option("-o,--output", a.output, "write the profile here (default: stdout)");
  cmd->add_option("--chunks", a.opts.chunks, "prefill chunk sizes (tokens)")->delimiter(',');
  cmd->add_option("--cached", a.opts.cached, "cached prefix lengths of the prefill points (tokens)")->delimiter(',');
  cmd->add_option("--batches", a.opts.batches, "decode batch sizes")->delimiter(',');
  cmd->add_option("--contexts", a.opts.contexts, "decode context lengths (tokens)")->delimiter(',');
  cmd->add_option("--transfer-bytes", a.opts.transfer_bytes, "KV transfer sizes (bytes)")->delimiter(',');
  cmd->add_option("--repeats", a.opts.repeats, "runs per point (the median is kept)")->default_val(3)->check(CLI::Range(1, 100));
  cmd->add_option("--frontend-requests", a.opts.frontend_requests,
                  "streamed requests through an in-process HTTP server measuring the per-request cost outside the engine "
                  "(0: not measured)")
      ->default_val(8)
      ->check(CLI::Range(0, 10000));
  cmd->add_option("--idle-gap", a.opts.idle_gap_seconds,
                  "seconds the engine sits idle before each prefill/decode sample (0: back to back); a server at a low "
                  "request rate starts each request after such a gap")
      ->default_val(0)
      ->check(CLI::Range(0.0, 60.0));
  cmd->add_flag("--quick", a.quick, "a small grid (a few seconds; for tests)");
}

int run_profile(ProfileArgs& a) {
  planner::ProfileOptions& o = a.opts;
  if (a.quick) {
    o.chunks = {16, 32, 64, 128, 256};
    o.cached = {0, 128};
    o.batches = {1, 2, 4, 8};
    o.contexts = {32, 256};
    o.decode_steps = 24;
    o.transfer_bytes = {64 << 10, 1 << 20};
  }
  o.engine.prefix_cache = true;
  if (!a.output.empty() && a.output != "-" && !std::ofstream(a.output, std::ios::binary | std::ios::app)) {
    std::fprintf(stderr, "error: -o %s: cannot open for writing\n", a.output.c_str());  // before minutes of measuring
    return 1;
  }
  o.progress = [](const std::string& s) { std::fprintf(stderr, "profile: %s\n", s.c_str()); };
  try {
    planner::Profile p = planner::measure_profile(o);
    if (write_profile(p, a.output))
      std::fprintf(stderr, "profile: wrote %s (%zu prefill, %zu decode, %zu transfer points)\n", a.output.c_str(),
                   p.prefill.size(), p.decode.size(), p.transfer.size());
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "error: %s\n", ex.what());
    return 1;
  }
  return 0;
}

void add_calibrate_command(CLI::App& app, CalibrateArgs& a) {
  CLI::App* cmd = app.add_subcommand(
      "calibrate", "scale a profile to the live step timings of a running serve or worker (GET URL/engine/steps)");
  cmd->add_option("--profile", a.profile, "profile JSON written by `pdserve profile` (or an earlier calibrate)")->required();
  cmd->add_option("--url", a.url, "the engine: http://HOST:PORT of serve, or of a worker's --metrics-port")->required();
  cmd->add_option("-o,--output", a.output, "write the calibrated profile here (default: stdout)");
  cmd->add_option("--since", a.since, "use only steps after this step number (the last one used is printed)");
  cmd->add_option("--min-steps", a.min_steps, "fewest steps of a kind (decode, prefill) for its scale to change")
      ->default_val(5)
      ->check(CLI::Range(1, 1 << 30));
}

int run_calibrate(CalibrateArgs& a) {
  try {
    planner::Profile p = planner::load_profile(a.profile);
    std::string base = a.url;
    while (!base.empty() && base.back() == '/') base.pop_back();  // http://H:P/ as bench takes it
    const std::string url = base + "/engine/steps?since=" + std::to_string(a.since);
    auto body = planner::http_get(url, 10.0);
    if (!body.ok()) throw std::runtime_error(body.error());
    const auto steps = planner::parse_engine_steps(body.value(), p, base + "/engine/steps");
    const planner::CalibrationResult r = planner::calibrate_profile(p, steps, a.min_steps);
    auto scale = [&](bool fitted, double x) {
      char b[96];
      if (fitted) std::snprintf(b, sizeof(b), "scale %.3f", x);
      else std::snprintf(b, sizeof(b), "fewer than --min-steps %d: not scaled", a.min_steps);
      return std::string(b);
    };
    std::fprintf(stderr, "calibrate: %d decode steps (%s), %d prefill steps (%s), %d mixed steps not used; last step %llu\n",
                 r.decode_steps, scale(r.decode_scale_fitted, r.decode_scale).c_str(), r.prefill_steps,
                 scale(r.prefill_scale_fitted, r.prefill_scale).c_str(), r.mixed_steps,
                 static_cast<unsigned long long>(r.last_seq));
    write_profile(p, a.output);
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "error: %s\n", ex.what());
    return 1;
  }
  return 0;
}

}  // namespace pdserve::cli
