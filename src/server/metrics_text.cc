#include "server/metrics_text.h"

#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "base/heap_usage.h"
#include "base/prometheus_format.h"

namespace pdserve::server {

namespace {

std::string num(double v) { return pdserve::prometheus_number(v); }
std::string escape_label(const std::string& v) { return pdserve::prometheus_label_escape(v); }

class Writer {
 public:
  explicit Writer(const std::string& model) : label_("model_name=\"" + escape_label(model) + "\"") {}
  void scalar(const char* name, const char* type, const char* help, double v) {
    header(name, type, help);
    out_ << name << "{" << label_ << "} " << num(v) << "\n";
  }
  void header(const char* name, const char* type, const char* help) {
    out_ << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
  }
  void labelled(const char* name, const std::string& extra, double v) {
    out_ << name << "{" << label_ << "," << extra << "} " << num(v) << "\n";
  }
  void histogram(const char* name, const char* help, const engine::Histogram& h) {
    header(name, "histogram", help);
    uint64_t cum = 0;
    for (size_t i = 0; i < h.bounds.size(); ++i) {
      cum += h.counts[i];
      out_ << name << "_bucket{" << label_ << ",le=\"" << num(h.bounds[i]) << "\"} " << cum << "\n";
    }
    cum += h.counts.back();
    out_ << name << "_bucket{" << label_ << ",le=\"+Inf\"} " << cum << "\n";
    out_ << name << "_sum{" << label_ << "} " << num(h.sum) << "\n";
    out_ << name << "_count{" << label_ << "} " << h.count << "\n";
  }
  void histogram_header(const char* name, const char* help) { header(name, "histogram", help); }
  /// One labelled series of a histogram (after histogram_header).
  void histogram_series(const char* name, const std::string& extra, const engine::Histogram& h) {
    const std::string l = label_ + "," + extra;
    uint64_t cum = 0;
    for (size_t i = 0; i < h.bounds.size(); ++i) {
      cum += h.counts[i];
      out_ << name << "_bucket{" << l << ",le=\"" << num(h.bounds[i]) << "\"} " << cum << "\n";
    }
    cum += h.counts.back();
    out_ << name << "_bucket{" << l << ",le=\"+Inf\"} " << cum << "\n";
    out_ << name << "_sum{" << l << "} " << num(h.sum) << "\n";
    out_ << name << "_count{" << l << "} " << h.count << "\n";
  }
  std::string str() const { return out_.str(); }

 private:
  std::string label_;
  std::ostringstream out_;
};

}  // namespace

std::string prometheus_text(const engine::MetricsSnapshot& m, const std::string& model_name) {
  Writer w(model_name);
  w.scalar("pdserve_requests_running", "gauge", "Requests with a sequence in the running batch.", m.requests_running);
  w.scalar("pdserve_requests_waiting", "gauge", "Requests waiting to be scheduled.", m.requests_waiting);
  w.scalar("pdserve_kv_blocks_total", "gauge", "KV cache blocks in the pool.", m.kv_blocks_total);
  w.scalar("pdserve_kv_blocks_used", "gauge", "KV blocks referenced by running sequences (ref count > 0).", m.kv_blocks_used);
  w.scalar("pdserve_kv_blocks_cached", "gauge", "KV blocks held only by the prefix cache (reusable, evictable).",
           m.kv_blocks_cached);
  w.scalar("pdserve_kv_blocks_free", "gauge", "KV blocks on the free list.", m.kv_blocks_free);
  if (m.kv_block_bytes > 0) {
    w.scalar("pdserve_kv_bytes_total", "gauge", "KV cache pool size in bytes (K+V, all layers, in the KV dtype).",
             m.kv_blocks_total * m.kv_block_bytes);
    w.scalar("pdserve_kv_bytes_used", "gauge", "Bytes of the KV blocks referenced by running sequences.",
             m.kv_blocks_used * m.kv_block_bytes);
  }
  w.scalar("pdserve_prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.",
           m.prefix_cache_queries);
  w.scalar("pdserve_prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache.", m.prefix_cache_hits);
  w.scalar("pdserve_preemptions_total", "counter", "Sequences preempted (recomputed later) for lack of KV blocks.",
           m.preemptions);
  w.scalar("pdserve_prompt_tokens_total", "counter", "Prompt tokens of finished requests (summed usage).", m.prompt_tokens);
  w.scalar("pdserve_generation_tokens_total", "counter", "Generated tokens of finished requests (summed usage).",
           m.generation_tokens);
  w.header("pdserve_request_success_total", "counter", "Finished requests by finish reason.");
  for (const char* reason : {"stop", "length", "abort", "error"}) {
    auto it = m.request_success.find(reason);
    w.labelled("pdserve_request_success_total", std::string("finished_reason=\"") + reason + "\"",
               it == m.request_success.end() ? 0 : static_cast<double>(it->second));
  }
  w.histogram("pdserve_time_to_first_token_seconds", "Time from arrival to the first generated token.", m.ttft);
  w.histogram("pdserve_time_per_output_token_seconds", "Mean time between output tokens of a request.", m.tpot);
  w.histogram("pdserve_e2e_request_latency_seconds", "Time from arrival to the last token.", m.e2e);
  w.histogram("pdserve_request_queue_time_seconds", "Time from arrival to first being scheduled.", m.queue_time);
  if (!m.step_seconds.empty()) {
    w.histogram_header("pdserve_engine_step_seconds",
                       "Duration of one engine step (scheduling, forward pass, sampling), by kind: decode, prefill or mixed.");
    for (const auto& [kind, h] : m.step_seconds) w.histogram_series("pdserve_engine_step_seconds", "kind=\"" + kind + "\"", h);
  }
  if (!m.queue_time_by_class.empty()) {
    w.header("pdserve_class_queue_time_seconds", "histogram", "Time from arrival to first being scheduled, by SLO class.");
    for (const auto& [cls, h] : m.queue_time_by_class) w.histogram_series("pdserve_class_queue_time_seconds", "slo_class=\"" + cls + "\"", h);
  }
  if (m.has_transfer) {
    w.header("pdserve_kv_transfer_bytes_total", "counter", "KV bytes sent (prefill) or received (decode), as on the wire.");
    for (const char* codec : {"none", "zstd"}) {
      auto it = m.kv_transfer_bytes.find(codec);
      w.labelled("pdserve_kv_transfer_bytes_total", std::string("codec=\"") + codec + "\"",
                 it == m.kv_transfer_bytes.end() ? 0 : static_cast<double>(it->second));
    }
    w.histogram("pdserve_kv_transfer_seconds", "Time to transfer one request's KV (first message to first token).",
                m.kv_transfer_seconds);
    w.header("pdserve_kv_transfer_failures_total", "counter", "Failed KV transfer attempts by reason.");
    for (const auto& [reason, n] : m.kv_transfer_failures)
      w.labelled("pdserve_kv_transfer_failures_total", "reason=\"" + reason + "\"", static_cast<double>(n));
    w.scalar("pdserve_remote_prefill_total", "counter", "Requests whose prompt KV was requested from a prefill worker.",
             m.remote_prefills);
    w.scalar("pdserve_local_prefill_total", "counter", "Requests prefilled locally (short uncached part or no prefill worker).",
             m.local_prefills);
    w.scalar("pdserve_kv_recompute_fallback_total", "counter", "Remote prefills that failed and were recomputed locally.",
             m.recompute_fallbacks);
  }
  if (m.has_spec) {  // speculative decoding, as vLLM's spec_decode_* counters
    w.scalar("pdserve_spec_decode_num_drafts_total", "counter", "Verifications of a sequence's proposal.", m.spec_drafts);
    w.scalar("pdserve_spec_decode_num_draft_tokens_total", "counter", "Proposed (draft) tokens verified.",
             m.spec_draft_tokens);
    w.scalar("pdserve_spec_decode_num_accepted_tokens_total", "counter", "Proposed tokens equal to the token emitted.",
             m.spec_accepted_tokens);
    w.header("pdserve_spec_decode_num_accepted_tokens_per_pos", "counter", "Accepted proposals by draft position (0-based).");
    for (size_t i = 0; i < m.spec_accepted_per_pos.size(); ++i)
      w.labelled("pdserve_spec_decode_num_accepted_tokens_per_pos", "position=\"" + std::to_string(i) + "\"",
                 static_cast<double>(m.spec_accepted_per_pos[i]));
  }
  if (!m.kv_store.empty()) {
    // KV store tiers below the pool (kv/kv_tiers.h), one label set per tier.
    auto per_tier = [&](const char* name, const char* help, int64_t engine::KvStoreTierMetrics::*field) {
      w.header(name, "counter", help);
      for (const auto& t : m.kv_store) w.labelled(name, "tier=\"" + t.tier + "\"", static_cast<double>(t.*field));
    };
    per_tier("pdserve_kv_store_hits_total", "KV blocks found (and verified) in a store tier.", &engine::KvStoreTierMetrics::hits);
    per_tier("pdserve_kv_store_misses_total", "KV block lookups a store tier did not have.", &engine::KvStoreTierMetrics::misses);
    per_tier("pdserve_kv_store_writes_total", "KV blocks written to a store tier.", &engine::KvStoreTierMetrics::writes);
    per_tier("pdserve_kv_store_errors_total",
             "Store tier failures: unreachable, timed out, full, a dropped write, or a value rejected as corrupt.",
             &engine::KvStoreTierMetrics::errors);
    w.header("pdserve_kv_store_bytes_total", "counter", "Bytes read from / written to a store tier.");
    for (const auto& t : m.kv_store) {
      w.labelled("pdserve_kv_store_bytes_total", "tier=\"" + t.tier + "\",direction=\"read\"", static_cast<double>(t.bytes_read));
      w.labelled("pdserve_kv_store_bytes_total", "tier=\"" + t.tier + "\",direction=\"write\"", static_cast<double>(t.bytes_written));
    }
    w.header("pdserve_kv_store_up", "gauge", "1 while a store tier answers, 0 during an outage.");
    for (const auto& t : m.kv_store) w.labelled("pdserve_kv_store_up", "tier=\"" + t.tier + "\"", t.up ? 1 : 0);
    w.header("pdserve_kv_store_blocks", "gauge", "KV blocks held by a store tier (tiers that can tell).");
    for (const auto& t : m.kv_store)
      if (t.blocks >= 0) w.labelled("pdserve_kv_store_blocks", "tier=\"" + t.tier + "\"", static_cast<double>(t.blocks));
    w.header("pdserve_kv_store_held_bytes", "gauge", "Bytes held by a store tier (tiers that can tell).");
    for (const auto& t : m.kv_store)
      if (t.bytes >= 0) w.labelled("pdserve_kv_store_held_bytes", "tier=\"" + t.tier + "\"", static_cast<double>(t.bytes));
    w.histogram_header("pdserve_kv_store_latency_seconds", "Latency of one store tier call (op get or put).");
    for (const auto& t : m.kv_store) {
      w.histogram_series("pdserve_kv_store_latency_seconds", "tier=\"" + t.tier + "\",op=\"get\"", t.get_seconds);
      w.histogram_series("pdserve_kv_store_latency_seconds", "tier=\"" + t.tier + "\",op=\"put\"", t.put_seconds);
    }
  }
  if (!m.decode_workers.empty()) {
    w.header("pdserve_router_decode_worker_up", "gauge", "The router's decode workers: 1 healthy, 0 not (gone ones absent).");
    for (const auto& [addr, up] : m.decode_workers)
      w.labelled("pdserve_router_decode_worker_up", "address=\"" + escape_label(addr) + "\"", up);
  }
  if (!m.router_classes.empty()) {  // the planner's input (planner/plan_observer.h)
    auto per_class = [&](const char* name, const char* help, int64_t engine::ClassTraffic::*field) {
      w.header(name, "counter", help);
      for (const auto& [cls, t] : m.router_classes)
        w.labelled(name, "slo_class=\"" + escape_label(cls) + "\"", static_cast<double>(t.*field));
    };
    per_class("pdserve_router_class_requests_total", "Requests the router received, by SLO class.", &engine::ClassTraffic::arrivals);
    per_class("pdserve_router_class_finished_total", "Requests the router finished, by SLO class.", &engine::ClassTraffic::finished);
    per_class("pdserve_router_class_prompt_tokens_total", "Prompt tokens of finished requests, by SLO class.",
              &engine::ClassTraffic::prompt_tokens);
    per_class("pdserve_router_class_generation_tokens_total", "Generated tokens of finished requests, by SLO class.",
              &engine::ClassTraffic::generation_tokens);
    per_class("pdserve_router_class_slo_attained_total",
              "Finished requests within their own TTFT and TPOT targets (none set: met), by SLO class.",
              &engine::ClassTraffic::attained);
  }
  return w.str();
}

std::string process_metrics_text() {
  const HeapUsage h = heap_usage();
  if (h.in_use < 0) return {};
  std::ostringstream out;
  out << "# HELP process_heap_bytes C heap in use: bytes malloc has handed out and not had back (glibc mallinfo2 "
         "uordblks + hblkhd).\n# TYPE process_heap_bytes gauge\nprocess_heap_bytes "
      << num(static_cast<double>(h.in_use)) << "\n";
  out << "# HELP process_heap_free_bytes Bytes malloc's arenas hold that no allocation uses (glibc mallinfo2 "
         "fordblks).\n# TYPE process_heap_free_bytes gauge\nprocess_heap_free_bytes "
      << num(static_cast<double>(h.free)) << "\n";
  return out.str();
}

}  // namespace pdserve::server
