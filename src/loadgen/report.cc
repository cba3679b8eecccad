#include "loadgen/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

namespace pdserve::loadgen {
namespace {

std::string fmt(const char* f, double v) {
  if (std::isnan(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

std::string row(const std::string& label, const std::string& value) {
  std::string out = label;
  out.resize(std::max<size_t>(out.size(), 34), ' ');
  return out + " " + value + "\n";
}

std::string dist_row(const char* name, const Distribution& d) {
  char buf[200];
  std::snprintf(buf, sizeof(buf), "%-12s %10s %10s %10s %10s %10s\n", name, fmt("%.2f", d.mean).c_str(),
                fmt("%.2f", d.p50).c_str(), fmt("%.2f", d.p90).c_str(), fmt("%.2f", d.p99).c_str(),
                fmt("%.2f", d.max).c_str());
  return buf;
}

nlohmann::json num(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

nlohmann::json dist_json(const Distribution& d) {
  return {{"count", d.count}, {"mean", num(d.mean)}, {"p50", num(d.p50)}, {"p90", num(d.p90)},
          {"p99", num(d.p99)}, {"min", num(d.min)}, {"max", num(d.max)}};
}

}  // namespace

std::string format_class_table(const BenchReport& r) {
  std::string out = "---------------------------------------\n";
  char buf[320];
  std::snprintf(buf, sizeof(buf), "%-8s %6s %6s %6s %17s %9s %17s %17s  %s\n", "class", "share", "sent", "failed",
                "attained", "goodput", "TTFT p50/p99", "TPOT p50/p99", "SLO (TTFT/TPOT ms)");
  out += buf;
  for (size_t i = 0; i < r.class_summary.size(); ++i) {
    const ClassSummary& c = r.class_summary[i];
    const double share = i < r.classes.size() ? r.classes[i].share : 0;
    const std::string att = std::to_string(c.attained) + " (" + fmt("%.1f%%", 100.0 * c.attainment) + ")";
    const std::string slo = (c.slo.ttft_ms > 0 ? fmt("%g", c.slo.ttft_ms) : "-") + " / " +
                            (c.slo.tpot_ms > 0 ? fmt("%g", c.slo.tpot_ms) : "-");
    std::snprintf(buf, sizeof(buf), "%-8s %6.2f %6zu %6zu %17s %9s %17s %17s  %s\n", c.name.c_str(), share, c.requests,
                  c.failed, att.c_str(), fmt("%.2f", c.goodput).c_str(),
                  (fmt("%.0f", c.ttft_ms.p50) + "/" + fmt("%.0f", c.ttft_ms.p99)).c_str(),
                  (fmt("%.1f", c.tpot_ms.p50) + "/" + fmt("%.1f", c.tpot_ms.p99)).c_str(), slo.c_str());
    out += buf;
  }
  return out;
}

std::string format_table(const BenchReport& r) {
  const Summary& s = r.summary;
  const BenchConfig& c = r.config;
  std::string out;
  out += "============ pdserve bench ============\n";
  out += row("Server", c.url + c.endpoint + (c.model.empty() ? "" : "  model " + c.model));
  out += row("Workload", r.workload);
  if (c.concurrency > 0) out += row("Max concurrency", std::to_string(c.concurrency));
  out += row("Started (UTC)", r.started_at);
  out += "---------------------------------------\n";
  out += row("Requests completed / failed", std::to_string(s.completed) + " / " + std::to_string(s.failed) +
                                                 (s.not_sent ? "  (" + std::to_string(s.not_sent) + " not sent)" : ""));
  out += row("Duration (s)", fmt("%.2f", s.duration_s));
  out += row("Input / output tokens", std::to_string(s.input_tokens) + " / " + std::to_string(s.output_tokens));
  out += row("Request throughput (req/s)", fmt("%.2f", s.request_throughput));
  out += row("Output token throughput (tok/s)", fmt("%.1f", s.output_throughput));
  out += row("Total token throughput (tok/s)", fmt("%.1f", s.total_token_throughput));
  if (s.goodput && !r.classes.empty()) {
    out += row("Goodput (req/s)", fmt("%.2f", *s.goodput) + "  (" + std::to_string(s.good_requests) + "/" +
                                      std::to_string(s.completed + s.failed) + " within their class's SLO)");
    out += row("slo_class field", c.send_class ? "sent" : "not sent (classes off)");
  } else if (s.goodput) {
    std::string slo;
    if (c.slo.ttft_ms > 0) slo += "TTFT <= " + fmt("%g", c.slo.ttft_ms) + " ms";
    if (c.slo.tpot_ms > 0) slo += std::string(slo.empty() ? "" : ", ") + "TPOT <= " + fmt("%g", c.slo.tpot_ms) + " ms";
    out += row("Goodput (req/s)", fmt("%.2f", *s.goodput) + "  (" + std::to_string(s.good_requests) + "/" +
                                      std::to_string(s.completed) + " within " + slo + ")");
  } else {
    out += row("Goodput (req/s)", "- (set --slo-ttft / --slo-tpot)");
  }
  if (r.prefix) {
    out += row("Ideal prefix hit ratio", fmt("%.1f%%", 100.0 * r.prefix->ratio()) + "  (" +
                                             std::to_string(r.prefix->hit_tokens) + "/" +
                                             std::to_string(r.prefix->prompt_tokens) + " prompt tokens, infinite cache)");
  }
  out += "---------------------------------------\n";
  char head[200];
  std::snprintf(head, sizeof(head), "%-12s %10s %10s %10s %10s %10s\n", "(ms)", "mean", "p50", "p90", "p99", "max");
  out += head;
  out += dist_row("TTFT", s.ttft_ms);
  out += dist_row("TPOT", s.tpot_ms);
  out += dist_row("ITL", s.itl_ms);
  out += dist_row("E2E", s.e2e_ms);
  if (!r.classes.empty()) out += format_class_table(r);
  out += "=======================================\n";
  return out;
}

nlohmann::json report_json(const BenchReport& r) {
  const BenchConfig& c = r.config;
  const Summary& s = r.summary;
  nlohmann::json cfg = {
      {"url", c.url},
      {"endpoint", c.endpoint},
      {"model", c.model},
      {"tokenizer", c.tokenizer},
      {"trace_format", c.trace_format.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.trace_format)},
      {"trace_path", c.trace_path.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.trace_path)},
      {"time_scale", c.scaling.time_scale},
      {"length_scale", c.scaling.length_scale},
      {"block_tokens", r.block_tokens},
      {"max_input", c.scaling.max_input},
      {"max_output", c.scaling.max_output},
      {"max_requests", c.scaling.max_requests},
      {"duration_s", c.scaling.duration_s},
      {"rate", c.rate},
      {"concurrency", c.concurrency},
      {"input_len", c.input_len},
      {"output_len", c.output_len},
      {"seed", c.seed},
      {"temperature", c.temperature},
      {"ignore_eos", c.ignore_eos},
      {"slo_ttft_ms", c.slo.ttft_ms > 0 ? nlohmann::json(c.slo.ttft_ms) : nlohmann::json(nullptr)},
      {"slo_tpot_ms", c.slo.tpot_ms > 0 ? nlohmann::json(c.slo.tpot_ms) : nlohmann::json(nullptr)},
  };
  if (!r.classes.empty()) {
    nlohmann::json mix = nlohmann::json::array();
    for (const ClassSpec& k : r.classes)
      mix.push_back({{"name", k.name},
                     {"share", k.share},
                     {"input_len", k.input},
                     {"output_len", k.output},
                     {"slo_ttft_ms", k.slo.ttft_ms > 0 ? nlohmann::json(k.slo.ttft_ms) : nlohmann::json(nullptr)},
                     {"slo_tpot_ms", k.slo.tpot_ms > 0 ? nlohmann::json(k.slo.tpot_ms) : nlohmann::json(nullptr)}});
    cfg["classes"] = std::move(mix);
    cfg["send_class"] = c.send_class;
  }
  nlohmann::json sum = {
      {"requests", s.requests},
      {"completed", s.completed},
      {"failed", s.failed},
      {"not_sent", s.not_sent},
      {"duration_s", s.duration_s},
      {"input_tokens", s.input_tokens},
      {"output_tokens", s.output_tokens},
      {"request_throughput", s.request_throughput},
      {"output_throughput", s.output_throughput},
      {"total_token_throughput", s.total_token_throughput},
      {"goodput", s.goodput ? nlohmann::json(*s.goodput) : nlohmann::json(nullptr)},
      {"good_requests", s.good_requests},
      {"ttft_ms", dist_json(s.ttft_ms)},
      {"tpot_ms", dist_json(s.tpot_ms)},
      {"itl_ms", dist_json(s.itl_ms)},
      {"e2e_ms", dist_json(s.e2e_ms)},
      {"prefix_hit_ratio_ideal", r.prefix ? nlohmann::json(r.prefix->ratio()) : nlohmann::json(nullptr)},
      {"prefix_hit_tokens_ideal", r.prefix ? nlohmann::json(r.prefix->hit_tokens) : nlohmann::json(nullptr)},
      {"percentile_method", "linear interpolation between closest ranks (numpy default)"},
  };
  if (!r.classes.empty()) {
    nlohmann::json per = nlohmann::json::object();
    for (const ClassSummary& k : r.class_summary)
      per[k.name] = {{"requests", k.requests},     {"completed", k.completed},   {"failed", k.failed},
                     {"attained", k.attained},     {"attainment", k.attainment}, {"goodput", k.goodput},
                     {"ttft_ms", dist_json(k.ttft_ms)}, {"tpot_ms", dist_json(k.tpot_ms)}};
    sum["classes"] = std::move(per);
  }
  nlohmann::json reqs = nlohmann::json::array();
  for (size_t i = 0; i < r.records.size(); ++i) {
    const RequestRecord& rec = r.records[i];
    const int64_t expected_in = i < r.expected_input.size() ? r.expected_input[i] : 0;
    const RequestMetrics m = request_metrics(rec, expected_in);
    nlohmann::json q = {
        {"arrival_s", rec.arrival_s},
        {"send_s", rec.sent() ? num(rec.send_s) : nlohmann::json(nullptr)},
        {"ok", rec.ok},
        {"input_tokens", expected_in},
        {"max_tokens", i < r.expected_output.size() ? r.expected_output[i] : 0},
        {"usage_prompt_tokens", rec.usage_prompt_tokens >= 0 ? nlohmann::json(rec.usage_prompt_tokens) : nlohmann::json(nullptr)},
        {"usage_completion_tokens",
         rec.usage_completion_tokens >= 0 ? nlohmann::json(rec.usage_completion_tokens) : nlohmann::json(nullptr)},
        {"output_tokens", m.output_tokens},
        {"chunks", rec.chunk_s.size()},
        {"http_status", rec.http_status},
    };
    const int cls = i < r.class_of.size() && static_cast<size_t>(r.class_of[i]) < r.classes.size() ? r.class_of[i] : -1;
    if (cls >= 0) q["slo_class"] = r.classes[static_cast<size_t>(cls)].name;
    nlohmann::json chunks = nlohmann::json::array();
    for (double t : rec.chunk_s) chunks.push_back(std::round(t * 1e6) / 1e6);
    q["chunk_s"] = std::move(chunks);
    if (rec.ok) {
      q["ttft_ms"] = m.ttft_s * 1000.0;
      q["e2e_ms"] = m.e2e_s * 1000.0;
      q["tpot_ms"] = m.tpot_s ? nlohmann::json(*m.tpot_s * 1000.0) : nlohmann::json(nullptr);
      q["meets_slo"] = c.slo.set() ? nlohmann::json(meets_slo(m, c.slo)) : nlohmann::json(nullptr);
      if (cls >= 0) q["meets_slo"] = meets_slo(m, r.classes[static_cast<size_t>(cls)].slo);
    } else {
      q["error"] = rec.error;
    }
    reqs.push_back(std::move(q));
  }
  return {{"tool", "pdserve bench"}, {"started_at", r.started_at}, {"workload", r.workload},
          {"config", cfg},           {"summary", sum},              {"requests", reqs}};
}

Status write_json(const BenchReport& r, const std::string& path) {
  std::ofstream out(path);
  if (!out) return Status::Internal("cannot write " + path);
  out << report_json(r).dump(2) << "\n";
  if (!out) return Status::Internal("error writing " + path);
  return Status::Ok();
}

}  // namespace pdserve::loadgen
