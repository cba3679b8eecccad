// Pieces of the Prometheus text exposition format (prometheus.io/docs/instrumenting/
// exposition_formats) shared by every /metrics writer.
#pragma once

#include <string>

namespace pdserve {

/// The shortest decimal that reads back as `v` (0.005, not 0.0050000000000000001).
std::string prometheus_number(double v);

/// A label value with `\`, `"` and newline escaped as the format requires.
std::string prometheus_label_escape(const std::string& v);

}  // namespace pdserve
