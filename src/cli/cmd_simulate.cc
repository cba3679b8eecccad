// `pdserve simulate`: replays a trace (or a synthetic load) through simulated instances
// (planner/simulator.h) with a measured profile, and prints `pdserve bench`'s report.
#include <chrono>
#include <cstdio>

#include "cli/choice_option.h"
#include "cli/commands.h"
#include "cli/planner_commands.h"
#include "gguf/gguf.h"
#include "loadgen/prompt_synth.h"
#include "loadgen/report.h"
#include "tokenizer/tokenizer.h"

namespace pdserve::cli {

void add_simulate_command(CLI::App& app, SimulateArgs& a) {
  CLI::App* cmd = app.add_subcommand("simulate", "replay a trace through simulated prefill/decode or colocated instances using a measured profile");
  loadgen::BenchConfig& c = a.bench;
  planner::SimConfig& s = a.sim;
  cmd->add_option("--profile", a.profile, "profile JSON written by `pdserve profile`")->required();
  cmd->add_option("-m,--model,--tokenizer", c.tokenizer,
                  "GGUF model the profile is for (its vocab sizes the prompts, as bench's --tokenizer)")->required();
  // Workload, as `pdserve bench`.
  CLI::Option* trace = cmd->add_option("--trace", a.trace, "replay a trace: FORMAT FILE, FORMAT = mooncake | azure")->expected(2);
  cmd->add_option("--time-scale", c.scaling.time_scale, "multiply trace arrival times by this")->default_val(1.0)->check(kFinite & CLI::PositiveNumber);
  cmd->add_option("--length-scale", c.scaling.length_scale, "multiply trace input/output lengths by this")->default_val(1.0)->check(kFinite & CLI::PositiveNumber);
  cmd->add_option("--max-input", c.scaling.max_input, "cap on prompt tokens, BOS included (0 = none)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-output", c.scaling.max_output, "cap on output tokens (0 = none)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-requests", c.scaling.max_requests, "replay at most N requests")->check(CLI::NonNegativeNumber);
  cmd->add_option("--duration", c.scaling.duration_s, "seconds: only requests arriving before it")->check(kFinite & CLI::NonNegativeNumber);
  cmd->add_option("--rate", c.rate, "synthetic: Poisson arrivals at R requests/s (0 = all at once)")->check(kFinite & CLI::NonNegativeNumber)->excludes(trace);
  cmd->add_option("--input-len", c.input_len, "synthetic prompt tokens: N | uniform:LO:HI | normal:MEAN:STD | exp:MEAN")->default_val("128");
  cmd->add_option("--output-len", c.output_len, "synthetic output tokens")->default_val("128");
  cmd->add_option("--seed", c.seed, "seed for synthetic arrivals/lengths")->default_val(0);
  cmd->add_option("--slo-ttft", c.slo.ttft_ms, "goodput SLO: time to first token, ms")->check(kFinite & CLI::NonNegativeNumber);
  cmd->add_option("--slo-tpot", c.slo.tpot_ms, "goodput SLO: time per output token, ms")->check(kFinite & CLI::NonNegativeNumber);
  cmd->add_option("--json", a.json_out, "write the JSON report (bench's format) here");
  // Instances.
  cmd->add_option("--prefill", s.prefill, "prefill instances")->default_val(0)->check(CLI::Range(0, 100000));
  cmd->add_option("--decode", s.decode, "decode instances")->default_val(0)->check(CLI::Range(0, 100000));
  cmd->add_option("--colocated", s.colocated, "colocated (serve) instances, instead of --prefill/--decode")->default_val(0)->check(CLI::Range(0, 100000));
  // Policies, as the router and the workers take them.
  add_choice_option(*cmd, "--policy", s.routing.kind, routing_choices(), "router policy over the decode/colocated instances", "least_load");
  cmd->add_option("--long-prompt-threshold", s.routing.long_prompt_threshold, "length policy: prompts longer than this are long")->default_val(1024);
  cmd->add_option("--prefix-blocks", s.routing.prefix_blocks, "prefix_affinity: leading blocks hashed")->default_val(2)->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--remote-prefill-threshold", s.remote_prefill_threshold,
                  "decode: uncached prompt tokens at or below which it prefills locally")->default_val(0)->check(CLI::Range(0, 1 << 30));
  // Every instance's engine flags (as serve / decode / prefill take them).
  cmd->add_option("--block-size", s.instance.block_size, "tokens per KV block")->default_val(16)->check(CLI::Range(1, 1024));
  add_choice_option(*cmd, "--kv-dtype", a.kv_dtype, kv_dtype_choices(), "KV cache dtype of the instances", "f16");
  cmd->add_option("--num-kv-blocks", s.instance.num_kv_blocks, "KV cache size in blocks (default: as the engine derives it)")->check(CLI::Range(1, 1 << 30));
  cmd->add_option("--max-batched-tokens", s.instance.max_batched_tokens, "token budget per engine step")->default_val(2048)->check(CLI::Range(1, 1 << 30));
  cmd->add_option("--max-seqs", s.instance.max_seqs, "running sequences per step")->default_val(64)->check(CLI::Range(1, 1 << 30));
  cmd->add_option("--ctx-size", s.instance.ctx_size, "context length (default: the profile's)")->check(CLI::Range(0, 1 << 30));
  cmd->add_flag("--no-prefix-cache{false}", s.instance.prefix_cache, "turn the radix prefix cache off");
  cmd->add_option("--long-prefill-threshold", s.instance.long_prefill_threshold, "max prompt tokens of one request per step (0 = the budget)")->check(CLI::Range(0, 1 << 30));
  add_choice_option(*cmd, "--scheduling-policy", s.instance.policy, scheduling_choices(), "fcfs or priority", "fcfs");
}

int run_simulate(SimulateArgs& a) {
  loadgen::BenchConfig& c = a.bench;
  if (!a.trace.empty()) {
    c.trace_format = a.trace[0];
    c.trace_path = a.trace[1];
  }
  try {
    planner::Profile profile = planner::load_profile(a.profile);
    engine::EngineConfig ec;
    ec.model_path = c.tokenizer;
    ec.kv_dtype = a.kv_dtype;
    ec.block_size = a.sim.instance.block_size;
    planner::ProfileModel actual = planner::describe_model(ec);
    planner::check_profile_matches(profile, actual);
    a.sim.routing.block_size = a.sim.instance.block_size;
    if (a.sim.instance.ctx_size <= 0 && profile.model.n_ctx <= 0) a.sim.instance.ctx_size = actual.n_ctx;

    auto file = gguf::GgufFile::open(c.tokenizer);
    if (!file.ok()) throw std::runtime_error(file.error());
    auto tok = tokenizer::Tokenizer::from_gguf(*file.value());
    if (!tok.ok()) throw std::runtime_error(c.tokenizer + ": " + tok.error());
    auto synth = loadgen::PromptSynthesizer::create(*tok.value(), c.seed);
    if (!synth.ok()) throw std::runtime_error(synth.error());
    auto wl = loadgen::build_workload(c, synth.value().min_tokens());
    if (!wl.ok()) throw std::runtime_error(wl.error());
    const loadgen::Workload& w = wl.value();
    const auto& v = tok.value()->vocab();
    const int32_t bos = v.add_bos && v.bos_id >= 0 ? v.bos_id : 3;
    std::vector<planner::SimRequest> reqs;
    reqs.reserve(w.items.size());
    for (size_t i = 0; i < w.items.size(); ++i) {
      const loadgen::WorkItem& it = w.items[i];
      reqs.push_back({it.arrival_s,
                      planner::synth_prompt(static_cast<int64_t>(i), it.input_len, it.hash_ids, w.block_tokens,
                                            actual.n_vocab, bos),
                      static_cast<int>(it.output_len)});
    }

    const auto t0 = std::chrono::steady_clock::now();
    planner::SimResult res = planner::simulate(profile, a.sim, reqs, *tok.value());
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    loadgen::BenchReport rep;
    rep.config = c;
    const planner::SimConfig& s = a.sim;
    rep.config.url = "simulated " + (s.colocated > 0 ? std::to_string(s.colocated) + " colocated"
                                                      : std::to_string(s.prefill) + "P+" + std::to_string(s.decode) + "D") +
                     " (profile " + a.profile + ", policy " + disagg::name(s.routing.kind) + ")";
    rep.config.endpoint = "";
    rep.workload = w.description;
    rep.block_tokens = w.block_tokens;
    if (w.block_tokens > 0) rep.prefix = loadgen::ideal_prefix_hits(w);
    for (const auto& it : w.items) {
      rep.expected_input.push_back(it.input_len);
      rep.expected_output.push_back(it.output_len);
    }
    rep.records = std::move(res.records);
    rep.started_at = "- (virtual clock)";
    rep.summary = loadgen::summarize_run(rep.records, rep.expected_input, c.slo);
    std::fputs(loadgen::format_table(rep).c_str(), stdout);
    // What the simulation itself saw.
    double busy[3] = {0, 0, 0};
    int count[3] = {0, 0, 0};
    int64_t preempt = 0, q = 0, h = 0;
    for (const auto& in : res.instances) {
      const int k = in.role == "prefill" ? 1 : in.role == "decode" ? 2 : 0;
      busy[k] += in.busy_s;
      count[k]++;
      preempt += in.preemptions;
      q += in.prefix_queries;
      h += in.prefix_hits;
    }
    const double dur = rep.summary.duration_s > 0 ? rep.summary.duration_s : 1;
    const char* names[3] = {"colocated", "prefill", "decode"};
    for (int k = 0; k < 3; ++k)
      if (count[k])
        std::printf("%-34s %.1f%%  (%d instances)\n", (std::string("Busy, ") + names[k]).c_str(),
                    100.0 * busy[k] / (count[k] * dur), count[k]);
    std::printf("%-34s %lld remote / %lld local, %.1f MiB KV moved\n", "Prefills", (long long)res.remote_prefills,
                (long long)res.local_prefills, res.kv_bytes_transferred / 1048576.0);
    std::printf("%-34s %.1f%%  (%lld preemptions)\n", "Prefix-cache hit ratio", q ? 100.0 * h / q : 0.0, (long long)preempt);
    std::printf("%-34s %.2f s  (%lld events)\n", "Simulation wall time", wall, (long long)res.events);
    std::fflush(stdout);
    if (!a.json_out.empty()) {
      Status st = loadgen::write_json(rep, a.json_out);
      if (!st.ok()) {
        std::fprintf(stderr, "error: %s\n", st.message().c_str());
        return 1;
      }
    }
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "error: %s\n", ex.what());
    return 1;
  }
  return 0;
}

}  // namespace pdserve::cli
