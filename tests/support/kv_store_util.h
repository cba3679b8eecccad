// Test helpers of the KV store tier tests (tests/integration/kv_store_*_test.cc): a long
// greedy completion with logprobs (compared bit for bit between runs), its usage, and a
// node's /metrics as a map.
#pragma once

#include <map>
#include <string>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "support/prometheus.h"

namespace pdserve::testing {

/// One greedy completion: what must be identical between a cached and an uncached run.
struct Completion {
  int status = 0;
  std::string text;
  std::string logprobs;  // the logprobs object, serialised (floats printed exactly)
  int prompt_tokens = 0;
  int cached_tokens = 0;
  std::string body;      // on failure
  bool same_output(const Completion& o) const { return text == o.text && logprobs == o.logprobs; }
};

inline httplib::Client http(int port) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(5, 0);
  c.set_read_timeout(120, 0);
  return c;
}

/// POST /v1/completions: `prompt`, 24 greedy tokens with top-2 logprobs, optional salt.
inline Completion complete(int port, const std::string& prompt, const std::string& salt = "") {
  nlohmann::json body = {{"prompt", prompt}, {"max_tokens", 24}, {"temperature", 0}, {"logprobs", 2}};
  if (!salt.empty()) body["cache_salt"] = salt;
  auto res = http(port).Post("/v1/completions", body.dump(), "application/json");
  Completion c;
  if (!res) return c;
  c.status = res->status;
  c.body = res->body;
  if (res->status != 200) return c;
  const auto j = nlohmann::json::parse(res->body);
  c.text = j["choices"][0]["text"].get<std::string>();
  c.logprobs = j["choices"][0]["logprobs"].dump();
  c.prompt_tokens = j["usage"]["prompt_tokens"].get<int>();
  c.cached_tokens = j["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
  return c;
}

/// `port`'s /metrics, "name{labels}" (model_name dropped) → value; empty when unreachable.
inline std::map<std::string, double> scrape(int port) {
  auto res = http(port).Get("/metrics");
  if (!res || res->status != 200) return {};
  return samples_by_key(parse_prometheus_text(res->body), "model_name");
}

/// A store counter of `tier` (e.g. metric = "pdserve_kv_store_writes_total").
inline double tier_metric(int port, const std::string& metric, const std::string& tier) {
  auto m = scrape(port);
  auto it = m.find(metric + "{tier=\"" + tier + "\"}");
  return it == m.end() ? -1 : it->second;
}

/// Distinct long prompts (about 200 tokens of stories260K's vocabulary each) that differ
/// from their first block on (so no two share a stored block).
inline std::string long_prompt(int variant) {
  static const char* kNames[] = {"Lily", "Tom", "Ben", "Sue", "Max", "Mia", "Sam", "Ann"};
  const std::string who = kNames[variant % 8];
  std::string p = "Story " + std::to_string(variant) + ". Once upon a time, there was a little " + std::string(variant % 2 ? "boy" : "girl") + " named " + who + ". ";
  p += who + " loved to play outside in the park with friends. One day, " + who +
       " saw a big red ball under a tree. " + who + " ran to the ball and picked it up. It was soft and round. " + who +
       " wanted to share the ball with a friend, so " + who + " went to find Tim. Tim was sad because he lost his toy car. " +
       who + " gave Tim the ball and they played together all day. The sun was warm and the birds sang in the trees. " +
       "When it was time to go home, " + who + " said thank you and smiled.";
  return p;
}

}  // namespace pdserve::testing
