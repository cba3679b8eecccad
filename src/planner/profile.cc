#include "planner/profile.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace pdserve::planner {

using nlohmann::json;

double interpolate(const std::vector<std::pair<double, double>>& pts, double x) {
  if (pts.empty()) return 0;
  double y;
  if (pts.size() == 1) {
    y = pts[0].first == 0 ? pts[0].second : pts[0].second * x / pts[0].first;
  } else {
    size_t i = 1;  // segment [i-1, i] containing x, or the outermost one
    while (i + 1 < pts.size() && pts[i].first < x) ++i;
    const auto& [x0, y0] = pts[i - 1];
    const auto& [x1, y1] = pts[i];
    y = x1 == x0 ? (y0 + y1) / 2 : y0 + (y1 - y0) * (x - x0) / (x1 - x0);
  }
  return std::max(0.0, y);
}

namespace {

/// Sorted (x, mean y) pairs from (x, y) samples.
std::vector<std::pair<double, double>> curve(std::vector<std::pair<double, double>> s) {
  std::sort(s.begin(), s.end());
  std::vector<std::pair<double, double>> out;
  for (size_t i = 0; i < s.size();) {
    size_t j = i;
    double sum = 0;
    for (; j < s.size() && s[j].first == s[i].first; ++j) sum += s[j].second;
    out.push_back({s[i].first, sum / double(j - i)});
    i = j;
  }
  return out;
}

/// Rows keyed by a second coordinate, each a curve over the first.
using Rows = std::vector<std::pair<double, std::vector<std::pair<double, double>>>>;

template <typename P, typename Row, typename X, typename Y>
Rows make_rows(const std::vector<P>& pts, Row row, X xf, Y yf) {
  std::map<double, std::vector<std::pair<double, double>>> m;
  for (const P& p : pts) m[row(p)].push_back({xf(p), yf(p)});
  Rows out;
  for (auto& [k, v] : m) out.push_back({k, curve(v)});
  return out;
}

/// Each row interpolated at x, then the rows' values at r (one row: no dependence on r measured).
double grid(const Rows& rows, double r, double x) {
  if (rows.empty()) return 0;
  if (rows.size() == 1) return interpolate(rows[0].second, x);
  // The two rows around r (or the two outermost), as interpolate() picks its segment.
  size_t i = 1;
  while (i + 1 < rows.size() && rows[i].first < r) ++i;
  std::vector<std::pair<double, double>> two = {{rows[i - 1].first, interpolate(rows[i - 1].second, x)},
                                                {rows[i].first, interpolate(rows[i].second, x)}};
  return interpolate(two, r);
}

}  // namespace

struct Profile::Tables {
  Rows prefill, decode;
  std::vector<std::pair<double, double>> transfer;
};

const Profile::Tables& Profile::tables() const {
  if (!tables_) {
    auto t = std::make_shared<Tables>();
    t->prefill = make_rows(
        prefill, [](const PrefillPoint& p) { return double(p.cached_tokens); },
        [](const PrefillPoint& p) { return double(p.chunk_tokens); }, [](const PrefillPoint& p) { return p.seconds; });
    t->decode = make_rows(
        decode, [](const DecodePoint& p) { return double(p.context); }, [](const DecodePoint& p) { return double(p.batch); },
        [](const DecodePoint& p) { return p.step_seconds; });
    std::vector<std::pair<double, double>> s;
    for (const auto& x : transfer) s.push_back({double(x.bytes), x.seconds});
    t->transfer = curve(s);
    tables_ = std::move(t);
  }
  return *tables_;
}

double Profile::prefill_seconds(int chunk_tokens, int cached_tokens) const {
  if (chunk_tokens <= 0) return 0;
  return grid(tables().prefill, cached_tokens, chunk_tokens);
}

double Profile::decode_step_seconds(int batch, int context) const {
  if (batch <= 0) return 0;
  return grid(tables().decode, context, batch);
}

double Profile::transfer_seconds(std::size_t bytes) const { return interpolate(tables().transfer, double(bytes)); }

namespace {

[[noreturn]] void fail(const std::string& what, const std::string& msg) {
  throw std::runtime_error(what + ": " + msg);
}

const json& field(const json& obj, const char* key, const std::string& path, const std::string& what) {
  if (!obj.is_object()) fail(what, path + " is not an object");
  auto it = obj.find(key);
  if (it == obj.end()) fail(what, "missing field " + (path.empty() ? std::string(key) : path + "." + key));
  return *it;
}

std::string get_string(const json& obj, const char* key, const std::string& path, const std::string& what) {
  const json& v = field(obj, key, path, what);
  if (!v.is_string()) fail(what, "field " + (path.empty() ? std::string(key) : path + "." + key) + " is not a string");
  return v.get<std::string>();
}

double get_number(const json& obj, const char* key, const std::string& path, const std::string& what) {
  const json& v = field(obj, key, path, what);
  std::string name = path.empty() ? std::string(key) : path + "." + key;
  if (!v.is_number()) fail(what, "field " + name + " is not a number");
  double d = v.get<double>();
  if (d < 0) fail(what, "field " + name + " is negative");
  return d;
}

int get_int(const json& obj, const char* key, const std::string& path, const std::string& what) {
  const json& v = field(obj, key, path, what);
  std::string name = path.empty() ? std::string(key) : path + "." + key;
  if (!v.is_number_integer()) fail(what, "field " + name + " is not an integer");
  int64_t i = v.get<int64_t>();
  if (i < 0 || i > INT32_MAX) fail(what, "field " + name + " is out of range");
  return int(i);
}

const json& get_table(const json& obj, const char* key, const std::string& what) {
  const json& v = field(obj, key, "", what);
  if (!v.is_array()) fail(what, std::string("field ") + key + " is not an array");
  if (v.empty()) fail(what, std::string("field ") + key + " is empty");
  return v;
}

}  // namespace

Profile parse_profile(const std::string& text, const std::string& what) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    fail(what, std::string("bad JSON: ") + e.what());
  }
  if (!j.is_object()) fail(what, "not a JSON object");
  std::string format = get_string(j, "format", "", what);
  if (format != "pdserve-profile-v1") fail(what, "format is \"" + format + "\", expected \"pdserve-profile-v1\"");
  Profile p;
  const json& m = field(j, "model", "", what);
  p.model.file = get_string(m, "file", "model", what);
  p.model.architecture = get_string(m, "architecture", "model", what);
  p.model.n_layer = get_int(m, "n_layer", "model", what);
  p.model.n_embd = get_int(m, "n_embd", "model", what);
  p.model.n_head = get_int(m, "n_head", "model", what);
  p.model.n_head_kv = get_int(m, "n_head_kv", "model", what);
  p.model.head_dim = get_int(m, "head_dim", "model", what);
  p.model.n_vocab = get_int(m, "n_vocab", "model", what);
  p.model.weight_type = get_string(m, "weight_type", "model", what);
  p.model.kv_dtype = get_string(m, "kv_dtype", "model", what);
  p.model.block_size = get_int(m, "block_size", "model", what);
  if (m.contains("n_ctx")) p.model.n_ctx = get_int(m, "n_ctx", "model", what);
  const json& mc = field(j, "machine", "", what);
  p.machine.threads = get_int(mc, "threads", "machine", what);
  p.machine.cpu = get_string(mc, "cpu", "machine", what);
  if (mc.contains("idle_gap_seconds")) p.machine.idle_gap_seconds = get_number(mc, "idle_gap_seconds", "machine", what);
  const json& pre = get_table(j, "prefill", what);
  for (size_t i = 0; i < pre.size(); ++i) {
    std::string path = "prefill[" + std::to_string(i) + "]";
    p.prefill.push_back({get_int(pre[i], "chunk_tokens", path, what), get_int(pre[i], "cached_tokens", path, what),
                         get_number(pre[i], "seconds", path, what)});
  }
  const json& dec = get_table(j, "decode", what);
  for (size_t i = 0; i < dec.size(); ++i) {
    std::string path = "decode[" + std::to_string(i) + "]";
    p.decode.push_back({get_int(dec[i], "batch", path, what), get_int(dec[i], "context", path, what),
                        get_number(dec[i], "step_seconds", path, what)});
  }
  const json& tr = get_table(j, "transfer", what);
  for (size_t i = 0; i < tr.size(); ++i) {
    std::string path = "transfer[" + std::to_string(i) + "]";
    p.transfer.push_back({std::size_t(get_number(tr[i], "bytes", path, what)), get_number(tr[i], "seconds", path, what)});
  }
  p.kv_bytes_per_token = get_number(j, "kv_bytes_per_token", "", what);
  if (j.contains("frontend")) p.frontend_seconds = get_number(field(j, "frontend", "", what), "request_seconds", "frontend", what);
  if (j.contains("calibration")) {
    const json& c = field(j, "calibration", "", what);
    p.calibration.decode_scale = get_number(c, "decode_scale", "calibration", what);
    p.calibration.prefill_scale = get_number(c, "prefill_scale", "calibration", what);
    p.calibration.decode_steps = get_int(c, "decode_steps", "calibration", what);
    p.calibration.prefill_steps = get_int(c, "prefill_steps", "calibration", what);
  }
  return p;
}

Profile load_profile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error(path + ": cannot read the profile");
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_profile(ss.str(), path);
}

std::string profile_to_json(const Profile& p) {
  json j;
  j["format"] = "pdserve-profile-v1";
  j["model"] = {{"file", p.model.file},         {"architecture", p.model.architecture},
                {"n_layer", p.model.n_layer},   {"n_embd", p.model.n_embd},
                {"n_head", p.model.n_head},     {"n_head_kv", p.model.n_head_kv},
                {"head_dim", p.model.head_dim}, {"n_vocab", p.model.n_vocab},
                {"weight_type", p.model.weight_type}, {"kv_dtype", p.model.kv_dtype},
                {"block_size", p.model.block_size}};
  if (p.model.n_ctx > 0) j["model"]["n_ctx"] = p.model.n_ctx;
  j["machine"] = {{"threads", p.machine.threads}, {"cpu", p.machine.cpu}, {"idle_gap_seconds", p.machine.idle_gap_seconds}};
  j["prefill"] = json::array();
  for (const auto& x : p.prefill)
    j["prefill"].push_back({{"chunk_tokens", x.chunk_tokens}, {"cached_tokens", x.cached_tokens}, {"seconds", x.seconds}});
  j["decode"] = json::array();
  for (const auto& x : p.decode)
    j["decode"].push_back({{"batch", x.batch}, {"context", x.context}, {"step_seconds", x.step_seconds}});
  j["transfer"] = json::array();
  for (const auto& x : p.transfer) j["transfer"].push_back({{"bytes", x.bytes}, {"seconds", x.seconds}});
  j["kv_bytes_per_token"] = p.kv_bytes_per_token;
  j["frontend"] = {{"request_seconds", p.frontend_seconds}};
  if (p.calibration.calibrated())
    j["calibration"] = {{"decode_scale", p.calibration.decode_scale}, {"prefill_scale", p.calibration.prefill_scale},
                        {"decode_steps", p.calibration.decode_steps}, {"prefill_steps", p.calibration.prefill_steps}};
  return j.dump(1) + "\n";
}

std::string describe(const ProfileModel& m) {
  std::ostringstream o;
  o << m.file << " (" << m.architecture << ", n_layer " << m.n_layer << ", n_embd " << m.n_embd << ", n_head "
    << m.n_head << ", n_head_kv " << m.n_head_kv << ", head_dim " << m.head_dim << ", n_vocab " << m.n_vocab
    << ", weights " << m.weight_type << ", kv " << m.kv_dtype << ", block_size " << m.block_size << ")";
  return o.str();
}

void check_profile_matches(const Profile& p, const ProfileModel& a) {
  const ProfileModel& m = p.model;
  bool same = m.architecture == a.architecture && m.n_layer == a.n_layer && m.n_embd == a.n_embd &&
              m.n_head == a.n_head && m.n_head_kv == a.n_head_kv && m.head_dim == a.head_dim &&
              m.n_vocab == a.n_vocab && m.weight_type == a.weight_type && m.kv_dtype == a.kv_dtype &&
              m.block_size == a.block_size;
  if (!same) throw std::runtime_error("profile is for model " + describe(m) + ", this is " + describe(a));
}

}  // namespace pdserve::planner
