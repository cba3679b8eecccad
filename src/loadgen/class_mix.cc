#include "loadgen/class_mix.h"

#include <cmath>
#include <set>
#include <sstream>

#include "loadgen/workload.h"

namespace pdserve::loadgen {
namespace {

bool parse_number(const std::string& s, double* v) {
  try {
    size_t pos = 0;
    *v = std::stod(s, &pos);
    return pos == s.size() && std::isfinite(*v);
  } catch (...) {
    return false;
  }
}

/// pdserve's default class targets (gateway/slo_class.h, default_class_policies()).
Slo default_slo(const std::string& name) {
  if (name == "high") return {300, 50};
  if (name == "medium") return {1000, 100};
  if (name == "low") return {10000, 500};
  return {};
}

}  // namespace

Result<ClassSpec> parse_class_spec(const std::string& spec) {
  const auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("bad --class '" + spec + "': " + why +
                                   " (expected NAME:share=F,input=DIST,output=DIST,ttft_ms=X,tpot_ms=Y)");
  };
  ClassSpec c;
  const size_t colon = spec.find(':');
  c.name = spec.substr(0, colon);
  if (c.name.empty()) return bad("no class name");
  c.slo = default_slo(c.name);
  if (colon == std::string::npos) return c;
  std::stringstream ss(spec.substr(colon + 1));
  for (std::string kv; std::getline(ss, kv, ',');) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) return bad("'" + kv + "' is not KEY=VALUE");
    const std::string k = kv.substr(0, eq), v = kv.substr(eq + 1);
    double x = 0;
    if (k == "share") {
      if (!parse_number(v, &x) || x <= 0) return bad("share must be a number > 0");
      c.share = x;
    } else if (k == "input" || k == "output") {
      if (auto d = LengthDist::parse(v); !d.ok()) return bad(d.error());
      (k == "input" ? c.input : c.output) = v;
    } else if (k == "ttft_ms" || k == "tpot_ms") {
      if (!parse_number(v, &x) || x < 0) return bad(k + " must be a number >= 0");
      (k == "ttft_ms" ? c.slo.ttft_ms : c.slo.tpot_ms) = x;
    } else {
      return bad("unknown key '" + k + "'");
    }
  }
  return c;
}

Result<std::vector<ClassSpec>> parse_class_mix(const std::vector<std::string>& specs) {
  std::vector<ClassSpec> out;
  std::set<std::string> names;
  double total = 0;
  for (const std::string& s : specs) {
    auto c = parse_class_spec(s);
    if (!c.ok()) return c.status();
    if (!names.insert(c.value().name).second)
      return Status::InvalidArgument("--class '" + c.value().name + "' given twice");
    total += c.value().share;
    out.push_back(std::move(c.value()));
  }
  for (ClassSpec& c : out) c.share /= total;
  return out;
}

std::vector<ClassSummary> summarize_classes(const std::vector<RequestRecord>& recs,
                                            const std::vector<int64_t>& expected_input,
                                            const std::vector<int>& class_of, const std::vector<ClassSpec>& classes,
                                            double duration_s) {
  std::vector<ClassSummary> out(classes.size());
  std::vector<std::vector<double>> ttft(classes.size()), tpot(classes.size());
  for (size_t c = 0; c < classes.size(); ++c) {
    out[c].name = classes[c].name;
    out[c].slo = classes[c].slo;
  }
  for (size_t i = 0; i < recs.size() && i < class_of.size(); ++i) {
    const int c = class_of[i];
    if (c < 0 || static_cast<size_t>(c) >= classes.size() || !recs[i].sent()) continue;
    ClassSummary& s = out[static_cast<size_t>(c)];
    ++s.requests;
    if (!recs[i].ok) {
      ++s.failed;
      continue;
    }
    ++s.completed;
    const RequestMetrics m = request_metrics(recs[i], i < expected_input.size() ? expected_input[i] : 0);
    ttft[static_cast<size_t>(c)].push_back(m.ttft_s * 1000.0);
    if (m.tpot_s) tpot[static_cast<size_t>(c)].push_back(*m.tpot_s * 1000.0);
    if (meets_slo(m, s.slo)) ++s.attained;
  }
  for (size_t c = 0; c < classes.size(); ++c) {
    ClassSummary& s = out[c];
    s.attainment = s.requests ? static_cast<double>(s.attained) / static_cast<double>(s.requests) : 0.0;
    s.goodput = duration_s > 0 ? static_cast<double>(s.attained) / duration_s : 0.0;
    s.ttft_ms = summarize(std::move(ttft[c]));
    s.tpot_ms = summarize(std::move(tpot[c]));
  }
  return out;
}

}  // namespace pdserve::loadgen
