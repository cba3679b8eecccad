// `pdserve serve`: the monolithic server (engine + OpenAI HTTP API in one process).
#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "gateway/auth_config.h"
#include "server/http_server.h"
#include "tokenizer/chat_jinja.h"

namespace pdserve::cli {

void add_http_options(CLI::App& cmd, HttpArgs& a) {
  cmd.add_option("--host", a.host, "bind address")->default_val("127.0.0.1");
  cmd.add_option("--port", a.port, "TCP port")->default_val(8080)->check(CLI::Range(0, 65535));
  cmd.add_option("--http-threads", a.http_threads, "HTTP worker threads (concurrent connections)")
      ->default_val(256)
      ->check(CLI::Range(1, 4096));
  auto* api_key = cmd.add_option("--api-key", a.api_key, "require 'Authorization: Bearer KEY' on /v1/*");
  cmd.add_option("--auth-file", a.auth_file,
                 "JSON file of API keys (SHA-256, see hash-key), tenants, rate limits and SLO classes; reloaded on SIGHUP")
      ->excludes(api_key);
  cmd.add_option("--max-body-bytes", a.max_body_bytes, "largest request body (413 beyond)")
      ->default_val(8u << 20)
      ->check(CLI::Range(size_t{1024}, size_t{1} << 32));
  cmd.add_option("--http-header-timeout", a.http_header_timeout, "seconds for a request's line and headers (408 beyond)")
      ->default_val(10)
      ->check(kFinite & CLI::Range(0.01, 3600.0));
  cmd.add_option("--http-idle-timeout", a.http_idle_timeout, "seconds a keep-alive connection may stay silent")
      ->default_val(5)
      ->check(kFinite & CLI::Range(0.01, 3600.0));
  cmd.add_option("--max-connections-per-client", a.max_connections_per_client,
                 "concurrent connections per client IP address (429 beyond)")
      ->default_val(256)
      ->check(CLI::Range(1, 1 << 20));
  cmd.add_option("--max-json-depth", a.max_json_depth, "deepest nesting of arrays/objects in a request body (400 beyond)")
      ->default_val(64)
      ->check(CLI::Range(2, 100000));
  cmd.add_option("--max-stop-length", a.max_stop_length, "bytes of each stop string (400 beyond)")
      ->default_val(256)
      ->check(CLI::Range(size_t{1}, size_t{1} << 20));
  cmd.add_option("--max-prompt-tokens", a.max_prompt_tokens, "tokens of each prompt (400 beyond; 0 = the context length - 1)")
      ->default_val(0)
      ->check(CLI::Range(0, 1 << 30));
  cmd.add_option("--max-completion-tokens", a.max_completion_tokens,
                 "largest max_tokens a request may ask (400 beyond), and the max_tokens of one that gives none; "
                 "0 = up to the context end")
      ->default_val(0)
      ->check(CLI::Range(0, 1 << 30));
  cmd.add_option("--max-grammar-states", a.max_grammar_states,
                 "elements of a structured-output or tools grammar once its repetitions and rule "
                 "references are expanded (nested repetitions multiply; 400 beyond)")
      ->default_val(1000000)
      ->check(CLI::Range(size_t{1}, size_t{1} << 30));
  cmd.add_option("--chat-template-file", a.chat_template_file,
                 "Jinja chat template file used instead of the model's tokenizer.chat_template")
      ->check(CLI::ExistingFile);
  cmd.add_option("--chat-template-kwargs", a.chat_template_kwargs,
                 "JSON object of extra chat template variables for every request, e.g. "
                 "'{\"enable_thinking\": false}'; a request's chat_template_kwargs add to them and win")
      ->check([](const std::string& s) {
        nlohmann::ordered_json j = nlohmann::ordered_json::parse(s, nullptr, false);
        if (j.is_discarded()) return std::string("not a JSON text: ") + s;
        return tokenizer::template_kwargs_error(j);
      });
  cmd.add_option("--chat-template-date", a.chat_template_date,
                 "date chat templates see (strftime_now, date_string), YYYY-MM-DD; default: today (UTC)")
      ->check([](const std::string& s) {
        std::time_t t;
        return tokenizer::parse_utc_date(s, &t) ? std::string() : "expected a date YYYY-MM-DD, got '" + s + "'";
      });
}

int serve_http(engine::Engine& engine, const HttpArgs& a) {
  server::ServerConfig sc;
  sc.host = a.host;
  sc.port = a.port;
  sc.http_threads = a.http_threads;
  sc.api_key = a.api_key;
  sc.max_body_bytes = a.max_body_bytes;
  sc.header_timeout_s = a.http_header_timeout;
  sc.idle_timeout_s = a.http_idle_timeout;
  sc.max_connections_per_client = a.max_connections_per_client;
  sc.request_limits.max_json_depth = a.max_json_depth;
  sc.request_limits.max_stop_bytes = a.max_stop_length;
  sc.request_limits.max_prompt_tokens = a.max_prompt_tokens;
  sc.request_limits.max_completion_tokens = a.max_completion_tokens;
  sc.request_limits.max_grammar_states = a.max_grammar_states;
  if (!a.chat_template_file.empty()) {
    std::ifstream f(a.chat_template_file, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    sc.chat_template_override = ss.str();
    if (!f || sc.chat_template_override.empty()) {
      std::fprintf(stderr, "error: --chat-template-file %s: cannot read a template\n", a.chat_template_file.c_str());
      engine.shutdown();
      return 1;
    }
  }
  if (!a.chat_template_date.empty()) tokenizer::parse_utc_date(a.chat_template_date, &sc.chat_template_now);
  if (!a.chat_template_kwargs.empty()) sc.chat_template_kwargs = nlohmann::ordered_json::parse(a.chat_template_kwargs);
  if (!a.auth_file.empty()) {
    auto cfg = gateway::load_auth_file(a.auth_file);
    if (!cfg.ok()) {
      std::fprintf(stderr, "error: --auth-file: %s\n", cfg.error().c_str());
      engine.shutdown();
      return 2;
    }
    sc.gateway = std::make_shared<gateway::Gateway>(cfg.value(), a.auth_file);
  }
  server::HttpServer srv(engine, sc);
  const int rc = srv.run();
  engine.shutdown();
  return rc;
}

void add_serve_command(CLI::App& app, ServeArgs& a) {
  CLI::App* cmd = app.add_subcommand("serve", "serve the OpenAI API on one process");
  add_engine_options(*cmd, a.engine);
  add_http_options(*cmd, a.http);
}

int check_auth_file(const HttpArgs& a) {
  if (a.auth_file.empty()) return 0;
  auto cfg = gateway::load_auth_file(a.auth_file);
  if (cfg.ok()) return 0;
  std::fprintf(stderr, "error: --auth-file: %s\n", cfg.error().c_str());
  return 2;
}

void add_hash_key_command(CLI::App& app, std::string& key) {
  CLI::App* cmd = app.add_subcommand("hash-key", "print the SHA-256 hex of an API key (the auth file's key_sha256)");
  cmd->add_option("key", key, "the API key")->required();
}

int run_hash_key(const std::string& key) {
  std::printf("%s\n", gateway::hash_api_key(key).c_str());
  return 0;
}

int run_serve(const ServeArgs& a) {
  if (int rc = check_auth_file(a.http)) return rc;  // before the model loads
  auto eng = engine::Engine::create(a.engine);
  if (!eng.ok()) {
    std::fprintf(stderr, "error: %s\n", eng.error().c_str());
    return 1;
  }
  return serve_http(*eng.value(), a.http);
}

}  // namespace pdserve::cli
