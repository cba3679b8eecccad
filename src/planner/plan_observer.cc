#include "planner/plan_observer.h"

#include <httplib.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>

namespace pdserve::planner {

std::map<std::string, double> parse_prometheus(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    // The value follows the last space outside the braces.
    size_t close = line.rfind('}');
    size_t sp = line.find(' ', close == std::string::npos ? 0 : close);
    if (sp == std::string::npos) continue;
    const std::string key = line.substr(0, sp);
    const char* v = line.c_str() + sp + 1;
    char* end = nullptr;
    const double d = std::strtod(v, &end);
    if (end == v) continue;
    out[key] = d;
  }
  return out;
}

Result<std::string> http_get(const std::string& url, double timeout_s) {
  const std::string prefix = "http://";
  if (url.rfind(prefix, 0) != 0) return Status::InvalidArgument("not an http:// URL: " + url);
  const size_t slash = url.find('/', prefix.size());
  const std::string hostport = url.substr(prefix.size(), slash == std::string::npos ? std::string::npos : slash - prefix.size());
  const std::string path = slash == std::string::npos ? "/" : url.substr(slash);
  const size_t colon = hostport.rfind(':');
  if (colon == std::string::npos) return Status::InvalidArgument("URL without a port: " + url);
  const int port = std::atoi(hostport.c_str() + colon + 1);
  if (port <= 0 || port > 65535) return Status::InvalidArgument("bad port in URL: " + url);
  httplib::Client c(hostport.substr(0, colon), port);
  const auto secs = static_cast<time_t>(timeout_s);
  const auto usecs = static_cast<time_t>((timeout_s - secs) * 1e6);
  c.set_connection_timeout(secs, usecs);
  c.set_read_timeout(secs, usecs);
  auto res = c.Get(path);
  if (!res) {
    std::string why = httplib::to_string(res.error());
    if (res.error() == httplib::Error::Connection) why += " (nothing answers at " + hostport + ", or the host is unknown)";
    return Status::Unavailable("GET " + url + ": " + why);
  }
  if (res->status != 200) return Status::Unavailable("GET " + url + ": HTTP " + std::to_string(res->status));
  return res->body;
}

std::string metric_name(const std::string& key) { return key.substr(0, key.find('{')); }

std::string label_value(const std::string& key, const std::string& label) {
  const size_t open = key.find('{');
  if (open == std::string::npos) return {};
  for (size_t at = open + 1; at < key.size();) {
    const size_t eq = key.find("=\"", at);
    if (eq == std::string::npos) break;
    const std::string k = key.substr(at, eq - at);
    std::string v;
    size_t i = eq + 2;
    for (; i < key.size() && key[i] != '"'; ++i) {
      if (key[i] == '\\' && i + 1 < key.size()) ++i;
      v += key[i];
    }
    if (k == label) return v;
    at = i + 1;
    if (at < key.size() && key[at] == ',') ++at;
  }
  return {};
}

double sum_metric(const std::map<std::string, double>& samples, const std::string& name) {
  double s = 0;
  for (const auto& [k, v] : samples)
    if (metric_name(k) == name) s += v;
  return s;
}

namespace {

// The slo_class label of `key` when it is a sample of metric `name`; "" otherwise.
std::string class_of(const std::string& key, const std::string& name) {
  if (metric_name(key) != name) return {};
  return label_value(key, "slo_class");
}

}  // namespace

Result<RouterSample> parse_router_sample(const std::string& metrics_text, double time_s) {
  RouterSample s;
  s.time_s = time_s;
  bool router = false;
  for (const auto& [key, v] : parse_prometheus(metrics_text)) {
    if (key.rfind("pdserve_", 0) == 0) router = true;
    if (metric_name(key) == "pdserve_prefix_cache_queries_total") s.prefix_queries += v;
    if (metric_name(key) == "pdserve_prefix_cache_hits_total") s.prefix_hits += v;
    static const std::pair<const char*, double RouterSample::PerClass::*> fields[] = {
        {"pdserve_router_class_requests_total", &RouterSample::PerClass::arrivals},
        {"pdserve_router_class_finished_total", &RouterSample::PerClass::finished},
        {"pdserve_router_class_prompt_tokens_total", &RouterSample::PerClass::prompt_tokens},
        {"pdserve_router_class_generation_tokens_total", &RouterSample::PerClass::generation_tokens},
        {"pdserve_router_class_slo_attained_total", &RouterSample::PerClass::attained}};
    for (auto [name, field] : fields)
      if (std::string c = class_of(key, name); !c.empty()) s.classes[c].*field = v;
  }
  // A router without workers or requests yet has no pdserve_router_* series: any
  // pdserve page is accepted, a page of something else is not.
  if (!router) return Status::InvalidArgument("the page has no pdserve_* metrics: is the URL a pdserve router?");
  return s;
}

double forecast_linear(const std::deque<double>& v) {
  const size_t n = v.size();
  if (n == 0) return 0;
  if (n < 3) return v.back();
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < n; ++i) {
    sx += i;
    sy += v[i];
    sxx += double(i) * i;
    sxy += i * v[i];
  }
  const double slope = (n * sxy - sx * sy) / (n * sxx - sx * sx);
  const double icpt = (sy - slope * sx) / n;
  return std::max(0.0, icpt + slope * n);
}

Observation Observer::add(const RouterSample& s) {
  Observation o;
  if (!has_prev_) {
    has_prev_ = true;
    prev_ = s;
    for (const auto& [c, p] : s.classes) o.classes[c];
    return o;
  }
  const double dt = std::max(1e-3, s.time_s - prev_.time_s);
  o.interval_s = dt;
  double fin = 0, att = 0;
  for (const auto& [c, p] : s.classes) {
    RouterSample::PerClass q;
    if (auto it = prev_.classes.find(c); it != prev_.classes.end()) q = it->second;
    ClassObservation& co = o.classes[c];
    co.rate = std::max(0.0, p.arrivals - q.arrivals) / dt;
    co.finished = std::max(0.0, p.finished - q.finished);
    co.attained = std::max(0.0, p.attained - q.attained);
    auto& len = last_lengths_[c];
    if (co.finished > 0) len = {(p.prompt_tokens - q.prompt_tokens) / co.finished, (p.generation_tokens - q.generation_tokens) / co.finished};
    else if (len.first == 0 && p.finished > 0) len = {p.prompt_tokens / p.finished, p.generation_tokens / p.finished};
    co.input_tokens = len.first;
    co.output_tokens = len.second;
    auto& h = history_[c];
    h.push_back(co.rate);
    while (static_cast<int>(h.size()) > window_) h.pop_front();
    co.forecast = forecast_linear(h);
    fin += co.finished;
    att += co.attained;
  }
  const double dq = s.prefix_queries - prev_.prefix_queries;
  if (dq > 0) last_cached_ = std::clamp((s.prefix_hits - prev_.prefix_hits) / dq, 0.0, 1.0);
  o.cached_fraction = last_cached_;
  o.attainment = fin > 0 ? att / fin : -1;
  prev_ = s;
  return o;
}

}  // namespace pdserve::planner
