#include "loadgen/trace.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <fstream>

#include <nlohmann/json.hpp>

namespace pdserve::loadgen {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

void sort_and_rebase(std::vector<TraceEntry>& v) {
  std::stable_sort(v.begin(), v.end(),
                   [](const TraceEntry& a, const TraceEntry& b) { return a.timestamp_s < b.timestamp_s; });
  if (v.empty()) return;
  const double t0 = v.front().timestamp_s;
  for (auto& e : v) e.timestamp_s -= t0;
}

bool parse_int(std::string_view s, int64_t* out) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
int64_t days_from_civil(int64_t y, int64_t m, int64_t d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

}  // namespace

Result<TraceFormat> parse_trace_format(std::string_view name) {
  const std::string n = lower(name);
  if (n == "mooncake") return TraceFormat::Mooncake;
  if (n == "azure") return TraceFormat::Azure;
  return Status::InvalidArgument("unknown trace format '" + std::string(name) + "' (expected mooncake or azure)");
}

const char* trace_format_name(TraceFormat f) { return f == TraceFormat::Mooncake ? "mooncake" : "azure"; }

bool parse_datetime(std::string_view t, int64_t* seconds, double* fraction) {
  // YYYY-MM-DD HH:MM:SS[.f+]
  if (t.size() < 19 || t[4] != '-' || t[7] != '-' || (t[10] != ' ' && t[10] != 'T') || t[13] != ':' ||
      t[16] != ':')
    return false;
  int64_t Y, M, D, h, m, s;
  if (!parse_int(t.substr(0, 4), &Y) || !parse_int(t.substr(5, 2), &M) || !parse_int(t.substr(8, 2), &D) ||
      !parse_int(t.substr(11, 2), &h) || !parse_int(t.substr(14, 2), &m) || !parse_int(t.substr(17, 2), &s))
    return false;
  if (M < 1 || M > 12 || D < 1 || D > 31 || h > 23 || m > 59 || s > 60) return false;
  double frac = 0;
  std::string_view rest = t.substr(19);
  if (!rest.empty()) {
    if (rest[0] != '.' || rest.size() < 2) return false;
    double scale = 0.1;
    for (char c : rest.substr(1)) {
      if (c < '0' || c > '9') return false;
      frac += (c - '0') * scale;
      scale /= 10;
    }
  }
  *seconds = days_from_civil(Y, M, D) * 86400 + h * 3600 + m * 60 + s;
  *fraction = frac;
  return true;
}

Result<std::vector<TraceEntry>> read_mooncake_trace(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("cannot open trace " + path);
  std::vector<TraceEntry> out;
  std::string line;
  size_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(lineno) + ": ";
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) return Status::InvalidArgument(where + "not a JSON object");
    auto num = [&](const char* key, bool required, double* v) -> bool {
      auto it = j.find(key);
      if (it == j.end() || !it->is_number()) return !required;
      *v = it->get<double>();
      return true;
    };
    double ts = 0, in_len = 0, out_len = 0;
    if (!num("timestamp", true, &ts) || !num("input_length", true, &in_len) || !num("output_length", true, &out_len))
      return Status::InvalidArgument(where + "needs numeric timestamp, input_length and output_length");
    TraceEntry e;
    e.timestamp_s = ts / 1000.0;
    e.input_len = static_cast<int64_t>(in_len);
    e.output_len = static_cast<int64_t>(out_len);
    if (auto it = j.find("hash_ids"); it != j.end()) {
      if (!it->is_array()) return Status::InvalidArgument(where + "hash_ids is not an array");
      for (const auto& h : *it) {
        if (!h.is_number_integer()) return Status::InvalidArgument(where + "hash_ids holds a non-integer");
        e.hash_ids.push_back(h.get<int64_t>());
      }
    }
    out.push_back(std::move(e));
  }
  sort_and_rebase(out);
  return out;
}

Result<std::vector<TraceEntry>> read_azure_trace(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("cannot open trace " + path);
  std::string line;
  if (!std::getline(in, line)) return Status::InvalidArgument(path + ": empty file");
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (lower(line).rfind("timestamp,contexttokens,generatedtokens", 0) != 0)
    return Status::InvalidArgument(path + ": expected the header TIMESTAMP,ContextTokens,GeneratedTokens");
  std::vector<TraceEntry> out;
  std::vector<std::pair<int64_t, double>> stamps;
  size_t lineno = 1;
  while (std::getline(in, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const std::string where = path + ":" + std::to_string(lineno) + ": ";
    const size_t c1 = line.find(',');
    const size_t c2 = c1 == std::string::npos ? c1 : line.find(',', c1 + 1);
    if (c2 == std::string::npos) return Status::InvalidArgument(where + "expected 3 comma-separated fields");
    int64_t sec = 0;
    double frac = 0;
    TraceEntry e;
    if (!parse_datetime(std::string_view(line).substr(0, c1), &sec, &frac))
      return Status::InvalidArgument(where + "bad TIMESTAMP '" + line.substr(0, c1) + "'");
    if (!parse_int(std::string_view(line).substr(c1 + 1, c2 - c1 - 1), &e.input_len) ||
        !parse_int(std::string_view(line).substr(c2 + 1), &e.output_len))
      return Status::InvalidArgument(where + "bad token counts");
    stamps.emplace_back(sec, frac);
    out.push_back(std::move(e));
  }
  if (!stamps.empty()) {
    // Relative to the earliest stamp, in integer seconds first so the fraction keeps its digits.
    const auto base = *std::min_element(stamps.begin(), stamps.end());
    for (size_t i = 0; i < out.size(); ++i)
      out[i].timestamp_s = static_cast<double>(stamps[i].first - base.first) + (stamps[i].second - base.second);
  }
  sort_and_rebase(out);
  return out;
}

Result<std::vector<TraceEntry>> read_trace(TraceFormat format, const std::string& path) {
  return format == TraceFormat::Mooncake ? read_mooncake_trace(path) : read_azure_trace(path);
}

}  // namespace pdserve::loadgen
