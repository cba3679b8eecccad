// Test helper: the samples of a Prometheus text page (exposition format 0.0.4), as
// /metrics of pdserve serves it: one `name{label="value",...} value` per line, `#` lines
// for HELP/TYPE.
#pragma once

#include <cstdlib>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace pdserve::testing {

/// One sample line: metric name, labels in the order written (values unescaped only of
/// `\"`), value.
struct MetricSample {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;
  double value = 0;

  /// `name{k="v",...}` with the labels in the order written (`name` alone without labels).
  std::string key() const {
    std::string k = name;
    for (size_t i = 0; i < labels.size(); ++i)
      k += (i ? "," : "{") + labels[i].first + "=\"" + labels[i].second + "\"";
    return labels.empty() ? k : k + "}";
  }
  /// The value of label `label`, or nullopt.
  std::optional<std::string> label(const std::string& label) const {
    for (const auto& [k, v] : labels)
      if (k == label) return v;
    return std::nullopt;
  }
};

/// The samples of `text`, in page order; comment, blank and malformed lines are skipped.
inline std::vector<MetricSample> parse_prometheus_text(const std::string& text) {
  std::vector<MetricSample> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    MetricSample s;
    size_t i = line.find_first_of("{ ");
    if (i == std::string::npos || i == 0) continue;
    s.name = line.substr(0, i);
    if (line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        const size_t eq = line.find("=\"", i);
        if (eq == std::string::npos) break;
        std::string value;
        size_t j = eq + 2;
        for (; j < line.size() && line[j] != '"'; ++j) {
          if (line[j] == '\\' && j + 1 < line.size()) ++j;
          value += line[j];
        }
        s.labels.emplace_back(line.substr(i, eq - i), std::move(value));
        i = j + 1;
        if (i < line.size() && line[i] == ',') ++i;
      }
      if (i >= line.size()) continue;
      ++i;  // '}'
    }
    const char* begin = line.c_str() + i;
    char* end = nullptr;
    s.value = std::strtod(begin, &end);
    if (end == begin) continue;
    out.push_back(std::move(s));
  }
  return out;
}

/// Sum of the samples named `name` that carry label `label` = `value` (every sample of
/// `name` when `label` is empty); 0 when there is none.
inline double sum_samples(const std::vector<MetricSample>& samples, const std::string& name,
                          const std::string& label = "", const std::string& value = "") {
  double sum = 0;
  for (const auto& s : samples)
    if (s.name == name && (label.empty() || s.label(label) == value)) sum += s.value;
  return sum;
}

/// The value of the first sample named `name`, or nullopt.
inline std::optional<double> first_sample(const std::vector<MetricSample>& samples, const std::string& name) {
  for (const auto& s : samples)
    if (s.name == name) return s.value;
  return std::nullopt;
}

/// Samples by MetricSample::key() after removing label `drop` (e.g. "model_name", so
/// that tests can name a sample without it).
inline std::map<std::string, double> samples_by_key(std::vector<MetricSample> samples, const std::string& drop = "") {
  std::map<std::string, double> out;
  for (auto& s : samples) {
    std::erase_if(s.labels, [&](const auto& kv) { return kv.first == drop; });
    out[s.key()] = s.value;
  }
  return out;
}

}  // namespace pdserve::testing
