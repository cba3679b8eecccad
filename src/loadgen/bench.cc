#include "loadgen/bench.h"

#include <chrono>
#include <ctime>

#include <nlohmann/json.hpp>

#include "loadgen/progress.h"
#include "loadgen/prompt_synth.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace pdserve::loadgen {
namespace {

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string join_url(std::string base, const std::string& endpoint) {
  while (!base.empty() && base.back() == '/') base.pop_back();
  if (endpoint.empty()) return base;
  return base + (endpoint.front() == '/' ? "" : "/") + endpoint;
}

}  // namespace

Result<Workload> build_workload(const BenchConfig& cfg, int64_t min_input) {
  if (!cfg.trace_format.empty()) {
    if (!cfg.class_mix.empty()) return Status::InvalidArgument("--class makes a synthetic load; it excludes --trace");
    auto fmt = parse_trace_format(cfg.trace_format);
    if (!fmt.ok()) return fmt.status();
    auto trace = read_trace(fmt.value(), cfg.trace_path);
    if (!trace.ok()) return trace.status();
    if (trace.value().empty()) return Status::InvalidArgument(cfg.trace_path + ": no requests");
    Workload w = scale_trace(trace.value(), fmt.value(), cfg.scaling, min_input);
    if (w.items.empty()) return Status::InvalidArgument("no trace requests left after --max-requests/--duration");
    return w;
  }
  SyntheticOptions o;
  auto mix = parse_class_mix(cfg.class_mix);
  if (!mix.ok()) return mix.status();
  for (const ClassSpec& c : mix.value()) {
    auto ci = LengthDist::parse(c.input);
    auto co = LengthDist::parse(c.output);
    if (!ci.ok()) return ci.status();
    if (!co.ok()) return co.status();
    o.classes.push_back({c.name, c.share, ci.value(), co.value()});
  }
  auto in = LengthDist::parse(cfg.input_len);
  if (!in.ok()) return in.status();
  auto out = LengthDist::parse(cfg.output_len);
  if (!out.ok()) return out.status();
  o.input = in.value();
  o.output = out.value();
  o.rate = cfg.rate;
  o.duration_s = cfg.scaling.duration_s;
  o.max_input = cfg.scaling.max_input;
  o.max_output = cfg.scaling.max_output;
  o.seed = cfg.seed;
  // Without a count: 100 requests, or (with --duration) as many as the duration may take.
  o.num_requests = cfg.scaling.max_requests ? cfg.scaling.max_requests : cfg.scaling.duration_s > 0 ? 100000 : 100;
  if (cfg.rate <= 0 && cfg.scaling.duration_s > 0 && !cfg.scaling.max_requests) o.num_requests = 10000;
  if (cfg.rate <= 0) o.closed_loop_clients = cfg.concurrency;
  return make_synthetic(o, min_input);
}

std::string request_body(const BenchConfig& cfg, const std::string& prompt, int64_t max_tokens,
                         const std::string& slo_class) {
  nlohmann::json j = nlohmann::json::object();
  if (!cfg.model.empty()) j["model"] = cfg.model;
  j["prompt"] = prompt;
  j["max_tokens"] = max_tokens;
  j["temperature"] = cfg.temperature;
  j["stream"] = true;
  j["stream_options"] = {{"include_usage", true}};
  if (cfg.ignore_eos) j["ignore_eos"] = true;
  if (!slo_class.empty()) j["slo_class"] = slo_class;
  if (!cfg.extra_body.empty()) {
    const nlohmann::json extra = nlohmann::json::parse(cfg.extra_body, nullptr, /*allow_exceptions=*/false);
    if (extra.is_object()) j.merge_patch(extra);  // run_bench rejects anything else up front
  }
  return j.dump();
}

Result<BenchReport> run_bench(const BenchConfig& cfg) {
  if (!cfg.extra_body.empty()) {
    auto extra = nlohmann::json::parse(cfg.extra_body, nullptr, false);
    if (extra.is_discarded() || !extra.is_object()) return Status::InvalidArgument("--extra-body must be a JSON object");
  }
  if (!cfg.class_mix.empty() && cfg.slo.set())
    return Status::InvalidArgument("--class sets each class's SLO (ttft_ms=, tpot_ms=); drop --slo-ttft/--slo-tpot");
  auto mix = parse_class_mix(cfg.class_mix);
  if (!mix.ok()) return mix.status();
  auto file = gguf::GgufFile::open(cfg.tokenizer);
  if (!file.ok()) return file.status().annotate("tokenizer");
  auto tok = tokenizer::Tokenizer::from_gguf(*file.value());
  if (!tok.ok()) return tok.status().annotate("tokenizer " + cfg.tokenizer);
  auto synth = PromptSynthesizer::create(*tok.value(), cfg.seed);
  if (!synth.ok()) return synth.status();
  auto wl = build_workload(cfg, synth.value().min_tokens());
  if (!wl.ok()) return wl.status();
  const Workload& w = wl.value();

  BenchReport rep;
  rep.config = cfg;
  rep.workload = w.description;
  rep.block_tokens = w.block_tokens;
  rep.classes = mix.value();
  if (w.block_tokens > 0) rep.prefix = ideal_prefix_hits(w);
  std::vector<RequestSpec> specs;
  specs.reserve(w.items.size());
  for (size_t i = 0; i < w.items.size(); ++i) {
    const WorkItem& it = w.items[i];
    auto p = synth.value().synthesize(it.input_len, it.hash_ids, w.block_tokens, /*request_seed=*/i);
    if (!p.ok()) return p.status().annotate("request " + std::to_string(i));
    const std::string cls = it.cls >= 0 && cfg.send_class ? rep.classes[static_cast<size_t>(it.cls)].name : "";
    specs.push_back({it.arrival_s, request_body(cfg, p.value().text, it.output_len, cls)});
    rep.class_of.push_back(it.cls);
    rep.expected_input.push_back(it.input_len);
    rep.expected_output.push_back(it.output_len);
  }

  ClientOptions co;
  co.url = join_url(cfg.url, cfg.endpoint);
  co.api_key = cfg.api_key;
  co.max_concurrency = cfg.concurrency;
  // Trace and Poisson workloads already hold only arrivals before --duration (each is sent,
  // however late); a closed loop keeps going until the duration ends.
  if (cfg.trace_format.empty() && cfg.rate <= 0) co.duration_s = cfg.scaling.duration_s;
  co.request_timeout_s = cfg.request_timeout_s;
  ProgressBar bar;
  ClientProgress last;
  rep.started_at = utc_now();
  rep.records = run_requests(specs, co, [&](const ClientProgress& p) {
    last = p;
    if (cfg.progress) bar.update(p);
  });
  if (cfg.progress) bar.finish(last);
  if (co.duration_s > 0) {
    // A timed closed loop: the requests it had no time for are not part of the run.
    size_t k = 0;
    for (size_t i = 0; i < rep.records.size(); ++i) {
      if (!rep.records[i].sent()) continue;
      rep.records[k] = std::move(rep.records[i]);
      rep.expected_input[k] = rep.expected_input[i];
      rep.expected_output[k] = rep.expected_output[i];
      rep.class_of[k] = rep.class_of[i];
      ++k;
    }
    rep.class_of.resize(k);
    rep.records.resize(k);
    rep.expected_input.resize(k);
    rep.expected_output.resize(k);
  }
  rep.summary = summarize_run(rep.records, rep.expected_input, cfg.slo);
  if (!rep.classes.empty()) {
    rep.class_summary =
        summarize_classes(rep.records, rep.expected_input, rep.class_of, rep.classes, rep.summary.duration_s);
    rep.summary.good_requests = 0;
    for (const ClassSummary& c : rep.class_summary) rep.summary.good_requests += c.attained;
    rep.summary.goodput = rep.summary.duration_s > 0
                              ? static_cast<double>(rep.summary.good_requests) / rep.summary.duration_s
                              : 0.0;
  }
  return rep;
}

}  // namespace pdserve::loadgen
