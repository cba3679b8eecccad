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
  const engine::MetricsSnapshot before = e.metrics();
  const std::vector<loadgen::RequestRecord> recs = loadgen::run_requests(specs, co);
  const engine::MetricsSnapshot after = e.metrics();
  srv.stop();
  serving.join();

  double client = 0;
  for (const auto& r : recs) {
    if (!r.ok || r.first_token_s < 0) throw std::runtime_error("profile: a frontend measurement request failed: " + r.error);
    client += r.first_token_s - r.send_s;
  }
  client /= static_cast<double>(recs.size());
  const uint64_t n = after.ttft.count - before.ttft.count;
  if (n == 0) throw std::runtime_error("profile: the engine recorded no TTFT for the frontend measurement");
  const double engine_ttft = (after.ttft.sum - before.ttft.sum) / static_cast<double>(n);
  return std::max(0.0, client - engine_ttft);
}

}  // namespace pdserve::planner
