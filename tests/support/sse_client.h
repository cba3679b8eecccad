// Integration-test helper: an OpenAI completion streamed over SSE (with usage), each
// choice's text joined, against any HOST:PORT (loopback or a network namespace's address).
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace pdserve::testing {

struct Streamed {
  std::vector<std::string> texts;  // per choice
  std::vector<std::string> finish;
  nlohmann::json usage;
  int events = 0;
  bool done = false;  // [DONE] arrived
  std::string error;  // transport error ("" when none)
};

inline httplib::Client http_client(const std::string& host, int port, int read_timeout_s = 120) {
  httplib::Client c(host, port);
  c.set_connection_timeout(5, 0);
  c.set_read_timeout(read_timeout_s, 0);
  c.set_write_timeout(30, 0);
  return c;
}

/// Streams `body` to `path` (SSE, include_usage); `on_event` sees every choice delta.
inline Streamed stream_completion(const std::string& host, int port, nlohmann::json body,
                                  std::function<void(const nlohmann::json&)> on_event = {},
                                  const std::string& path = "/v1/completions") {
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  Streamed out;
  std::string buf;
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    buf.append(data, n);
    size_t pos;
    while ((pos = buf.find("\n\n")) != std::string::npos) {
      const std::string ev = buf.substr(0, pos);
      buf.erase(0, pos + 2);
      if (ev.rfind("data: ", 0) != 0) continue;
      const std::string payload = ev.substr(6);
      if (payload == "[DONE]") {
        out.done = true;
        continue;
      }
      const nlohmann::json j = nlohmann::json::parse(payload, nullptr, false);
      if (j.is_discarded()) continue;
      if (j.contains("usage") && !j["usage"].is_null()) out.usage = j["usage"];
      if (!j.contains("choices")) continue;
      for (const auto& ch : j["choices"]) {
        const size_t idx = ch["index"].get<size_t>();
        if (out.texts.size() <= idx) {
          out.texts.resize(idx + 1);
          out.finish.resize(idx + 1);
        }
        if (ch.contains("text")) out.texts[idx] += ch["text"].get<std::string>();
        if (!ch["finish_reason"].is_null()) out.finish[idx] = ch["finish_reason"];
        ++out.events;
        if (on_event) on_event(ch);
      }
    }
    return true;
  };
  auto c = http_client(host, port);
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  c.send(req, res, err);
  if (err != httplib::Error::Success) out.error = httplib::to_string(err);
  return out;
}

/// POSTs `body`; returns the parsed JSON (null on a transport error) and the status.
inline nlohmann::json post_json(const std::string& host, int port, const std::string& path, const nlohmann::json& body,
                                int* status = nullptr) {
  auto c = http_client(host, port);
  auto res = c.Post(path, body.dump(), "application/json");
  if (status) *status = res ? res->status : -1;
  if (!res) return nullptr;
  return nlohmann::json::parse(res->body, nullptr, false);
}

}  // namespace pdserve::testing
