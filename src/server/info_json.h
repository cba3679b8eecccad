// Bodies of the informational routes: GET /v1/models, GET /v1/models/{id}, GET /health,
// GET /engine/steps.
#pragma once

#include <cstdint>
#include <string>

#include "engine/engine.h"
#include "server/json_util.h"

namespace pdserve::server {

/// {id, object:"model", created, owned_by:"pdserve", max_model_len}.
json model_json(const std::string& model_name, int64_t created, int context_length);
/// {object:"list", data:[model_json(...)]}.
json models_json(const std::string& model_name, int64_t created, int context_length);
/// {status, kv_blocks_used, kv_blocks_total, kv_blocks_free, kv_blocks_cached,
///  requests_running, requests_waiting[, reason]}; status "ok", "shutting_down", or
///  "unavailable" with the engine's not-ready `reason` (e.g. a router without workers).
json health_json(const engine::EngineStats& s, bool shutting_down, const std::string& not_ready = {});
/// GET /engine/steps?since=SEQ: the engine's recent steps (engine/step_timings.h), read by
/// `pdserve calibrate`. {object:"engine.steps", model, kv_layout:{kv_dtype, block_size,
/// n_layer, n_head_kv, head_dim}, steps:[{seq, end_time, seconds, kind, decodes,
/// mean_context, chunks:[[tokens, cached], ...]}, ...]} (times in seconds).
json steps_json(const engine::Engine& e, uint64_t since);

}  // namespace pdserve::server
