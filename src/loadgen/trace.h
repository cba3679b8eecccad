// Readers for the production request traces `pdserve bench` replays (../shared/traces):
// the Mooncake conversation trace (jsonl) and the Azure LLM inference 2023 trace (CSV).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace pdserve::loadgen {

/// Tokens per Mooncake `hash_ids` block in the original trace.
inline constexpr int64_t kMooncakeBlockTokens = 512;

/// One request of a trace, as recorded (unscaled).
struct TraceEntry {
  double timestamp_s = 0;         // arrival, seconds after the trace's first request
  int64_t input_len = 0;          // prompt tokens
  int64_t output_len = 0;         // generated tokens
  std::vector<int64_t> hash_ids;  // Mooncake: one id per 512-token prompt block; Azure: empty
};

enum class TraceFormat { Mooncake, Azure };

/// "mooncake" or "azure" (case-insensitive); an error names the accepted values.
Result<TraceFormat> parse_trace_format(std::string_view name);
const char* trace_format_name(TraceFormat f);

/// Mooncake jsonl: one object per line with `timestamp` (ms), `input_length`,
/// `output_length`, `hash_ids`. Entries come back sorted by arrival (stable).
Result<std::vector<TraceEntry>> read_mooncake_trace(const std::string& path);

/// Azure CSV with header `TIMESTAMP,ContextTokens,GeneratedTokens`; TIMESTAMP is
/// "YYYY-MM-DD HH:MM:SS[.fraction]". Entries come back sorted by arrival (stable).
Result<std::vector<TraceEntry>> read_azure_trace(const std::string& path);

/// Dispatches on the format.
Result<std::vector<TraceEntry>> read_trace(TraceFormat format, const std::string& path);

/// Seconds since 1970-01-01 00:00:00 of "YYYY-MM-DD HH:MM:SS[.fraction]" (no time zone),
/// split into whole seconds and the fraction so that sub-microsecond digits survive.
/// False when the text is not in that form.
bool parse_datetime(std::string_view text, int64_t* seconds, double* fraction);

}  // namespace pdserve::loadgen
