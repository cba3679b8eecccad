#include "server/openai_response.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <utility>

namespace pdserve::server {

std::string make_response_id(const std::string& prefix) {
  thread_local std::mt19937_64 rng(std::random_device{}() ^
                                   static_cast<uint64_t>(
                                       std::chrono::steady_clock::now().time_since_epoch().count()));
  char buf[32];
  uint64_t a = rng(), b = rng();
  std::snprintf(buf, sizeof(buf), "%016llx%08llx", static_cast<unsigned long long>(a),
                static_cast<unsigned long long>(b & 0xffffffffULL));
  return prefix + buf;
}

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

json finish_reason_json(engine::FinishReason r) {
  switch (r) {
    case engine::FinishReason::Stop: return "stop";
    case engine::FinishReason::Length: return "length";
    case engine::FinishReason::Abort: return "abort";
    case engine::FinishReason::Error: return "error";
    case engine::FinishReason::None: break;
  }
  return nullptr;
}

json usage_json(const UsageCounts& u) {
  return json{{"prompt_tokens", u.prompt_tokens},
              {"completion_tokens", u.completion_tokens},
              {"total_tokens", u.prompt_tokens + u.completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

double finite_logprob(float lp) { return std::isfinite(lp) ? static_cast<double>(lp) : -9999.0; }

json completion_logprobs_json(const std::vector<engine::TokenLogprob>& lps, const PieceFn& piece,
                              Utf8CharCounter* chars) {
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(),
       offsets = json::array();
  Utf8CharCounter local;
  Utf8CharCounter& counter = chars ? *chars : local;
  for (const auto& lp : lps) {
    const std::string p = piece(lp.token);
    tokens.push_back(token_display(p));
    token_logprobs.push_back(finite_logprob(lp.logprob));
    json alts = json::object();
    for (const auto& [id, v] : lp.top) {
      std::string key = token_display(piece(id));
      if (!alts.contains(key)) alts[key] = finite_logprob(v);  // best first: keep the first
    }
    top.push_back(std::move(alts));
    offsets.push_back(counter.offset_before(p));
    counter.push(p);
  }
  return json{{"tokens", std::move(tokens)},
              {"token_logprobs", std::move(token_logprobs)},
              {"top_logprobs", std::move(top)},
              {"text_offset", std::move(offsets)}};
}

json chat_logprob_content(const std::vector<engine::TokenLogprob>& lps, const PieceFn& piece) {
  json content = json::array();
  for (const auto& lp : lps) {
    const std::string p = piece(lp.token);
    json alts = json::array();
    for (const auto& [id, v] : lp.top) {
      const std::string ap = piece(id);
      alts.push_back(
          {{"token", token_display(ap)}, {"logprob", finite_logprob(v)}, {"bytes", token_bytes(ap)}});
    }
    content.push_back({{"token", token_display(p)},
                       {"logprob", finite_logprob(lp.logprob)},
                       {"bytes", token_bytes(p)},
                       {"top_logprobs", std::move(alts)}});
  }
  return content;
}

json completion_response(const ResponseMeta& meta, const std::vector<ChoiceResult>& choices,
                         const UsageCounts& usage, bool with_logprobs, const PieceFn& piece) {
  json arr = json::array();
  for (const auto& c : choices) {
    arr.push_back({{"index", c.index},
                   {"text", c.text},
                   {"logprobs", with_logprobs ? completion_logprobs_json(c.logprobs, piece, nullptr)
                                              : json(nullptr)},
                   {"finish_reason", finish_reason_json(c.finish)}});
  }
  return json{{"id", meta.id},          {"object", "text_completion"},
              {"created", meta.created}, {"model", meta.model},
              {"choices", std::move(arr)}, {"usage", usage_json(usage)}};
}

json chat_response(const ResponseMeta& meta, const std::vector<ChoiceResult>& choices,
                   const UsageCounts& usage, bool with_logprobs, const PieceFn& piece) {
  json arr = json::array();
  for (const auto& c : choices) {
    arr.push_back({{"index", c.index},
                   {"message", {{"role", "assistant"}, {"content", c.text}}},
                   {"logprobs", with_logprobs
                                    ? json{{"content", chat_logprob_content(c.logprobs, piece)}}
                                    : json(nullptr)},
                   {"finish_reason", finish_reason_json(c.finish)}});
  }
  return json{{"id", meta.id},          {"object", "chat.completion"},
              {"created", meta.created}, {"model", meta.model},
              {"choices", std::move(arr)}, {"usage", usage_json(usage)}};
}

json completion_chunk(const ResponseMeta& meta, int index, const std::string& text, json logprobs,
                      engine::FinishReason finish, bool with_usage_field) {
  json choice = {{"index", index},
                 {"text", text},
                 {"logprobs", std::move(logprobs)},
                 {"finish_reason", finish_reason_json(finish)}};
  json chunk = {{"id", meta.id},
                {"object", "text_completion"},
                {"created", meta.created},
                {"model", meta.model},
                {"choices", json::array({std::move(choice)})}};
  if (with_usage_field) chunk["usage"] = nullptr;
  return chunk;
}

json chat_chunk(const ResponseMeta& meta, int index, json delta, json logprobs,
                engine::FinishReason finish, bool with_usage_field) {
  json choice = {{"index", index},
                 {"delta", std::move(delta)},
                 {"logprobs", std::move(logprobs)},
                 {"finish_reason", finish_reason_json(finish)}};
  json chunk = {{"id", meta.id},
                {"object", "chat.completion.chunk"},
                {"created", meta.created},
                {"model", meta.model},
                {"choices", json::array({std::move(choice)})}};
  if (with_usage_field) chunk["usage"] = nullptr;
  return chunk;
}

json usage_chunk(const ResponseMeta& meta, const char* object, const UsageCounts& usage) {
  return json{{"id", meta.id},
              {"object", object},
              {"created", meta.created},
              {"model", meta.model},
              {"choices", json::array()},
              {"usage", usage_json(usage)}};
}

}  // namespace pdserve::server
