#include "server/info_json.h"

namespace pdserve::server {

json model_json(const std::string& model_name, int64_t created, int context_length) {
  return json{{"id", model_name},
              {"object", "model"},
              {"created", created},
              {"owned_by", "pdserve"},
              {"max_model_len", context_length}};
}

json models_json(const std::string& model_name, int64_t created, int context_length) {
  return json{{"object", "list"},
              {"data", json::array({model_json(model_name, created, context_length)})}};
}

json health_json(const engine::EngineStats& s, bool shutting_down, const std::string& not_ready) {
  json j{{"status", shutting_down ? "shutting_down" : !not_ready.empty() ? "unavailable" : "ok"},
              {"kv_blocks_used", s.kv_blocks_used},
              {"kv_blocks_total", s.kv_blocks_total},
              {"kv_blocks_free", s.kv_blocks_free},
              {"kv_blocks_cached", s.kv_blocks_cached},
              {"requests_running", s.requests_running},
              {"requests_waiting", s.requests_waiting}};
  if (s.kv_block_bytes > 0) {  // KV memory in bytes (the dtype sets the bytes per block)
    j["kv_dtype"] = s.kv_dtype;
    j["kv_bytes_total"] = s.kv_blocks_total * s.kv_block_bytes;
    j["kv_bytes_used"] = s.kv_blocks_used * s.kv_block_bytes;
    j["kv_bytes_cached"] = s.kv_blocks_cached * s.kv_block_bytes;
    // The prefix cache's namespaces and the salts unfinished requests hold (--max-cache-salts).
    j["prefix_cache_namespaces"] = s.prefix_cache_namespaces;
    j["cache_salts_in_use"] = s.cache_salts_in_use;
  }
  if (!not_ready.empty()) j["reason"] = not_ready;
  return j;
}

json steps_json(const engine::Engine& e, uint64_t since) {
  const engine::KvLayout l = e.kv_layout();
  json steps = json::array();
  for (const engine::StepSample& s : e.recent_steps(since)) {
    json chunks = json::array();
    for (const auto& [n, before] : s.chunks) chunks.push_back({n, before});
    steps.push_back({{"seq", s.seq}, {"end_time", s.end_time}, {"seconds", s.seconds}, {"kind", s.kind()},
                     {"decodes", s.decodes}, {"mean_context", s.mean_context}, {"chunks", std::move(chunks)}});
  }
  return {{"object", "engine.steps"},
          {"model", e.model_name()},
          {"kv_layout",
           {{"kv_dtype", l.kv_dtype}, {"block_size", l.block_size}, {"n_layer", l.n_layers}, {"n_head_kv", l.n_kv_heads},
            {"head_dim", l.head_dim}}},
          {"steps", std::move(steps)}};
}

}  // namespace pdserve::server
