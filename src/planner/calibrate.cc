#include "planner/calibrate.h"

#include <algorithm>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "planner/simulator.h"

namespace pdserve::planner {

using nlohmann::json;

CalibrationResult calibrate_profile(Profile& p, const std::vector<engine::StepSample>& steps, int min_steps) {
  CalibrationResult r;
  double decode_actual = 0, decode_predicted = 0;
  std::vector<double> prefill_ratios;
  for (const engine::StepSample& s : steps) {
    r.last_seq = std::max(r.last_seq, s.seq);
    if (s.decodes > 0 && !s.chunks.empty()) {
      ++r.mixed_steps;
    } else if (s.decodes > 0) {
      ++r.decode_steps;
      decode_actual += s.seconds;
      decode_predicted += step_seconds(p, s.decodes, s.mean_context, {});
    } else if (!s.chunks.empty()) {
      ++r.prefill_steps;
      const double predicted = step_seconds(p, 0, 0, s.chunks);
      if (predicted > 0) prefill_ratios.push_back(s.seconds / predicted);
    }
  }
  if (r.decode_steps + r.prefill_steps == 0)
    throw std::runtime_error("calibrate: no decode-only or prefill-only step to calibrate with (" +
                             std::to_string(steps.size()) + " steps, " + std::to_string(r.mixed_steps) + " mixed)");
  if (r.decode_steps >= min_steps && decode_predicted > 0) {
    r.decode_scale = decode_actual / decode_predicted;
    r.decode_scale_fitted = true;
  }
  if (r.prefill_steps >= min_steps && !prefill_ratios.empty()) {
    const size_t n = prefill_ratios.size();
    std::nth_element(prefill_ratios.begin(), prefill_ratios.begin() + n / 2, prefill_ratios.end());
    double median = prefill_ratios[n / 2];
    if (n % 2 == 0) median = (median + *std::max_element(prefill_ratios.begin(), prefill_ratios.begin() + n / 2)) / 2;
    r.prefill_scale = median;
    r.prefill_scale_fitted = true;
  }
  for (DecodePoint& d : p.decode) d.step_seconds *= r.decode_scale;
  for (PrefillPoint& x : p.prefill) x.seconds *= r.prefill_scale;
  p.reset_tables();
  p.calibration.decode_scale *= r.decode_scale;
  p.calibration.prefill_scale *= r.prefill_scale;
  // Only the steps of a kind whose scale was fitted count as calibration.
  if (r.decode_scale_fitted) p.calibration.decode_steps += r.decode_steps;
  if (r.prefill_scale_fitted) p.calibration.prefill_steps += r.prefill_steps;
  return r;
}

namespace {

[[noreturn]] void fail(const std::string& what, const std::string& msg) { throw std::runtime_error(what + ": " + msg); }

const json& member(const json& o, const char* key, const std::string& what) {
  if (!o.is_object() || !o.contains(key)) fail(what, std::string("missing field ") + key);
  return o.at(key);
}

}  // namespace

std::vector<engine::StepSample> parse_engine_steps(const std::string& text, const Profile& p, const std::string& what) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) fail(what, "not a JSON object (is this a pdserve engine's /engine/steps?)");
  try {
    const json& l = member(j, "kv_layout", what);
    const int n_layer = l.at("n_layer").get<int>(), n_head_kv = l.at("n_head_kv").get<int>(),
              head_dim = l.at("head_dim").get<int>(), block_size = l.at("block_size").get<int>();
    const std::string kv_dtype = l.at("kv_dtype").get<std::string>();
    const ProfileModel& m = p.model;
    if (n_layer != m.n_layer || n_head_kv != m.n_head_kv || head_dim != m.head_dim || block_size != m.block_size ||
        kv_dtype != m.kv_dtype)
      fail(what, "the engine's KV layout (n_layer " + std::to_string(n_layer) + ", n_head_kv " + std::to_string(n_head_kv) +
                     ", head_dim " + std::to_string(head_dim) + ", kv " + kv_dtype + ", block_size " +
                     std::to_string(block_size) + ", model " + j.value("model", std::string("?")) +
                     ") is not the profile's: " + describe(m));
    std::vector<engine::StepSample> out;
    for (const json& s : member(j, "steps", what)) {
      engine::StepSample x;
      x.seq = s.at("seq").get<uint64_t>();
      x.end_time = s.at("end_time").get<double>();
      x.seconds = s.at("seconds").get<double>();
      x.decodes = s.at("decodes").get<int>();
      x.mean_context = s.at("mean_context").get<double>();
      for (const json& c : s.at("chunks")) x.chunks.emplace_back(c.at(0).get<int>(), c.at(1).get<int>());
      if (x.seconds < 0 || x.decodes < 0) fail(what, "step " + std::to_string(x.seq) + " has a negative field");
      out.push_back(std::move(x));
    }
    return out;
  } catch (const json::exception& e) {
    fail(what, std::string("malformed steps: ") + e.what());
  }
}

}  // namespace pdserve::planner
