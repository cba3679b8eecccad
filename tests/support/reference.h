// Loads ../shared/reference/*.json (an established engine's greedy runs) for tests.
#pragma once

#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace pdserve::testing {

struct ReferenceCase {
  std::string prompt;
  std::vector<int32_t> prompt_tokens;
  std::vector<int32_t> tokens;
  std::string text;
  std::vector<std::string> token_bytes;  // decoded from token_bytes_hex
  /// Per generated step, the reference's top-5 (token id, natural-log probability).
  std::vector<std::vector<std::pair<int32_t, float>>> top_logprobs;
};

inline std::string unhex(const std::string& h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2) out.push_back(static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16)));
  return out;
}

inline std::vector<ReferenceCase> load_reference(const std::string& path) {
  std::ifstream in(path);
  nlohmann::json j = nlohmann::json::parse(in);
  std::vector<ReferenceCase> out;
  for (const auto& c : j["cases"]) {
    ReferenceCase r;
    r.prompt = c["prompt"].get<std::string>();
    r.prompt_tokens = c["prompt_tokens"].get<std::vector<int32_t>>();
    r.tokens = c["tokens"].get<std::vector<int32_t>>();
    r.text = unhex(c["text_bytes_hex"].get<std::string>());
    for (const auto& h : c["token_bytes_hex"]) r.token_bytes.push_back(unhex(h.get<std::string>()));
    for (const auto& step : c["top_logprobs"]) {
      std::vector<std::pair<int32_t, float>> s;
      for (const auto& e : step) s.emplace_back(e[0].get<int32_t>(), e[1].get<float>());
      r.top_logprobs.push_back(std::move(s));
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace pdserve::testing
