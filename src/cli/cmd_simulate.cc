// `pdserve simulate`: replays a trace (or a synthetic load) through simulated instances
// (planner/simulator.h) with a measured profile, and prints `pdserve bench`'s report.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "cli/choice_option.h"
#include "cli/commands.h"
#include "cli/planner_commands.h"
#include "gguf/gguf.h"
#include "loadgen/prompt_synth.h"
#include "loadgen/report.h"
#include "planner/mip_goodput.h"
#include "planner/plan_controller.h"
#include "planner/plan_profile_cost.h"
#include "planner/sim_planner.h"
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
  cmd->add_option("--max-input", c.scaling.max_input, "cap on prompt tokens, BOS included (0 = none)")->check(kCount);
  cmd->add_option("--max-output", c.scaling.max_output, "cap on output tokens (0 = none)")->check(kCount);
  cmd->add_option("--max-requests", c.scaling.max_requests, "replay at most N requests")->check(kCount);
  cmd->add_option("--duration", c.scaling.duration_s, "seconds: only requests arriving before it")->check(kFinite & CLI::NonNegativeNumber);
  cmd->add_option("--rate", c.rate, "synthetic: Poisson arrivals at R requests/s (0 = all at once)")->check(kFinite & CLI::NonNegativeNumber)->excludes(trace);
  cmd->add_option("--input-len", c.input_len, "synthetic prompt tokens: N | uniform:LO:HI | normal:MEAN:STD | exp:MEAN")->default_val("128");
  cmd->add_option("--output-len", c.output_len, "synthetic output tokens")->default_val("128");
  cmd->add_option("--seed", c.seed, "seed for synthetic arrivals/lengths")->default_val(0);
  cmd->add_option("--slo-ttft", c.slo.ttft_ms, "goodput SLO: time to first token, ms")->check(kFinite & CLI::NonNegativeNumber);
  cmd->add_option("--slo-tpot", c.slo.tpot_ms, "goodput SLO: time per output token, ms")->check(kFinite & CLI::NonNegativeNumber);
  cmd->add_option("--json", a.json_out, "write the JSON report (bench's format) here");
  // Instances.
  CLI::Option* pre = cmd->add_option("--prefill", s.prefill, "prefill instances")->default_val(0)->check(kCount);
  CLI::Option* dec = cmd->add_option("--decode", s.decode, "decode instances")->default_val(0)->check(kCount);
  CLI::Option* col = cmd->add_option("--colocated", s.colocated, "colocated (serve) instances, instead of --prefill/--decode")->default_val(0)->check(kCount);
  // The planner chooses the instances (planner/sim_planner.h).
  CLI::Option* plan = cmd->add_option("--plan", a.plan_budget,
                                      "let the planner (GLPK MIP) choose the fleet within BUDGET instances for this workload's rate, "
                                      "lengths and the --slo-* targets, then simulate it")
                          ->check(kPositiveCount)->excludes(pre)->excludes(dec)->excludes(col);
  cmd->add_option("--replan-interval", a.replan_interval,
                  "with --plan: re-plan every S virtual seconds from the simulated router's counters (elastic fleet)")
      ->check(kFinite & CLI::PositiveNumber)->needs(plan);
  cmd->add_option("--report-interval", a.report_interval, "print SLO attainment per S seconds of arrivals (default: --replan-interval)")
      ->check(kFinite & CLI::PositiveNumber);
  cmd->add_option("--headroom", a.headroom, "--plan: plan for the (forecast) rate x (1 + headroom)")
      ->default_val(0.2)->check(kFinite & CLI::Range(0.0, 10.0))->needs(plan);
  cmd->add_option("--scale-down-after", a.scale_down_after, "--replan-interval: intervals a smaller plan must suffice before scaling down")
      ->default_val(3)->check(CLI::Range(1, 1000000))->needs(plan);
  cmd->add_option("--window", a.window, "--replan-interval: intervals of the rate forecast")->default_val(5)->check(CLI::Range(1, 1000000))->needs(plan);
  cmd->add_option("--min-prefill", a.min_prefill, "--plan: prefill instances at least")->default_val(0)->check(CLI::Range(0, 100000))->needs(plan);
  cmd->add_option("--min-decode", a.min_decode, "--plan: decode instances at least")->default_val(1)->check(CLI::Range(1, 100000))->needs(plan);
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

namespace {

// The per-interval table (--report-interval, or the elastic fleet's --replan-interval):
// requests arriving in each interval and the share within SLO, and with the elastic
// fleet the planner's decision at the interval's start. Returns it as JSON rows.
nlohmann::json print_intervals(const SimulateArgs& a, const loadgen::BenchReport& rep, const planner::SimPlanner* elastic) {
  nlohmann::json rows = nlohmann::json::array();
  const double step = a.report_interval > 0 ? a.report_interval : a.replan_interval;
  if (!(step > 0) || rep.records.empty()) return rows;
  const double t0 = rep.records.front().arrival_s;
  const auto att = planner::interval_attainment(rep.records, rep.expected_input, a.bench.slo, t0, step);
  std::printf("%s\n", elastic ? "Per interval (t: start, s; the plan in force from t; SLO met: of the requests arriving in it)"
                              : "Per interval (t: start, s; SLO met: of the requests arriving in it)");
  std::printf("%6s %9s %8s%s %8s\n", "t", "arrivals", "req/s", elastic ? "  forecast  action      P+D  threshold  predicted" : "", "SLO met");
  double inst_s = 0;
  for (size_t k = 0; k < att.size(); ++k) {
    nlohmann::json row = {{"t", k * step}, {"arrivals", att[k].arrivals}, {"rate", att[k].arrivals / step},
                          {"slo_attainment", att[k].share()}};
    std::string mid;
    if (elastic) {
      // The decision in force over [t0 + k·step, …) when the two intervals coincide.
      const planner::SimPlanner::Row* r = nullptr;
      for (const auto& x : elastic->rows())
        if (x.time_s <= t0 + k * step + 1e-9) r = &x;
      if (r) {
        const planner::PlanResult& p = r->decision.plan;
        char buf[160];
        std::snprintf(buf, sizeof buf, "  %8.2f  %-10s %2d+%-3d %9s  %8.1f%%", r->forecast_rate, planner::action_name(r->decision.action),
                      p.prefill, p.decode,
                      p.prefill == 0 ? "local" : std::isinf(p.threshold) ? "inf" : std::to_string((long long)p.threshold).c_str(),
                      100 * p.attainment());
        mid = buf;
        row["prefill"] = p.prefill;
        row["decode"] = p.decode;
        row["action"] = planner::action_name(r->decision.action);
        row["forecast_rate"] = r->forecast_rate;
        row["threshold"] = std::isinf(p.threshold) ? nlohmann::json("inf") : nlohmann::json(p.threshold);
        row["predicted_attainment"] = p.attainment();
        inst_s += p.instances() * step;
      }
    }
    std::printf("%6.0f %9lld %8.2f%s %7.1f%%\n", k * step, (long long)att[k].arrivals, att[k].arrivals / step, mid.c_str(),
                100 * att[k].share());
    rows.push_back(row);
  }
  if (elastic) std::printf("%-34s %.0f  (mean %.2f instances)\n", "Instance-seconds (plan in force)", inst_s, inst_s / (att.size() * step));
  return rows;
}

}  // namespace

int run_simulate(SimulateArgs& a) {
  loadgen::BenchConfig& c = a.bench;
  // Usage errors: one line, exit 2, as the parser's own.
  auto usage = [](const std::string& what) {
    std::fprintf(stderr, "error: %s (see 'pdserve simulate --help')\n", what.c_str());
    return 2;
  };
  const planner::SimConfig& sc = a.sim;
  if (a.plan_budget == 0 && sc.colocated > 0 && (sc.prefill > 0 || sc.decode > 0)) return usage("--colocated excludes --prefill/--decode");
  if (a.plan_budget == 0 && sc.colocated == 0 && sc.decode == 0)
    return usage(sc.prefill > 0 ? "disaggregated serving needs --decode >= 1"
                                : "no instances: give --colocated K, --prefill N --decode M, or --plan BUDGET");
  if (a.plan_budget > 0 && !c.slo.set()) return usage("--plan needs the SLO it plans for: --slo-ttft and/or --slo-tpot");
  if (a.plan_budget > 0 && a.min_prefill + a.min_decode > a.plan_budget)
    return usage("infeasible budget: --plan " + std::to_string(a.plan_budget) + " cannot hold --min-prefill " +
                 std::to_string(a.min_prefill) + " + --min-decode " + std::to_string(a.min_decode) + " instances");
  planner::Profile profile;
  try {  // a profile that cannot be read or parsed is a bad file, not a usage error: exit 1 (as `pdserve planner`)
    profile = planner::load_profile(a.profile);
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "error: %s\n", ex.what());
    return 1;
  }
  if (!a.trace.empty()) {
    c.trace_format = a.trace[0];
    c.trace_path = a.trace[1];
  }
  try {
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

    // --plan: the planner chooses the fleet (once, or every --replan-interval).
    planner::ProfileCostModel cost(profile);
    std::unique_ptr<planner::SimPlanner> elastic;
    nlohmann::json plan_json;
    std::string plan_line;
    if (a.plan_budget > 0) {
      planner::PlanInput in;
      in.cost = &cost;
      const planner::SimInstanceConfig& ic = a.sim.instance;
      in.shape.chunk_tokens = ic.long_prefill_threshold > 0 ? std::min(ic.long_prefill_threshold, ic.max_batched_tokens) : ic.max_batched_tokens;
      in.shape.max_seqs = ic.max_seqs;
      in.budget = a.plan_budget;
      in.min_prefill = a.min_prefill;
      in.min_decode = a.min_decode;
      const double ttft_s = c.slo.ttft_ms > 0 ? c.slo.ttft_ms / 1000 : 1e6, tpot_s = c.slo.tpot_ms > 0 ? c.slo.tpot_ms / 1000 : 1e6;
      if (a.replan_interval > 0) {
        auto d = planner::workload_demand(reqs, 0.0, ttft_s, tpot_s, cost, in.shape.chunk_tokens);  // the class template
        if (!d.ok()) throw std::invalid_argument(d.error());
        in.classes = {d.value().front()};
        elastic = std::make_unique<planner::SimPlanner>(
            in, planner::ControllerConfig{a.headroom, a.scale_down_after, 1e-6}, a.window, c.slo, reqs);
        a.sim.replan = [&elastic](const planner::SimInterval& iv) { return (*elastic)(iv); };
        a.sim.replan_interval_s = a.replan_interval;
      } else {
        // The prefix-cache share the plan assumes, as the router would observe it: 0 at
        // first; when prompts share prefixes, the hit ratio a simulation of that first
        // plan sees, and the plan is solved again with it.
        double cached = 0;
        for (int pass = 0;; ++pass) {
          auto d = planner::workload_demand(reqs, cached, ttft_s, tpot_s, cost, in.shape.chunk_tokens);
          if (!d.ok()) throw std::invalid_argument(d.error());
          in.classes = d.value();
          // As `pdserve planner` starts: the plan for the rate x (1 + --headroom).
          planner::PlanController ctl(planner::ControllerConfig{a.headroom, a.scale_down_after, 1e-6});
          auto r = ctl.step(in);
          if (!r.ok()) throw std::invalid_argument(r.error());
          planner::PlanResult p = r.value().plan;
          planner::PlanInput at = in;  // its predicted goodput at the rate itself
          at.fixed_prefill = p.prefill;
          at.fixed_decode = p.decode;
          if (auto q = planner::solve_plan(at); q.ok()) {
            p.total_goodput = q.value().total_goodput;
            p.demand = q.value().demand;
          }
          const planner::SimFleet f = planner::fleet_for_plan(p);
          a.sim.colocated = a.sim.prefill = a.sim.decode = 0;
          if (f.prefill == 0) {
            a.sim.colocated = f.decode;
          } else {
            a.sim.prefill = f.prefill;
            a.sim.decode = f.decode;
            a.sim.remote_prefill_threshold = f.remote_prefill_threshold;
          }
          std::string dem = "; for";
          nlohmann::json cls = nlohmann::json::array();
          for (size_t i = 0; i < in.classes.size(); ++i) {
            const planner::ClassDemand& x = in.classes[i];
            char buf[200];
            std::snprintf(buf, sizeof buf, "%s %s %.3f req/s of %.0f + %.0f tokens (%s)", i ? "," : "", x.name.c_str(), x.rate,
                          x.input_tokens, x.output_tokens, i < p.pools.size() ? planner::pool_choice_name(p.pools[i]) : "?");
            dem += buf;
            cls.push_back({{"class", x.name}, {"rate", x.rate}, {"input_tokens", x.input_tokens}, {"output_tokens", x.output_tokens},
                           {"pool", i < p.pools.size() ? planner::pool_choice_name(p.pools[i]) : "?"}});
          }
          char tail[120];
          std::snprintf(tail, sizeof tail, "; cached %.1f%%%s", 100 * cached, pass ? " (the hit ratio of a first simulation)" : "");
          plan_line = planner::describe_plan(p) + dem + tail;
          plan_json = {{"budget", a.plan_budget}, {"prefill", p.prefill}, {"decode", p.decode},
                       {"threshold", std::isinf(p.threshold) ? nlohmann::json("inf") : nlohmann::json(p.threshold)},
                       {"predicted_goodput", p.total_goodput}, {"demand", p.demand}, {"classes", cls}, {"cached_fraction", cached}};
          if (!p.notes.empty()) plan_json["notes"] = p.notes;
          if (pass == 1 || w.block_tokens <= 0) break;
          const planner::SimResult probe = planner::simulate(profile, a.sim, reqs, *tok.value());
          int64_t q = 0, h = 0;
          for (const auto& st : probe.instances) {
            q += st.prefix_queries;
            h += st.prefix_hits;
          }
          cached = q > 0 ? static_cast<double>(h) / q : 0.0;
        }
      }
    }

    const auto t0 = std::chrono::steady_clock::now();
    planner::SimResult res = planner::simulate(profile, a.sim, reqs, *tok.value());
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    loadgen::BenchReport rep;
    rep.config = c;
    const planner::SimConfig& s = a.sim;
    rep.config.url = "simulated " + (elastic ? std::string("elastic fleet, budget ") + std::to_string(a.plan_budget)
                                     : s.colocated > 0 ? std::to_string(s.colocated) + " colocated"
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
    if (!plan_line.empty()) std::printf("Plan (GLPK MIP, budget %d): %s\n", a.plan_budget, plan_line.c_str());
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
        std::printf("%-34s %.1f%%  (%d instance%s)\n", (std::string("Busy, ") + names[k]).c_str(),
                    100.0 * busy[k] / (count[k] * dur), count[k], count[k] == 1 ? "" : "s");
    std::printf("%-34s %lld remote / %lld local, %.1f MiB KV moved\n", "Prefills", (long long)res.remote_prefills,
                (long long)res.local_prefills, res.kv_bytes_transferred / 1048576.0);
    std::printf("%-34s %.1f%%  (%lld preemptions)\n", "Prefix-cache hit ratio", q ? 100.0 * h / q : 0.0, (long long)preempt);
    std::printf("%-34s %.2f s  (%lld events)\n", "Simulation wall time", wall, (long long)res.events);
    const nlohmann::json intervals = print_intervals(a, rep, elastic.get());
    std::fflush(stdout);
    if (!a.json_out.empty()) {
      Status st = loadgen::write_json(rep, a.json_out);
      if (!st.ok()) {
        std::fprintf(stderr, "error: %s\n", st.message().c_str());
        return 1;
      }
      if (!plan_json.is_null() || !intervals.empty()) {  // the planner's part, added to bench's report
        nlohmann::json j = nlohmann::json::parse(std::ifstream(a.json_out));
        if (!plan_json.is_null()) j["plan"] = plan_json;
        if (!intervals.empty()) j["intervals"] = intervals;
        std::ofstream(a.json_out) << j.dump(1) << "\n";
      }
    }
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "error: %s\n", ex.what());
    return 1;
  }
  return 0;
}

}  // namespace pdserve::cli
