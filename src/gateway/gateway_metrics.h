// Gateway metrics per SLO class and (bounded) tenant: requests, refusals by reason,
// TTFT / TPOT / queue-time histograms and SLO attainment, in Prometheus text format.
#pragma once

#include <map>
#include <mutex>
#include <string>

#include "engine/metrics.h"
#include "gateway/slo_class.h"

namespace pdserve::gateway {

class GatewayMetrics {
 public:
  /// At most this many tenant label values; later tenants are counted as "other".
  static constexpr size_t kMaxTenants = 64;
  GatewayMetrics();

  void admitted(SloClass c, const std::string& tenant);
  void refused(const std::string& reason);
  /// A request that waited `queue_s` for its first token (TTFT at the gateway).
  void first_token(SloClass c, double ttft_s);
  /// A finished request: TTFT (< 0: no token) and mean TPOT (< 0: fewer than 2 tokens),
  /// judged against the class's targets (0 = no target); a request without a class
  /// (SloClass::kNone) only feeds the TTFT/TPOT histograms.
  void finished(SloClass c, double ttft_s, double tpot_s, double ttft_target_s, double tpot_target_s);
  std::string text() const;

 private:
  struct PerClass {
    int64_t requests = 0, attained = 0, missed_ttft = 0, missed_tpot = 0;
    engine::Histogram ttft, tpot;
  };
  mutable std::mutex mu_;
  std::map<std::string, PerClass> classes_;                       // by slo_class name
  std::map<std::pair<std::string, std::string>, int64_t> tenants_;  // (tenant, class) → requests
  std::map<std::string, int64_t> refused_;                        // by reason
};

}  // namespace pdserve::gateway
