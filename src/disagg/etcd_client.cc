#include "disagg/etcd_client.h"

#include <curl/curl.h>
#include <openssl/evp.h>

#include <memory>
#include <nlohmann/json.hpp>

namespace pdserve::disagg {

using nlohmann::json;

namespace {

// int64 fields arrive as JSON strings ("123"); absent fields are zero.
int64_t int_field(const json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end()) return 0;
  if (it->is_string()) return std::stoll(it->get<std::string>());
  if (it->is_number_integer()) return it->get<int64_t>();
  return 0;
}

// The key just past every key starting with `prefix` (etcd's range_end for a prefix).
std::string prefix_end(std::string p) {
  while (!p.empty()) {
    if (static_cast<unsigned char>(p.back()) < 0xff) {
      p.back() = static_cast<char>(p.back() + 1);
      return p;
    }
    p.pop_back();
  }
  return std::string(1, '\0');
}

Result<EtcdKv> kv_from_json(const json& j) {
  EtcdKv kv;
  auto k = base64_decode(j.value("key", std::string()));
  if (!k.ok()) return k.status();
  kv.key = k.value();
  auto v = base64_decode(j.value("value", std::string()));
  if (!v.ok()) return v.status();
  kv.value = v.value();
  kv.mod_revision = int_field(j, "mod_revision");
  kv.lease = int_field(j, "lease");
  return kv;
}

struct CurlDeleter {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};

size_t append_body(char* data, size_t size, size_t n, void* user) {
  static_cast<std::string*>(user)->append(data, size * n);
  return size * n;
}

// The etcd error text of a gateway reply ({"error": ..., "message": ...}), if any.
std::string gateway_error(const json& j) {
  if (j.contains("message") && j["message"].is_string()) return j["message"].get<std::string>();
  if (j.contains("error") && j["error"].is_string()) return j["error"].get<std::string>();
  return {};
}

}  // namespace

std::string base64_encode(const std::string& s) {
  std::string out(4 * ((s.size() + 2) / 3), '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(s.data()), static_cast<int>(s.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

Result<std::string> base64_decode(const std::string& s) {
  if (s.empty()) return std::string();
  if (s.size() % 4 != 0) return Status::InvalidArgument("bad base64 length");
  std::string out(3 * s.size() / 4, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(s.data()), static_cast<int>(s.size()));
  if (n < 0) return Status::InvalidArgument("bad base64");
  size_t pad = 0;
  while (pad < 2 && s[s.size() - 1 - pad] == '=') ++pad;
  out.resize(static_cast<size_t>(n) - pad);
  return out;
}

EtcdClient::EtcdClient(std::string host, int port, int timeout_ms)
    : endpoint_("http://" + host + ":" + std::to_string(port)), timeout_ms_(timeout_ms) {
  static const bool inited = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
  (void)inited;
}

Result<std::string> EtcdClient::post(const std::string& path, const std::string& body) {
  std::unique_ptr<CURL, CurlDeleter> c(curl_easy_init());
  if (!c) return Status::Internal("curl_easy_init failed");
  std::string out;
  const std::string url = endpoint_ + path;
  curl_easy_setopt(c.get(), CURLOPT_URL, url.c_str());
  curl_easy_setopt(c.get(), CURLOPT_POSTFIELDS, body.c_str());
  curl_easy_setopt(c.get(), CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
  curl_easy_setopt(c.get(), CURLOPT_TIMEOUT_MS, static_cast<long>(timeout_ms_));
  curl_easy_setopt(c.get(), CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(timeout_ms_));
  curl_easy_setopt(c.get(), CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c.get(), CURLOPT_WRITEFUNCTION, append_body);
  curl_easy_setopt(c.get(), CURLOPT_WRITEDATA, &out);
  const CURLcode rc = curl_easy_perform(c.get());
  if (rc != CURLE_OK) return Status::Unavailable("etcd " + endpoint_ + ": " + curl_easy_strerror(rc));
  long code = 0;
  curl_easy_getinfo(c.get(), CURLINFO_RESPONSE_CODE, &code);
  if (code != 200) {
    const json j = json::parse(out, nullptr, false);
    const std::string why = j.is_discarded() ? out.substr(0, 200) : gateway_error(j);
    return Status::Unavailable("etcd " + endpoint_ + path + ": HTTP " + std::to_string(code) + ": " + why);
  }
  return out;
}

Result<int64_t> EtcdClient::grant(int ttl_s) {
  auto r = post("/v3/lease/grant", json{{"TTL", ttl_s}}.dump());
  if (!r.ok()) return r.status();
  const json j = json::parse(r.value(), nullptr, false);
  if (j.is_discarded()) return Status::DataLoss("etcd lease/grant: not JSON");
  const int64_t id = int_field(j, "ID");
  if (id == 0) return Status::Unavailable("etcd lease/grant: " + gateway_error(j));
  return id;
}

Result<int64_t> EtcdClient::keepalive(int64_t lease) {
  auto r = post("/v3/lease/keepalive", json{{"ID", std::to_string(lease)}}.dump());
  if (!r.ok()) return r.status();
  // A streaming call: one {"result": ...} line per keep-alive sent (here one).
  const json j = json::parse(r.value().substr(0, r.value().find('\n')), nullptr, false);
  if (j.is_discarded() || !j.contains("result")) return Status::DataLoss("etcd lease/keepalive: unexpected reply");
  return int_field(j["result"], "TTL");
}

Status EtcdClient::revoke(int64_t lease) {
  auto r = post("/v3/lease/revoke", json{{"ID", std::to_string(lease)}}.dump());
  return r.ok() ? Status::Ok() : r.status();
}

Status EtcdClient::put(const std::string& key, const std::string& value, int64_t lease) {
  json body{{"key", base64_encode(key)}, {"value", base64_encode(value)}};
  if (lease != 0) body["lease"] = std::to_string(lease);
  auto r = post("/v3/kv/put", body.dump());
  return r.ok() ? Status::Ok() : r.status();
}

Result<std::vector<EtcdKv>> EtcdClient::range_prefix(const std::string& prefix, int64_t* revision) {
  auto r = post("/v3/kv/range", json{{"key", base64_encode(prefix)}, {"range_end", base64_encode(prefix_end(prefix))}}.dump());
  if (!r.ok()) return r.status();
  const json j = json::parse(r.value(), nullptr, false);
  if (j.is_discarded()) return Status::DataLoss("etcd kv/range: not JSON");
  if (revision && j.contains("header")) *revision = int_field(j["header"], "revision");
  std::vector<EtcdKv> out;
  if (j.contains("kvs"))
    for (const json& kv : j["kvs"]) {
      auto k = kv_from_json(kv);
      if (!k.ok()) return k.status();
      out.push_back(std::move(k.value()));
    }
  return out;
}

namespace {

struct WatchState {
  std::string buf;
  const std::function<void(const std::vector<EtcdEvent>&)>* on_events;
  const std::atomic<bool>* stop;
  Status error;
};

size_t watch_body(char* data, size_t size, size_t n, void* user) {
  auto* st = static_cast<WatchState*>(user);
  st->buf.append(data, size * n);
  size_t nl;
  while ((nl = st->buf.find('\n')) != std::string::npos) {
    const json j = json::parse(st->buf.substr(0, nl), nullptr, false);
    st->buf.erase(0, nl + 1);
    if (j.is_discarded()) continue;
    if (j.contains("error")) {
      st->error = Status::Unavailable("etcd watch: " + j["error"].dump());
      return 0;
    }
    if (!j.contains("result")) continue;
    const json& res = j["result"];
    if (res.value("canceled", false)) {
      st->error = Status::Unavailable("etcd watch cancelled: " + res.value("cancel_reason", std::string()));
      return 0;
    }
    std::vector<EtcdEvent> events;
    if (res.contains("events"))
      for (const json& e : res["events"]) {
        EtcdEvent ev;
        ev.is_delete = e.value("type", std::string()) == "DELETE";
        if (!e.contains("kv")) continue;
        auto kv = kv_from_json(e["kv"]);
        if (!kv.ok()) continue;
        ev.kv = std::move(kv.value());
        events.push_back(std::move(ev));
      }
    if (!events.empty()) (*st->on_events)(events);
  }
  return st->stop->load() ? 0 : size * n;
}

int watch_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  return static_cast<WatchState*>(user)->stop->load() ? 1 : 0;
}

}  // namespace

Status EtcdClient::watch_prefix(const std::string& prefix, int64_t start_revision,
                                const std::function<void(const std::vector<EtcdEvent>&)>& on_events,
                                const std::atomic<bool>& stop, int max_ms) {
  std::unique_ptr<CURL, CurlDeleter> c(curl_easy_init());
  if (!c) return Status::Internal("curl_easy_init failed");
  json create{{"key", base64_encode(prefix)}, {"range_end", base64_encode(prefix_end(prefix))}};
  if (start_revision > 0) create["start_revision"] = std::to_string(start_revision);
  const std::string body = json{{"create_request", create}}.dump();
  const std::string url = endpoint_ + "/v3/watch";
  WatchState st{{}, &on_events, &stop, Status::Ok()};
  curl_easy_setopt(c.get(), CURLOPT_URL, url.c_str());
  curl_easy_setopt(c.get(), CURLOPT_POSTFIELDS, body.c_str());
  curl_easy_setopt(c.get(), CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
  curl_easy_setopt(c.get(), CURLOPT_TIMEOUT_MS, static_cast<long>(max_ms));
  curl_easy_setopt(c.get(), CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(timeout_ms_));
  curl_easy_setopt(c.get(), CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c.get(), CURLOPT_WRITEFUNCTION, watch_body);
  curl_easy_setopt(c.get(), CURLOPT_WRITEDATA, &st);
  curl_easy_setopt(c.get(), CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(c.get(), CURLOPT_XFERINFOFUNCTION, watch_progress);
  curl_easy_setopt(c.get(), CURLOPT_XFERINFODATA, &st);
  const CURLcode rc = curl_easy_perform(c.get());
  if (stop.load() || rc == CURLE_OPERATION_TIMEDOUT) return Status::Ok();
  if (!st.error.ok()) return st.error;
  if (rc != CURLE_OK) return Status::Unavailable("etcd watch " + endpoint_ + ": " + curl_easy_strerror(rc));
  return Status::Unavailable("etcd watch " + endpoint_ + ": the stream ended");
}

}  // namespace pdserve::disagg
