#include "gateway/slo_class.h"

namespace pdserve::gateway {

std::optional<SloClass> parse_slo_class(const std::string& s) {
  if (s == "high") return SloClass::kHigh;
  if (s == "medium") return SloClass::kMedium;
  if (s == "low") return SloClass::kLow;
  return std::nullopt;
}

const char* slo_class_name(SloClass c) {
  switch (c) {
    case SloClass::kHigh: return "high";
    case SloClass::kMedium: return "medium";
    case SloClass::kLow: return "low";
    case SloClass::kNone: break;
  }
  return "none";
}

std::array<ClassPolicy, kNumSloClasses> default_class_policies() {
  std::array<ClassPolicy, kNumSloClasses> p;
  p[0] = {0.3, 0.05, 0, 0};
  p[1] = {1.0, 0.1, 0, 0};
  p[2] = {10.0, 0.5, 0, 0};
  return p;
}

PrefillClass prefill_class(int uncached_tokens, const PrefillThresholds& t) {
  if (uncached_tokens >= t.large_from) return PrefillClass::kLarge;
  if (uncached_tokens >= t.medium_from) return PrefillClass::kMedium;
  return PrefillClass::kSmall;
}

const char* prefill_class_name(PrefillClass c) {
  switch (c) {
    case PrefillClass::kSmall: return "small";
    case PrefillClass::kMedium: return "medium";
    case PrefillClass::kLarge: return "large";
  }
  return "small";
}

}  // namespace pdserve::gateway
