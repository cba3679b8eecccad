// The OpenAI-compatible HTTP server of `pdserve serve`: routes, auth, thread pool,
// timeouts and signal-driven shutdown. Routes:
//   POST /v1/completions, POST /v1/chat/completions (JSON or SSE with "stream": true)
//   GET  /v1/models, GET /v1/models/{id}, GET /health
// Errors are OpenAI-style JSON: {"error": {"message", "type", "param", "code"}}.
#pragma once

#include <ctime>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "gateway/gateway.h"
#include "server/request_limits.h"

namespace pdserve::server {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8080;          // 0 ⇒ any free port (see HttpServer::port())
  int http_threads = 256;   // connections served at once
  std::string api_key;      // non-empty ⇒ /v1/* needs `Authorization: Bearer <api_key>`
  bool metrics_only = false;  // a worker's --metrics-port: only GET /metrics and /health (else 404)
  size_t max_body_bytes = 8u << 20;     // --max-body-bytes: larger bodies get 413 unread
  double header_timeout_s = 10;         // --http-header-timeout: request head deadline (408)
  double idle_timeout_s = 5;            // --http-idle-timeout: keep-alive silence allowed
  int max_connections_per_client = 256; // --max-connections-per-client (429 beyond)
  RequestLimits request_limits;         // --max-json-depth, --max-stop-length, --max-prompt-tokens
  std::string chat_template_override;   // --chat-template-file: its text replaces the model's template
  std::time_t chat_template_now = 0;    // --chat-template-date (00:00 UTC); 0 ⇒ the current time
  nlohmann::ordered_json chat_template_kwargs;  // --chat-template-kwargs: template variables (null: none)
  /// --auth-file: keys, tenants, limits and classes (reloaded on SIGHUP); null ⇒ an open
  /// gateway (no keys; a request's `slo_class` field is honoured).
  std::shared_ptr<gateway::Gateway> gateway;
};

class HttpServer {
 public:
  HttpServer(engine::Engine& engine, ServerConfig cfg);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  /// Serves until SIGINT/SIGTERM or stop(); returns non-zero if it could not bind.
  /// Logs "listening on http://HOST:PORT" once the socket is bound. Does not shut the
  /// engine down (the caller owns it).
  int run();
  /// Makes run() return (thread-safe; also before run() starts). Streams in progress are
  /// cut and their engine requests aborted.
  void stop();
  /// A worker's graceful drain began: /health answers 503 {"status": "draining"} (so a
  /// load balancer or readiness probe stops sending work); everything else is unchanged.
  void set_draining();
  /// The bound port once run() is listening, else 0.
  int port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pdserve::server
