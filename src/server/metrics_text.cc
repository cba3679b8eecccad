#include "server/metrics_text.h"

#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace pdserve::server {

namespace {

std::string escape_label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

// The shortest decimal that reads back as v (0.005, not 0.0050000000000000001).
std::string num(double v) {
  char buf[64];
  for (int prec = 6; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

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
  if (!m.decode_workers.empty()) {
    w.header("pdserve_router_decode_worker_up", "gauge", "The router's decode workers: 1 healthy, 0 not (gone ones absent).");
    for (const auto& [addr, up] : m.decode_workers)
      w.labelled("pdserve_router_decode_worker_up", "address=\"" + escape_label(addr) + "\"", up);
  }
  return w.str();
}

}  // namespace pdserve::server
