#include "loadgen/stream_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <mutex>
#include <numeric>

#include <nlohmann/json.hpp>

#include "base/clock.h"
#include "loadgen/sse_parser.h"

namespace pdserve::loadgen {
namespace {

constexpr size_t kKeepRawBytes = 2048;  // of a response body, for error messages

struct Transfer {
  size_t index = 0;
  CURL* easy = nullptr;
  curl_slist* headers = nullptr;
  SseParser parser;
  std::string raw;  // the first kKeepRawBytes of the body
  RequestRecord* rec = nullptr;
  double t0 = 0;
  int64_t* chunks = nullptr;
};

size_t on_body(char* ptr, size_t size, size_t nmemb, void* user) {
  auto* tr = static_cast<Transfer*>(user);
  const double t = now_seconds() - tr->t0;
  const size_t n = size * nmemb;
  if (tr->raw.size() < kKeepRawBytes) tr->raw.append(ptr, std::min(n, kKeepRawBytes - tr->raw.size()));
  for (const std::string& ev : tr->parser.feed(std::string_view(ptr, n))) {
    const size_t before = tr->rec->chunk_s.size();
    apply_sse_event(ev, t, *tr->rec);
    *tr->chunks += static_cast<int64_t>(tr->rec->chunk_s.size() - before);
  }
  return n;
}

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  if (s.size() > 300) s = s.substr(0, 300) + "...";
  return s;
}

}  // namespace

void apply_sse_event(const std::string& data, double t, RequestRecord& rec) {
  if (data == "[DONE]") {
    rec.done_marker = true;
    return;
  }
  const nlohmann::json j = nlohmann::json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return;
  if (auto e = j.find("error"); e != j.end() && !e->is_null()) {
    std::string msg = "error event";
    if (e->is_object() && e->contains("message") && (*e)["message"].is_string()) msg = (*e)["message"].get<std::string>();
    else if (e->is_string()) msg = e->get<std::string>();
    if (rec.error.empty()) rec.error = "server error: " + one_line(msg);
    return;
  }
  if (auto c = j.find("choices"); c != j.end() && c->is_array() && !c->empty()) {
    const nlohmann::json& ch = (*c)[0];
    bool has_text = false;
    if (auto it = ch.find("text"); it != ch.end() && it->is_string()) has_text = !it->get_ref<const std::string&>().empty();
    if (auto d = ch.find("delta"); d != ch.end() && d->is_object()) {
      if (auto it = d->find("content"); it != d->end() && it->is_string())
        has_text = has_text || !it->get_ref<const std::string&>().empty();
    }
    if (has_text) {
      if (rec.first_token_s < 0) rec.first_token_s = t;
      rec.chunk_s.push_back(t);
    }
  }
  if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
    if (auto p = u->find("prompt_tokens"); p != u->end() && p->is_number_integer()) rec.usage_prompt_tokens = p->get<int64_t>();
    if (auto p = u->find("completion_tokens"); p != u->end() && p->is_number_integer())
      rec.usage_completion_tokens = p->get<int64_t>();
  }
}

std::vector<RequestRecord> run_requests(const std::vector<RequestSpec>& specs, const ClientOptions& opts,
                                        const std::function<void(const ClientProgress&)>& on_progress) {
  global_init();
  std::vector<RequestRecord> recs(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) recs[i].arrival_s = specs[i].arrival_s;
  std::vector<size_t> order(specs.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return specs[a].arrival_s < specs[b].arrival_s; });

  CURLM* multi = curl_multi_init();
  curl_multi_setopt(multi, CURLMOPT_MAX_HOST_CONNECTIONS, 0L);
  if (opts.max_concurrency > 0) curl_multi_setopt(multi, CURLMOPT_MAXCONNECTS, static_cast<long>(opts.max_concurrency));

  const double t0 = now_seconds();
  auto elapsed = [&] { return now_seconds() - t0; };
  ClientProgress prog;
  prog.total = specs.size();
  std::vector<std::unique_ptr<Transfer>> live;  // in flight
  size_t next = 0;

  auto launch = [&](size_t idx) {
    auto tr = std::make_unique<Transfer>();
    tr->index = idx;
    tr->rec = &recs[idx];
    tr->t0 = t0;
    tr->chunks = &prog.chunks;
    CURL* e = curl_easy_init();
    tr->easy = e;
    tr->headers = curl_slist_append(tr->headers, "Content-Type: application/json");
    tr->headers = curl_slist_append(tr->headers, "Accept: text/event-stream");
    tr->headers = curl_slist_append(tr->headers, "Expect:");
    if (!opts.api_key.empty())
      tr->headers = curl_slist_append(tr->headers, ("Authorization: Bearer " + opts.api_key).c_str());
    curl_easy_setopt(e, CURLOPT_URL, opts.url.c_str());
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, tr->headers);
    curl_easy_setopt(e, CURLOPT_POST, 1L);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, specs[idx].body.data());
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(specs[idx].body.size()));
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, tr.get());
    curl_easy_setopt(e, CURLOPT_PRIVATE, tr.get());
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    if (opts.request_timeout_s > 0)
      curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(std::llround(opts.request_timeout_s * 1000)));
    recs[idx].send_s = elapsed();
    curl_multi_add_handle(multi, e);
    live.push_back(std::move(tr));
    ++prog.sent;
  };

  auto finish = [&](CURL* e, CURLcode code) {
    Transfer* tr = nullptr;
    curl_easy_getinfo(e, CURLINFO_PRIVATE, reinterpret_cast<char**>(&tr));
    RequestRecord& r = *tr->rec;
    const double t = elapsed();
    for (const std::string& ev : tr->parser.feed("\n\n")) apply_sse_event(ev, t, r);
    long status = 0;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
    r.http_status = static_cast<int>(status);
    r.end_s = t;
    if (code != CURLE_OK) {
      r.error = std::string("transfer failed: ") + curl_easy_strerror(code);
    } else if (status != 200) {
      r.error = "HTTP " + std::to_string(status) + ": " + one_line(tr->raw);
    } else if (r.error.empty() && r.chunk_s.empty()) {
      r.error = "no tokens received";
    }
    r.ok = r.error.empty();
    ++prog.finished;
    if (!r.ok) ++prog.failed;
    curl_multi_remove_handle(multi, e);
    curl_easy_cleanup(e);
    curl_slist_free_all(tr->headers);
    live.erase(std::find_if(live.begin(), live.end(), [&](const auto& p) { return p.get() == tr; }));
  };

  double last_progress = -1e9;
  while (true) {
    double now = elapsed();
    if (opts.duration_s > 0 && now >= opts.duration_s) next = order.size();  // stop sending
    while (next < order.size() && specs[order[next]].arrival_s <= now &&
           (opts.max_concurrency <= 0 || static_cast<int>(live.size()) < opts.max_concurrency)) {
      launch(order[next++]);
      now = elapsed();
    }
    if (live.empty() && next >= order.size()) break;

    int running = 0;
    curl_multi_perform(multi, &running);
    int left = 0;
    while (CURLMsg* m = curl_multi_info_read(multi, &left)) {
      if (m->msg == CURLMSG_DONE) finish(m->easy_handle, m->data.result);
    }
    prog.in_flight = live.size();
    now = elapsed();
    if (on_progress && now - last_progress >= opts.progress_interval_s) {
      prog.elapsed_s = now;
      on_progress(prog);
      last_progress = now;
    }
    // Sleep until a socket is ready, the next arrival, or the next progress tick.
    double wait_s = opts.progress_interval_s > 0 ? opts.progress_interval_s : 0.2;
    if (next < order.size() && (opts.max_concurrency <= 0 || static_cast<int>(live.size()) < opts.max_concurrency))
      wait_s = std::min(wait_s, std::max(0.0, specs[order[next]].arrival_s - now));
    if (opts.duration_s > 0 && next < order.size()) wait_s = std::min(wait_s, std::max(0.0, opts.duration_s - now));
    if (live.empty() && wait_s <= 0) continue;
    curl_multi_poll(multi, nullptr, 0, static_cast<int>(std::ceil(wait_s * 1000)), nullptr);
  }
  curl_multi_cleanup(multi);
  prog.in_flight = 0;
  prog.elapsed_s = elapsed();
  if (on_progress) on_progress(prog);
  return recs;
}

}  // namespace pdserve::loadgen
