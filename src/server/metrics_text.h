// Prometheus text exposition (format 0.0.4) of the engine's metrics, served at /metrics.
// https://prometheus.io/docs/instrumenting/exposition_formats/
#pragma once

#include <string>

#include "engine/metrics.h"

namespace pdserve::server {

/// Renders `m` with a `model_name` label on every sample. Metric names: pdserve_*
/// (requests_running/waiting, kv_blocks_{total,used,cached,free}, prefix_cache_{queries,hits}_total
/// in tokens, preemptions_total, prompt/generation_tokens_total,
/// request_success_total{finished_reason}, and the histograms time_to_first_token_seconds,
/// time_per_output_token_seconds, e2e_request_latency_seconds, request_queue_time_seconds).
std::string prometheus_text(const engine::MetricsSnapshot& m, const std::string& model_name);

/// The process's own gauges (no model_name label; base/heap_usage.h): process_heap_bytes,
/// the C heap in use (malloc's live allocations, mmap-served ones such as the KV pool
/// included), and process_heap_free_bytes, what malloc's arenas hold unused. Empty where
/// the C library cannot tell.
std::string process_metrics_text();

}  // namespace pdserve::server
