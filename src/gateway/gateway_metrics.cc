#include "gateway/gateway_metrics.h"

#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "base/prometheus_format.h"

namespace pdserve::gateway {
namespace {

std::string num(double v) { return pdserve::prometheus_number(v); }
std::string escape(const std::string& v) { return pdserve::prometheus_label_escape(v); }

const std::vector<double>& latency_bounds() {
  static const std::vector<double> b = {0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 1, 2, 5, 10, 30, 60};
  return b;
}

}  // namespace

GatewayMetrics::GatewayMetrics() = default;

void GatewayMetrics::admitted(SloClass c, const std::string& tenant) {
  std::lock_guard<std::mutex> lk(mu_);
  PerClass& p = classes_.try_emplace(slo_class_name(c), PerClass{0, 0, 0, 0, engine::Histogram(latency_bounds()),
                                                                 engine::Histogram(latency_bounds())}).first->second;
  p.requests++;
  if (tenant.empty()) return;
  std::string t = tenant;
  if (tenants_.size() >= kMaxTenants && !tenants_.count({t, slo_class_name(c)})) t = "other";
  tenants_[{t, slo_class_name(c)}]++;
}

void GatewayMetrics::refused(const std::string& reason) {
  std::lock_guard<std::mutex> lk(mu_);
  refused_[reason]++;
}

void GatewayMetrics::first_token(SloClass c, double ttft_s) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = classes_.find(slo_class_name(c));
  if (it != classes_.end()) it->second.ttft.observe(ttft_s);
}

void GatewayMetrics::finished(SloClass c, double ttft_s, double tpot_s, double ttft_target_s, double tpot_target_s) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = classes_.find(slo_class_name(c));
  if (it == classes_.end()) return;
  PerClass& p = it->second;
  if (tpot_s >= 0) p.tpot.observe(tpot_s);
  // No token (aborted, failed), or no class (no SLO to attain): neither attained nor missed.
  if (ttft_s < 0 || c == SloClass::kNone) return;
  const bool ttft_ok = ttft_target_s <= 0 || ttft_s <= ttft_target_s;
  const bool tpot_ok = tpot_target_s <= 0 || tpot_s < 0 || tpot_s <= tpot_target_s;
  if (!ttft_ok) p.missed_ttft++;
  if (!tpot_ok) p.missed_tpot++;
  if (ttft_ok && tpot_ok) p.attained++;
}

std::string GatewayMetrics::text() const {
  std::lock_guard<std::mutex> lk(mu_);
  std::ostringstream o;
  auto header = [&](const char* name, const char* type, const char* help) {
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
  };
  header("pdserve_gateway_requests_total", "counter", "Requests admitted by the gateway, by SLO class.");
  for (const auto& [c, p] : classes_) o << "pdserve_gateway_requests_total{slo_class=\"" << c << "\"} " << p.requests << "\n";
  header("pdserve_gateway_tenant_requests_total", "counter", "Requests admitted by the gateway, by tenant (at most 64, then \"other\") and SLO class.");
  for (const auto& [k, n] : tenants_)
    o << "pdserve_gateway_tenant_requests_total{tenant=\"" << escape(k.first) << "\",slo_class=\"" << k.second << "\"} " << n << "\n";
  header("pdserve_gateway_refused_total", "counter", "Requests refused by the gateway (401/404/400/429/503), by reason.");
  for (const auto& [r, n] : refused_) o << "pdserve_gateway_refused_total{reason=\"" << escape(r) << "\"} " << n << "\n";
  header("pdserve_slo_attained_total", "counter", "Finished requests that met both their class's TTFT and TPOT targets.");
  for (const auto& [c, p] : classes_) o << "pdserve_slo_attained_total{slo_class=\"" << c << "\"} " << p.attained << "\n";
  header("pdserve_slo_missed_total", "counter", "Finished requests that missed a target, by target (ttft, tpot).");
  for (const auto& [c, p] : classes_) {
    o << "pdserve_slo_missed_total{slo_class=\"" << c << "\",target=\"ttft\"} " << p.missed_ttft << "\n";
    o << "pdserve_slo_missed_total{slo_class=\"" << c << "\",target=\"tpot\"} " << p.missed_tpot << "\n";
  }
  auto hist = [&](const char* name, const char* help, auto member) {
    header(name, "histogram", help);
    for (const auto& [c, p] : classes_) {
      const engine::Histogram& h = p.*member;
      uint64_t cum = 0;
      for (size_t i = 0; i < h.bounds.size(); ++i) {
        cum += h.counts[i];
        o << name << "_bucket{slo_class=\"" << c << "\",le=\"" << num(h.bounds[i]) << "\"} " << cum << "\n";
      }
      cum += h.counts.back();
      o << name << "_bucket{slo_class=\"" << c << "\",le=\"+Inf\"} " << cum << "\n";
      o << name << "_sum{slo_class=\"" << c << "\"} " << num(h.sum) << "\n";
      o << name << "_count{slo_class=\"" << c << "\"} " << h.count << "\n";
    }
  };
  hist("pdserve_gateway_time_to_first_token_seconds", "Time from admission to the first token, by SLO class.", &PerClass::ttft);
  hist("pdserve_gateway_time_per_output_token_seconds", "Mean time between output tokens, by SLO class.", &PerClass::tpot);
  return o.str();
}

}  // namespace pdserve::gateway
