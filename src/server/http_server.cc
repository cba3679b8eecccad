#include "server/metrics_text.h"
#include "server/http_server.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include <sys/socket.h>

#include <httplib.h>

#include "base/log.h"
#include "server/api_error.h"
#include "server/auth.h"
#include "server/gateway_http.h"
#include "server/generation_handler.h"
#include "server/http_connections.h"
#include "server/http_framing.h"
#include "server/http_util.h"
#include "server/info_json.h"
#include "server/openai_response.h"
#include "tokenizer/chat_jinja.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace pdserve::server {
constexpr int kListenBacklog = 4096;

namespace {

constexpr double kReadTimeoutSec = 30;    // a request's body
constexpr double kWriteTimeoutSec = 300;  // one blocked write (a slow stream reader)
constexpr size_t kKeepAliveMaxCount = 1000;
// At shutdown, how long aborted requests may take to write their error and end before the
// server stops (and closes their connections); an idle server stops at once.
constexpr auto kShutdownGrace = std::chrono::seconds(15);

ConnectionLimits connection_limits(const ServerConfig& c) {
  ConnectionLimits l;
  l.http_threads = c.http_threads > 0 ? c.http_threads : 1;
  l.header_timeout_s = c.header_timeout_s;
  l.idle_timeout_s = c.idle_timeout_s;
  l.read_timeout_s = kReadTimeoutSec;
  l.write_timeout_s = kWriteTimeoutSec;
  l.max_connections_per_client = c.max_connections_per_client;
  l.keep_alive_max_count = kKeepAliveMaxCount;
  return l;
}

// ---- SIGINT/SIGTERM: the handler only counts; the watcher thread of each run() acts. ----

std::atomic<int> g_signals{0};
std::atomic<int> g_last_signal{0};
std::mutex g_signal_mu;
int g_signal_users = 0;
struct sigaction g_old_int, g_old_term;

std::atomic<int> g_hangups{0};  // SIGHUP: reload the auth file
struct sigaction g_old_hup;

extern "C" void on_hangup_signal(int) { g_hangups.fetch_add(1); }

extern "C" void on_stop_signal(int sig) {
  g_last_signal.store(sig);
  g_signals.fetch_add(1);
}

void install_signal_handlers() {
  std::lock_guard<std::mutex> lock(g_signal_mu);
  if (g_signal_users++ > 0) return;
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &g_old_int);
  sigaction(SIGTERM, &sa, &g_old_term);
  sa.sa_handler = on_hangup_signal;
  sigaction(SIGHUP, &sa, &g_old_hup);
  // A client that disconnects mid-write must give EPIPE, not kill the process.
  std::signal(SIGPIPE, SIG_IGN);
}

void restore_signal_handlers() {
  std::lock_guard<std::mutex> lock(g_signal_mu);
  if (--g_signal_users > 0) return;
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
  sigaction(SIGHUP, &g_old_hup, nullptr);
}

/// Allowed method of a known path (for 405), or nullptr for unknown paths.
const char* allowed_method(const std::string& path) {
  if (path == "/v1/completions" || path == "/v1/chat/completions" || path == "/apply-template" || path == "/tokenize" ||
      path == "/detokenize")
    return "POST";
  if (path == "/health" || path == "/metrics" || path == "/engine/steps" || path == "/v1/models" ||
      path.rfind("/v1/models/", 0) == 0) {
    return "GET";
  }
  return nullptr;
}

std::string exception_message(std::exception_ptr ep) {
  try {
    if (ep) std::rethrow_exception(ep);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
  }
  return "unknown error";
}

}  // namespace

struct HttpServer::Impl {
  Impl(engine::Engine& e, ServerConfig c)
      : engine(e),
        cfg(std::move(c)),
        created(unix_seconds()),
        chat_template(detect_template(template_source(e, cfg))),
        jinja(load_jinja(e, cfg)),
        gw(cfg.gateway ? cfg.gateway : std::make_shared<gateway::Gateway>()),
        generation(e, chat_template, &stopping, cfg.request_limits, jinja, cfg.chat_template_now, gw.get(), cfg.chat_template_kwargs),
        svr(connection_limits(cfg)) {
    if (!cfg.metrics_only) log_chat_template();
    setup_routes();
  }

  static const std::string& template_source(engine::Engine& e, const ServerConfig& cfg) {
    return cfg.chat_template_override.empty() ? e.tokenizer().vocab().chat_template : cfg.chat_template_override;
  }

  // The Jinja chat template (the model's or --chat-template-file's), or null when there
  // is none or it does not parse (the built-in renderer is used then; reason logged).
  static std::shared_ptr<const tokenizer::JinjaChatTemplate> load_jinja(engine::Engine& e, const ServerConfig& cfg) {
    const std::string& src = template_source(e, cfg);
    if (src.empty()) return nullptr;
    const auto& v = e.tokenizer().vocab();
    auto piece = [&](int32_t id) { return id >= 0 && id < v.size() ? v.tokens[static_cast<size_t>(id)] : std::string(); };
    try {
      return std::make_shared<const tokenizer::JinjaChatTemplate>(src, piece(v.bos_id), piece(v.eos_id));
    } catch (const std::exception& ex) {
      PDS_LOG_WARN("chat template cannot be used as Jinja ({}); falling back to the built-in renderer", ex.what());
      return nullptr;
    }
  }

  static tokenizer::ChatTemplateKind detect_template(const std::string& jinja) {
    return tokenizer::detect_chat_template(jinja, nullptr);
  }

  // One start-up line on how /v1/chat/completions renders messages: the Jinja template
  // (the model's or --chat-template-file's) when it parses, else the built-in format.
  void log_chat_template() const {
    const std::string& src = template_source(engine, cfg);
    const char* origin = cfg.chat_template_override.empty() ? "the model's" : "--chat-template-file's";
    const char* builtin = tokenizer::chat_template_name(chat_template);
    if (jinja) {
      PDS_LOG_INFO("chat template: {} Jinja template (system role {}, tools {}, tool calls {}, tool-call syntax {})", origin,
                   jinja->caps().supports_system_role ? "yes" : "no", jinja->caps().supports_tools ? "yes" : "no",
                   jinja->caps().supports_tool_calls ? "yes" : "no",
                   tool_syntax_name(jinja->caps().supports_tools ? detect_tool_syntax(jinja->source()) : ToolSyntax::kWrapper));
      return;
    }
    if (cfg.chat_template_kwargs.is_object() && !cfg.chat_template_kwargs.empty())
      PDS_LOG_WARN("--chat-template-kwargs has no effect: no Jinja chat template is used (only a Jinja template reads "
                   "template variables)");
    bool recognized = true;
    tokenizer::detect_chat_template(src, &recognized);
    if (src.empty())
      PDS_LOG_INFO("model has no chat template; /v1/chat/completions uses the built-in '{}' format", builtin);
    else if (!recognized)
      PDS_LOG_WARN("{} chat template is not recognised; /v1/chat/completions uses the built-in '{}' format", origin, builtin);
    else
      PDS_LOG_INFO("chat template: built-in '{}' format (recognised in {} template)", builtin, origin);
  }

  void setup_routes();
  void setup_api_routes();  // /v1/*, CORS preflight
  void watch(std::atomic<bool>& listen_done, int signals_at_start);
  /// SIGHUP: re-reads --auth-file; a bad file keeps the one in force (logged with its line).
  void reload_auth() {
    if (gw->open()) {
      PDS_LOG_INFO("SIGHUP: no --auth-file to reload");
      return;
    }
    const Status s = gw->reload();
    if (s.ok()) PDS_LOG_INFO("SIGHUP: auth file reloaded ({} keys)", gw->config()->keys.size());
    else PDS_LOG_ERROR("SIGHUP: auth file not reloaded, keeping the previous one: {}", s.message());
  }

  engine::Engine& engine;
  ServerConfig cfg;
  int64_t created;
  tokenizer::ChatTemplateKind chat_template;
  std::shared_ptr<const tokenizer::JinjaChatTemplate> jinja;
  std::atomic<int> listen_fd{-1};           // the listening socket, once bound
  std::atomic<bool> stopping{false};       // shutdown begun: refuse new work, abort running
  std::atomic<bool> stop_requested{false};  // stop() was called
  std::atomic<bool> draining{false};        // set_draining() was called
  std::atomic<bool> running{false};
  std::atomic<int> bound_port{0};
  std::shared_ptr<gateway::Gateway> gw;
  GenerationHandler generation;
  GuardedServer svr;
};

void HttpServer::Impl::setup_routes() {
  // Threads, timeouts and per-address limits: GuardedServer (http_connections.h).
  svr.set_payload_max_length(cfg.max_body_bytes);
  svr.set_tcp_nodelay(true);  // set on the listening socket; Linux hands it on to every accepted one
  // SO_REUSEADDR only: httplib's default also sets SO_REUSEPORT, which would let a second
  // server bind a port that is in use and silently share its traffic.
  svr.set_socket_options([this](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, reinterpret_cast<const void*>(&yes), sizeof(yes));
    listen_fd.store(sock);  // only the listening socket goes through this hook
  });
  svr.set_default_headers({{"Access-Control-Allow-Origin", "*"}});

  // A request answered before its body is read: the unread body would be read as the next
  // request, so the connection closes after the answer when one was announced.
  const auto refuse_unread = [](const httplib::Request& req, httplib::Response& res, const ApiError& err, bool close) {
    send_error(res, err);
    if (close || announces_body(req)) close_connection_after_response(res);
    return httplib::Server::HandlerResponse::Handled;
  };
  // The API key (and the gateway's): a 401 for a request that needs one and has none good.
  // `who`, when given, gets the gateway's principal (set when it authenticated one).
  const auto auth_error = [this](const httplib::Request& req, std::optional<gateway::Principal>* who = nullptr) -> std::optional<ApiError> {
    if (req.method == "OPTIONS" || !path_requires_auth(req.path)) return std::nullopt;
    if (auto err = check_api_key(cfg.api_key, req.get_header_value("Authorization"))) return err;
    if (gw->open()) return std::nullopt;
    auto p = gw->authenticate(req.get_header_value("Authorization"));
    if (!p.ok()) return unauthorized(p.status().message());
    if (who) *who = std::move(p.value());
    return std::nullopt;
  };
  // Expect: 100-continue: the framing and key checks answer before the client sends the body
  // (no "100 Continue" for a body that would be refused).
  svr.set_expect_100_continue_handler([this, refuse_unread, auth_error](const httplib::Request& req, httplib::Response& res) {
    std::optional<ApiError> err = framing_error(req, cfg.max_body_bytes);
    if (!err) err = auth_error(req);
    if (!err) return 100;
    refuse_unread(req, res, *err, true);
    return err->status;
  });
  svr.set_pre_routing_handler([this, refuse_unread, auth_error](const httplib::Request& req, httplib::Response& res) {
    const auto refuse = [&](const ApiError& err, bool close = false) { return refuse_unread(req, res, err, close); };
    // The body's framing, checked before the body is read (http_framing.h): a request whose
    // body's end is not known or not agreed gets its 4xx/501 and the connection closes, as a
    // proxy in front could frame it otherwise and what follows is not known to be a request.
    if (auto err = framing_error(req, cfg.max_body_bytes)) return refuse(*err, /*close=*/true);
    // The connection closes after the response when what follows the body is not sure to be
    // the next request: httplib reads a body only for POST, PUT, PATCH, DELETE (and PRI), so
    // another method's body (a GET with a Content-Length) would be read as one; and its chunk
    // reader ends a body at a chunk whose CRLF is missing without an error, leaving the rest
    // (a request smuggled there) to be read as one. So a chunked body costs its keep-alive.
    if (req.has_header("Transfer-Encoding") || (!method_body_is_read(req.method) && announces_body(req)))
      close_connection_after_response(res);
    std::optional<gateway::Principal> who;
    if (auto err = auth_error(req, &who)) return refuse(*err);
    // The key's rate-limit headers: generation requests set them when admitted (rate limits
    // debited), the other routes that need a key here.
    if (who && req.path != "/v1/completions" && req.path != "/v1/chat/completions") set_rate_limit_headers(res, gw->peek(*who));
    return httplib::Server::HandlerResponse::Unhandled;
  });

  svr.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const bool down = stopping.load();
    if (draining.load() && !down) {
      auto j = health_json(engine.stats(), false, "draining");
      j["status"] = "draining";
      send_json(res, 503, j);
      return;
    }
    const std::string not_ready = down ? std::string() : engine.not_ready_reason();
    send_json(res, down || !not_ready.empty() ? 503 : 200, health_json(engine.stats(), down, not_ready));
  });
  svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(prometheus_text(engine.metrics(), engine.model_name()) + process_metrics_text() + gw->metrics_text(),
                    "text/plain; version=0.0.4; charset=utf-8");
  });
  svr.Get("/engine/steps", [this](const httplib::Request& req, httplib::Response& res) {
    if (engine.kv_layout().n_layers == 0) {  // a router: it runs no model
      ApiError err = route_not_found(req.method, req.path);
      err.message = "This server runs no model (a router): its workers' --metrics-port serve /engine/steps.";
      send_error(res, err);
      return;
    }
    uint64_t since = 0;
    if (req.has_param("since")) {
      const std::string v = req.get_param_value("since");
      char* end = nullptr;
      errno = 0;
      since = std::strtoull(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || v[0] == '-' || errno == ERANGE) {
        send_error(res, bad_request("since must be a step number (a non-negative integer), got \"" + v + "\".", "since"));
        return;
      }
    }
    send_json(res, 200, steps_json(engine, since));
  });
  // A worker's metrics port: every other path answers 404 (the error handler below).
  if (!cfg.metrics_only) setup_api_routes();

  // Every error status without a body of ours (unknown route, malformed HTTP, body too
  // large) gets an OpenAI-style JSON body.
  svr.set_error_handler(httplib::Server::HandlerWithResponse(
      [max_body = cfg.max_body_bytes](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    // Errors httplib makes itself, other than an unrouted path (404/405): the request's
    // framing (its line, headers or body) was not understood, so where the next request
    // would start is not known: answer, then close (RFC 9112 §2.2), rather than read the
    // rest of this one as more requests.
    if (res.status != 404) close_connection_after_response(res);
    ApiError err;
    if (res.status == 404) {
      if (const char* allowed = allowed_method(req.path); allowed && req.method != allowed) {
        err = method_not_allowed(req.method, req.path);
        res.set_header("Allow", allowed);
      } else {
        err = route_not_found(req.method, req.path);
      }
    } else if (res.status == 413) {
      err = body_too_large(max_body);
    } else if (res.status >= 500) {
      err = server_error("Internal server error.");
      err.status = res.status;
    } else {
      err = bad_request("Bad request (HTTP " + std::to_string(res.status) + ").");
      err.status = res.status;
    }
    send_error(res, err);
    return httplib::Server::HandlerResponse::Handled;
  }));
  svr.set_exception_handler(
      [](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
        const std::string msg = exception_message(ep);
        PDS_LOG_ERROR("{} {}: unhandled exception: {}", req.method, req.path, msg);
        send_error(res, server_error("Internal server error: " + msg));
      });
  svr.set_logger([](const httplib::Request& req, const httplib::Response& res) {
    PDS_LOG_DEBUG("{} {} {} -> {}", req.remote_addr, req.method, req.path, res.status);
  });
}

void HttpServer::Impl::setup_api_routes() {
  // With an auth file a key sees only the models it may use (the pre-routing handler has
  // authenticated it already): the list leaves the others out, and their id is a 404.
  const auto visible = [this](const httplib::Request& req) {
    if (gw->open()) return true;
    auto who = gw->authenticate(req.get_header_value("Authorization"));
    return who.ok() && (!who.value().key || who.value().key->allows_model(engine.model_name()));
  };
  svr.Get("/v1/models", [this, visible](const httplib::Request& req, httplib::Response& res) {
    json list = models_json(engine.model_name(), created, engine.context_length());
    if (!visible(req)) list["data"] = json::array();
    send_json(res, 200, list);
  });
  svr.Get(R"(/v1/models/(.+))", [this, visible](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    if (id != engine.model_name() || !visible(req)) {
      send_error(res, model_not_found(id));
      return;
    }
    send_json(res, 200, model_json(engine.model_name(), created, engine.context_length()));
  });
  // Every POST body is read through a content reader so that cpp-httplib neither parses nor
  // caps (8 KiB) a JSON body sent as form data — what `curl -d` does without -H — and a
  // chunked body meets --max-body-bytes as it arrives (it has no Content-Length to check first).
  const auto with_body = [this](auto handle) {
    return [this, handle](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& read) {
      if (req.is_multipart_form_data()) {  // httplib reads those only through a form-data callback pair
        send_error(res, ApiError{415, "The request body is multipart/form-data; these endpoints take a JSON body (application/json).",
                                 "invalid_request_error", std::nullopt, std::string("unsupported_media_type")});
        close_connection_after_response(res);  // its body is not read
        return;
      }
      std::string body;
      bool too_large = false;
      const bool whole = read([&](const char* data, size_t n) {
        if (body.size() + n > cfg.max_body_bytes) {
          too_large = true;
          return false;
        }
        body.append(data, n);
        return true;
      });
      if (too_large) {
        send_error(res, body_too_large(cfg.max_body_bytes));
        close_connection_after_response(res);
        return;
      }
      if (!whole) {  // the body stopped short (the client closed, or the read timed out): never run a part
        const std::string coding = req.get_header_value("Content-Encoding");
        if (coding == "gzip" || coding == "deflate")  // (identity: nothing to decode)
          send_error(res, bad_request("The request body's " + coding + " coding could not be decoded (" +
                                      std::to_string(body.size()) + " bytes decoded before the error), or the body " +
                                      "stopped short of its length."));
        else
          send_error(res, bad_request("The request body could not be read in full (" + std::to_string(body.size()) +
                                      " bytes read): it stopped short of its length before the connection closed or the " +
                                      std::to_string(static_cast<int>(kReadTimeoutSec)) +
                                      " s read timeout, or its chunked framing was malformed or carried trailer fields, "
                                      "which this server does not take."));
        close_connection_after_response(res);
        return;
      }
      handle(req, body, res);
    };
  };
  for (const auto& [path, endpoint] : {std::pair{"/v1/completions", Endpoint::Completions}, {"/v1/chat/completions", Endpoint::ChatCompletions}})
    svr.Post(path, with_body([this, endpoint = endpoint](const httplib::Request& req, const std::string& body, httplib::Response& res) {
      generation.handle(endpoint, req, body, res);
    }));
  svr.Post("/apply-template", with_body([this](const httplib::Request&, const std::string& body, httplib::Response& res) {
    generation.apply_template(body, res);
  }));
  svr.Post("/tokenize", with_body([this](const httplib::Request&, const std::string& body, httplib::Response& res) {
    generation.tokenize(body, res);
  }));
  svr.Post("/detokenize", with_body([this](const httplib::Request&, const std::string& body, httplib::Response& res) {
    generation.detokenize(body, res);
  }));
  // CORS preflight for browser clients: every header the client asks for is allowed (as
  // llama.cpp's server and vLLM's default do): SDKs add their own (the openai package sends
  // X-Stainless-*, OpenAI-Organization, OpenAI-Project), and "*" would not cover Authorization.
  svr.Options(R"(.*)", [](const httplib::Request& req, httplib::Response& res) {
    res.status = 204;
    res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    std::string asked = req.get_header_value("Access-Control-Request-Headers");
    const bool names_only = asked.size() <= 4096 && std::all_of(asked.begin(), asked.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == ',' || c == ' ';
    });
    res.set_header("Access-Control-Allow-Headers", !asked.empty() && names_only ? asked : "Authorization, Content-Type");
    res.set_header("Access-Control-Max-Age", "86400");
  });
}

void HttpServer::Impl::watch(std::atomic<bool>& listen_done, int signals_at_start) {
  bool stop_sent = false, stop_seen = false;
  std::chrono::steady_clock::time_point stop_deadline{};
  int hangups_seen = g_hangups.load();
  while (!listen_done.load()) {
    if (const int h = g_hangups.load(); h != hangups_seen) {
      hangups_seen = h;
      reload_auth();
    }
    const int signals = g_signals.load() - signals_at_start;
    if (signals >= 2) {
      // Both may have come within one poll: the "received" line is still owed. (Signals
      // pending together are delivered lowest number first, so which was sent first is
      // not known here; the line names the one the exit status gives.)
      if (!stopping.load()) PDS_LOG_INFO("signal {} received: shutting down", g_last_signal.load());
      PDS_LOG_WARN("second stop signal: exiting now");
      std::_Exit(128 + g_last_signal.load());
    }
    if (!stopping.load() && (signals > 0 || stop_requested.load())) {
      if (signals > 0) PDS_LOG_INFO("signal {} received: shutting down", g_last_signal.load());
      stopping.store(true);
    }
    if (stopping.load() && !stop_seen) {  // a signal, or stop() (which sets stopping itself)
      stop_seen = true;
      stop_deadline = std::chrono::steady_clock::now() + kShutdownGrace;
    }
    // httplib stops writing chunked bodies once stopped: first let the aborted requests
    // write their error and end (new ones are refused with 503 meanwhile).
    if (stopping.load() && !stop_sent && svr.is_running() &&
        (generation.open_responses() == 0 || std::chrono::steady_clock::now() >= stop_deadline)) {
      if (generation.open_responses() > 0)
        PDS_LOG_WARN("{} responses still open {} s after the stop: closing them", generation.open_responses(),
                     std::chrono::duration_cast<std::chrono::seconds>(kShutdownGrace).count());
      svr.stop();
      stop_sent = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

HttpServer::HttpServer(engine::Engine& engine, ServerConfig cfg)
    : impl_(std::make_unique<Impl>(engine, std::move(cfg))) {}

HttpServer::~HttpServer() = default;

int HttpServer::port() const { return impl_->bound_port.load(); }

void HttpServer::set_draining() { impl_->draining.store(true); }

void HttpServer::stop() {
  impl_->stop_requested.store(true);
  impl_->stopping.store(true);
}

int HttpServer::run() {
  Impl& s = *impl_;
  if (s.running.exchange(true)) {
    PDS_LOG_ERROR("HttpServer::run() called twice");
    return 1;
  }
  const int signals_at_start = g_signals.load();
  install_signal_handlers();

  int port = s.cfg.port;
  bool bound;
  if (port == 0) {
    port = s.svr.bind_to_any_port(s.cfg.host);
    bound = port > 0;
  } else {
    bound = s.svr.bind_to_port(s.cfg.host, port);
  }
  if (!bound) {
    const int err = errno;
    PDS_LOG_ERROR("could not listen on {}:{}: {}", s.cfg.host, s.cfg.port,
                  err ? std::strerror(err) : "bind failed");
    restore_signal_handlers();
    s.running.store(false);
    return 1;
  }
  // The packaged cpp-httplib listens with a backlog of 5, so a burst of connections gets
  // refused or stalls; Linux lets listen() be called again to raise it.
  if (const int fd = s.listen_fd.load(); fd >= 0) ::listen(fd, kListenBacklog);
  s.bound_port.store(port);
  const bool ipv6 = s.cfg.host.find(':') != std::string::npos;
  PDS_LOG_INFO("listening on http://{}{}{}:{} (model '{}', context {} tokens, {} HTTP threads{})",
               ipv6 ? "[" : "", s.cfg.host, ipv6 ? "]" : "", port, s.engine.model_name(),
               s.engine.context_length(), s.cfg.http_threads,
               s.cfg.api_key.empty() ? "" : ", API key required");

  std::atomic<bool> listen_done{false};
  std::thread watcher([&] { s.watch(listen_done, signals_at_start); });
  const bool ok = s.svr.listen_after_bind();
  listen_done.store(true);
  watcher.join();
  restore_signal_handlers();
  s.bound_port.store(0);
  PDS_LOG_INFO("HTTP server stopped");
  if (!ok && !s.stopping.load()) {
    PDS_LOG_ERROR("HTTP server failed while accepting connections");
    return 1;
  }
  return 0;
}

}  // namespace pdserve::server
