// `pdserve bench`: a serving benchmark against any OpenAI-compatible server — replays a
// production trace (or a synthetic Poisson / closed-loop workload) over streaming
// /v1/completions and reports TTFT, TPOT, ITL, E2E, throughput and goodput.
#include <cstdio>

#include "loadgen/bench.h"
#include "loadgen/class_mix.h"
#include "loadgen/plot.h"
#include "loadgen/report.h"
#include "cli/commands.h"

namespace pdserve::cli {

void add_bench_command(CLI::App& app, BenchArgs& a) {
  loadgen::BenchConfig& c = a.cfg;
  CLI::App* cmd = app.add_subcommand("bench", "measure an OpenAI-compatible server: replay a trace or a synthetic load");
  cmd->add_option("--url", c.url, "server base URL")->default_val("http://127.0.0.1:8080");
  cmd->add_option("--endpoint", c.endpoint, "completions path appended to --url")->default_val("/v1/completions");
  cmd->add_option("--model", c.model, "model name sent in each request");
  cmd->add_option("--tokenizer", c.tokenizer, "GGUF file with the server model's vocab (prompts are sized with it)")
      ->required();
  cmd->add_option("--api-key", c.api_key, "sent as 'Authorization: Bearer KEY'");
  // Workload: a trace ...
  CLI::Option* trace = cmd->add_option("--trace", a.trace, "replay a trace: FORMAT FILE, FORMAT = mooncake | azure")
                          ->expected(2);
  cmd->add_option("--time-scale", c.scaling.time_scale, "multiply trace arrival times by this (0.01 = 100x faster)")
      ->default_val(1.0)->check(kFinite & CLI::PositiveNumber);
  cmd->add_option("--length-scale", c.scaling.length_scale,
                  "multiply trace input/output lengths by this (Mooncake 512-token blocks become round(512*x) tokens)")
      ->default_val(1.0)->check(kFinite & CLI::PositiveNumber);
  cmd->add_option("--max-input", c.scaling.max_input, "cap on prompt tokens, BOS included (0 = none)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-output", c.scaling.max_output, "cap on output tokens (0 = none)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-requests", c.scaling.max_requests,
                  "send at most N requests (trace: its first N; synthetic default 100)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--duration", c.scaling.duration_s,
                  "seconds: only requests arriving before it (trace, --rate); a closed loop stops sending then")
      ->check(kFinite & CLI::NonNegativeNumber);
  // ... or a synthetic load.
  cmd->add_option("--rate", c.rate, "synthetic: Poisson arrivals at R requests/s (0 = all at once)")
      ->check(kFinite & CLI::NonNegativeNumber)
      ->excludes(trace);
  cmd->add_option("--concurrency", c.concurrency,
                  "at most C requests in flight (without --rate or --trace: a closed loop of C clients)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--input-len", c.input_len, "synthetic prompt tokens: N | uniform:LO:HI | normal:MEAN:STD | exp:MEAN")
      ->default_val("128");
  cmd->add_option("--output-len", c.output_len, "synthetic output tokens (same forms as --input-len)")->default_val("128");
  cmd->add_option("--class", c.class_mix,
                  "synthetic: a request class of a mix (repeat per class): NAME:share=F,input=DIST,output=DIST,"
                  "ttft_ms=X,tpot_ms=Y; NAME is sent as \"slo_class\"; per-class attainment and goodput reported")
      ->excludes(trace);
  cmd->add_flag("--no-class-field{false}", c.send_class,
                "with --class: do not send \"slo_class\" (the classes-off baseline of the same load)");
  cmd->add_option("--seed", c.seed, "seed for prompts and synthetic arrivals/lengths")->default_val(0);
  // Requests.
  cmd->add_option("--temperature", c.temperature, "sampling temperature sent")->default_val(0.0)->check(kFinite & CLI::NonNegativeNumber);
  cmd->add_flag("--no-ignore-eos{false}", c.ignore_eos,
                "do not send \"ignore_eos\": true (for servers that reject it; outputs may then end early)");
  cmd->add_option("--extra-body", c.extra_body, "JSON object merged into every request body");
  cmd->add_option("--request-timeout", c.request_timeout_s, "seconds per request")->default_val(600.0)->check(kFinite & CLI::PositiveNumber);
  // Results.
  cmd->add_option("--slo-ttft", c.slo.ttft_ms, "goodput SLO: time to first token, ms")->check(kFinite & CLI::NonNegativeNumber);
  cmd->add_option("--slo-tpot", c.slo.tpot_ms, "goodput SLO: time per output token, ms")->check(kFinite & CLI::NonNegativeNumber);
  cmd->add_option("--json", a.json_out, "write the JSON report here");
  cmd->add_option("--plot", a.plot_out, "write latency CDFs and throughput over time here (PNG, via gnuplot)");
  cmd->add_flag("--no-progress{false}", c.progress, "no progress display on stderr");
  // A malformed --class mix is a usage error (one line, exit 2), found before any request.
  cmd->parse_complete_callback([&c] {
    if (c.class_mix.empty()) return;
    auto mix = loadgen::parse_class_mix(c.class_mix);
    if (!mix.ok()) throw CLI::ValidationError(mix.error());
  });
}

int run_bench(BenchArgs& a) {
  loadgen::BenchConfig& c = a.cfg;
  if (!a.trace.empty()) {
    c.trace_format = a.trace[0];
    c.trace_path = a.trace[1];
  }
  auto rep = loadgen::run_bench(c);
  if (!rep.ok()) {
    std::fprintf(stderr, "error: %s\n", rep.error().c_str());
    return 1;
  }
  std::fputs(loadgen::format_table(rep.value()).c_str(), stdout);
  std::fflush(stdout);
  int rc = rep.value().summary.completed > 0 ? 0 : 3;
  if (!a.json_out.empty()) {
    Status s = loadgen::write_json(rep.value(), a.json_out);
    if (!s.ok()) {
      std::fprintf(stderr, "error: %s\n", s.message().c_str());
      rc = 1;
    }
  }
  if (!a.plot_out.empty()) {
    Status s = loadgen::write_plot(rep.value(), a.plot_out);
    if (!s.ok()) {
      std::fprintf(stderr, "error: plot: %s\n", s.message().c_str());
      rc = 1;
    }
  }
  // The first few failures, so a broken setup is visible without the JSON.
  int shown = 0;
  for (const auto& r : rep.value().records) {
    if (r.sent() && !r.ok && shown++ < 3) std::fprintf(stderr, "failed request: %s\n", r.error.c_str());
  }
  return rc;
}

}  // namespace pdserve::cli
