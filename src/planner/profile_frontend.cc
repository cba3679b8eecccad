#include "planner/profile_frontend.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "loadgen/prompt_synth.h"
#include "loadgen/stream_client.h"
#include "server/http_server.h"

namespace pdserve::planner {

double measure_frontend_seconds(engine::Engine& e, int prompt_tokens, int requests) {
  if (requests <= 0) return 0;
  auto synth = loadgen::PromptSynthesizer::create(e.tokenizer(), /*seed=*/17);
  if (!synth.ok()) throw std::runtime_error("profile: frontend prompts: " + synth.error());
  prompt_tokens = std::clamp(prompt_tokens, static_cast<int>(synth.value().min_tokens()), e.context_length() - 4);
  std::vector<loadgen::RequestSpec> specs;
  for (int i = 0; i < requests; ++i) {
    auto p = synth.value().synthesize(prompt_tokens, {}, 16, /*request_seed=*/1000 + i);
    if (!p.ok()) throw std::runtime_error("profile: frontend prompts: " + p.error());
    nlohmann::json body = {{"prompt", p.value().text}, {"max_tokens", 2}, {"temperature", 0},
                           {"ignore_eos", true},       {"stream", true}};
    specs.push_back({0.0, body.dump()});
  }

  server::ServerConfig sc;
  sc.host = "127.0.0.1";
  sc.port = 0;
  sc.http_threads = 4;
  server::HttpServer srv(e, sc);
  int rc = 0;
  std::thread serving([&] { rc = srv.run(); });
  // run() binds before it serves; wait for the port (or for run() to fail and return).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (srv.port() == 0 && std::chrono::steady_clock::now() < deadline && rc == 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const int port = srv.port();
  if (port == 0) {
    srv.stop();
    serving.join();
    throw std::runtime_error("profile: the frontend measurement's HTTP server did not start");
  }

  loadgen::ClientOptions co;
  co.url = "http://127.0.0.1:" + std::to_string(port) + "/v1/completions";
  co.max_concurrency = 1;
  co.request_timeout_s = 120;
  // One request at a time, the engine's TTFT read around each: the median difference
  // (a hiccup of the machine moves a mean, not the median).
  std::vector<double> diffs;
  std::string failure;
  for (const loadgen::RequestSpec& spec : specs) {
    const engine::MetricsSnapshot before = e.metrics();
    const std::vector<loadgen::RequestRecord> recs = loadgen::run_requests({spec}, co);
    const engine::MetricsSnapshot after = e.metrics();
    const loadgen::RequestRecord& r = recs.at(0);
    if (!r.ok || r.first_token_s < 0) {
      failure = "a frontend measurement request failed: " + r.error;
      break;
    }
    if (after.ttft.count != before.ttft.count + 1) {
      failure = "the engine did not record the frontend measurement request's TTFT";
      break;
    }
    diffs.push_back((r.first_token_s - r.send_s) - (after.ttft.sum - before.ttft.sum));
  }
  srv.stop();
  serving.join();
  if (!failure.empty()) throw std::runtime_error("profile: " + failure);
  std::sort(diffs.begin(), diffs.end());
  const size_t n = diffs.size();
  const double mid = n % 2 ? diffs[n / 2] : (diffs[n / 2 - 1] + diffs[n / 2]) / 2;
  return std::max(0.0, mid);
}

}  // namespace pdserve::planner
