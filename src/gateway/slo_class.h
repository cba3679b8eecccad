// Request classes of the gateway and the scheduler: decode SLO classes (high|medium|low,
// each with TTFT/TPOT targets, a queue bound and a maximum queue time) and prefill size
// classes (small|medium|large by uncached prompt tokens). Terms as in DistServe / the
// "goodput" literature: a request attains its SLO when TTFT and TPOT are both within target.
#pragma once

#include <array>
#include <optional>
#include <string>

namespace pdserve::gateway {

/// Decode SLO class; a lower value is served first. kNone: no class (the request keeps
/// the scheduler's classless order).
enum class SloClass : int { kNone = -1, kHigh = 0, kMedium = 1, kLow = 2 };
inline constexpr int kNumSloClasses = 3;

/// "high" | "medium" | "low" (nullopt for anything else).
std::optional<SloClass> parse_slo_class(const std::string& s);
/// "high" | "medium" | "low" | "none".
const char* slo_class_name(SloClass c);

/// Targets and admission limits of one SLO class. 0 = none.
struct ClassPolicy {
  double ttft_s = 0;      // time to first token target
  double tpot_s = 0;      // time per output token target
  int max_queue = 0;      // requests queued (submitted, no first token yet) at most; beyond ⇒ 503
  double max_queue_s = 0; // a request not scheduled within this is refused with 503
};

/// Default policies: high 300 ms / 50 ms, medium 1 s / 100 ms, low 10 s / 500 ms (TTFT /
/// TPOT); no queue bounds.
std::array<ClassPolicy, kNumSloClasses> default_class_policies();

/// Prefill size class by uncached prompt tokens.
enum class PrefillClass : int { kSmall = 0, kMedium = 1, kLarge = 2 };
struct PrefillThresholds {
  int medium_from = 256;   // uncached tokens ≥ this ⇒ medium
  int large_from = 2048;   // uncached tokens ≥ this ⇒ large
};
PrefillClass prefill_class(int uncached_tokens, const PrefillThresholds& t);
const char* prefill_class_name(PrefillClass c);

}  // namespace pdserve::gateway
