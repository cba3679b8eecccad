#include "server/openai_protocol.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

#include "server/structured_output.h"
#include "tokenizer/chat_jinja.h"

namespace pdserve::server {
namespace {

// ---- small typed readers: each returns an error for a wrong type or range ----------

std::string quoted(const std::string& name) { return "'" + name + "'"; }

ApiError type_error(const std::string& name, const char* expected, const json& got) {
  return bad_request("Invalid type for " + quoted(name) + ": expected " + expected +
                         ", but got " + json_type_phrase(got) + " instead.",
                     name);
}

ApiError value_error(const std::string& name, const std::string& expected, const json& got) {
  return bad_request("Invalid value for " + quoted(name) + ": expected " + expected +
                         ", but got " + dump_json(got) + ".",
                     name);
}

ApiError missing(const std::string& name) {
  return bad_request("Missing required parameter: " + quoted(name) + ".", name);
}

ApiError unsupported(const std::string& name, const std::string& what) {
  return bad_request(what, name, std::string("unsupported_parameter"));
}

/// The field's value, or nullptr when absent or null.
const json* field(const json& obj, const char* name) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

bool has_key(const json& obj, const char* name) { return obj.find(name) != obj.end(); }

/// An integer (or a float with an integral value) as int64.
std::optional<int64_t> as_integer(const json& v) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned()) {
      auto u = v.get<uint64_t>();
      return u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
                 ? std::numeric_limits<int64_t>::max()
                 : static_cast<int64_t>(u);
    }
    return v.get<int64_t>();
  }
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e18) {
      return static_cast<int64_t>(d);
    }
  }
  return std::nullopt;
}

/// The sampler's seed (a uint64): a JSON integer in [-2^63, 2^64), or a float with such an
/// integral value (1e19), taken modulo 2^64 (-1 is 2^64 - 1), so distinct seeds in range give
/// distinct streams; nullopt for anything else.
std::optional<uint64_t> as_seed(const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer()) return static_cast<uint64_t>(v.get<int64_t>());
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (d == std::floor(d) && d >= -0x1p63 && d < 0x1p64)
      return d < 0 ? static_cast<uint64_t>(static_cast<int64_t>(d)) : static_cast<uint64_t>(d);
  }
  return std::nullopt;
}

int clamp_int(int64_t v) {
  if (v > std::numeric_limits<int>::max()) return std::numeric_limits<int>::max();
  if (v < std::numeric_limits<int>::min()) return std::numeric_limits<int>::min();
  return static_cast<int>(v);
}

std::optional<ApiError> read_int(const json& obj, const char* name, std::optional<int64_t>& out) {
  const json* v = field(obj, name);
  if (!v) return std::nullopt;
  auto i = as_integer(*v);
  if (!i) return type_error(name, "an integer", *v);
  out = *i;
  return std::nullopt;
}

std::optional<ApiError> read_number(const json& obj, const char* name, std::optional<double>& out) {
  const json* v = field(obj, name);
  if (!v) return std::nullopt;
  if (!v->is_number()) return type_error(name, "a number", *v);
  out = v->get<double>();
  return std::nullopt;
}

std::optional<ApiError> read_bool(const json& obj, const char* name, std::optional<bool>& out) {
  const json* v = field(obj, name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) return type_error(name, "a boolean", *v);
  out = v->get<bool>();
  return std::nullopt;
}

std::optional<ApiError> read_string(const json& obj, const char* name,
                                    std::optional<std::string>& out) {
  const json* v = field(obj, name);
  if (!v) return std::nullopt;
  if (!v->is_string()) return type_error(name, "a string", *v);
  out = v->get<std::string>();
  return std::nullopt;
}

#define PDS_TRY(expr)                 \
  do {                                \
    if (auto _e = (expr)) return *_e; \
  } while (0)

// ---- fields common to both endpoints ----------------------------------------------------

std::optional<ApiError> parse_stop(const json& obj, std::vector<std::string>& out) {
  const json* v = field(obj, "stop");
  if (!v) return std::nullopt;
  if (v->is_string()) {
    if (!v->get_ref<const std::string&>().empty()) out.push_back(v->get<std::string>());
    return std::nullopt;
  }
  if (!v->is_array()) return type_error("stop", "a string or an array of strings", *v);
  if (v->size() > static_cast<size_t>(kMaxStop)) {
    return bad_request("Invalid 'stop': array too long. Expected an array with maximum length " +
                           std::to_string(kMaxStop) + ", but got an array with length " +
                           std::to_string(v->size()) + " instead.",
                       "stop");
  }
  for (const auto& s : *v) {
    if (!s.is_string()) return type_error("stop", "a string or an array of strings", *v);
    if (!s.get_ref<const std::string&>().empty()) out.push_back(s.get<std::string>());
  }
  return std::nullopt;
}

/// The sampler extensions of vLLM and llama.cpp's server (engine::SamplingParams):
/// `repetition_penalty` (vLLM: over the whole prompt and output) or `repeat_penalty`
/// (llama.cpp: over the last 64 tokens), in [0.001, 100], 1 ⇒ off (both names may be given
/// with one value; vLLM's window then); `repeat_last_n` sets the window under either name
/// (-1 ⇒ all, 0 ⇒ off, as llama.cpp's); `min_p` in [0, 1]. `typical_p` is refused unless 1 (not implemented).
std::optional<ApiError> parse_sampler_extensions(const json& obj, engine::SamplingParams& params) {
  std::optional<double> vllm, llama;
  PDS_TRY(read_number(obj, "repetition_penalty", vllm));
  PDS_TRY(read_number(obj, "repeat_penalty", llama));
  // Bounded so that l / r and l · r stay finite floats.
  if (vllm && !(*vllm >= 1e-3 && *vllm <= 100.0))
    return value_error("repetition_penalty", "a number between 0.001 and 100 (1 = off)", obj["repetition_penalty"]);
  if (llama && !(*llama >= 1e-3 && *llama <= 100.0))
    return value_error("repeat_penalty", "a number between 0.001 and 100 (1 = off)", obj["repeat_penalty"]);
  // 1 is off (and llama.cpp's default, which its clients send beside the vLLM name).
  if (vllm && *vllm == 1.0) vllm.reset();
  if (llama && *llama == 1.0) llama.reset();
  if (vllm && llama && *vllm != *llama)
    return bad_request("'repetition_penalty' and 'repeat_penalty' name the same penalty; give one of them.", "repeat_penalty");
  std::optional<int64_t> last_n;
  PDS_TRY(read_int(obj, "repeat_last_n", last_n));
  if (last_n && *last_n < -1) return value_error("repeat_last_n", "-1 (the whole sequence), 0 (off) or a positive integer", obj["repeat_last_n"]);
  if (vllm || llama) {
    params.repetition_penalty = static_cast<float>(vllm ? *vllm : *llama);
    params.repetition_last_n = vllm ? 0 : 64;  // the whole sequence under vLLM's name, else llama.cpp's 64
  }
  if (last_n) params.repetition_last_n = *last_n == -1 ? 0 : clamp_int(*last_n);
  if (last_n && *last_n == 0) params.repetition_penalty = 1.0f;  // llama.cpp: 0 disables it
  std::optional<double> min_p;
  PDS_TRY(read_number(obj, "min_p", min_p));
  if (min_p && !(*min_p >= 0.0 && *min_p <= 1.0)) return value_error("min_p", "a number between 0 and 1", obj["min_p"]);
  if (min_p) params.min_p = static_cast<float>(*min_p);
  std::optional<double> typical_p;
  PDS_TRY(read_number(obj, "typical_p", typical_p));
  if (typical_p && *typical_p != 1.0)
    return unsupported("typical_p", "'typical_p' is not supported by this server; omit it or set it to 1.");
  return std::nullopt;
}

/// vLLM's stop extensions: `stop_token_ids` (at most 1024 ids; checked against the
/// vocabulary at submission), `include_stop_str_in_output`, `min_tokens` (>= 0; at most
/// max_tokens: check_min_tokens).
std::optional<ApiError> parse_stop_extensions(const json& obj, engine::SamplingParams& params) {
  if (const json* ids = field(obj, "stop_token_ids")) {
    if (!ids->is_array()) return type_error("stop_token_ids", "an array of token ids", *ids);
    if (ids->size() > 1024) return bad_request("Invalid 'stop_token_ids': at most 1024 ids.", "stop_token_ids");
    for (const json& id : *ids) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > std::numeric_limits<int32_t>::max())
        return bad_request("Invalid 'stop_token_ids': " + id.dump() + " is not a token id.", "stop_token_ids");
      params.stop_token_ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
  }
  std::optional<bool> include;
  PDS_TRY(read_bool(obj, "include_stop_str_in_output", include));
  params.include_stop_str_in_output = include.value_or(false);
  std::optional<int64_t> min_tokens;
  PDS_TRY(read_int(obj, "min_tokens", min_tokens));
  if (min_tokens && *min_tokens < 0) return value_error("min_tokens", "a non-negative integer", obj["min_tokens"]);
  if (min_tokens) params.min_tokens = clamp_int(*min_tokens);
  return std::nullopt;
}

/// min_tokens may not exceed max_tokens (as vLLM); called once max_tokens is known.
std::optional<ApiError> check_min_tokens(const engine::SamplingParams& params) {
  if (params.max_tokens >= 0 && params.min_tokens > params.max_tokens)
    return bad_request("Invalid 'min_tokens': " + std::to_string(params.min_tokens) + " is more than the maximum (" +
                           std::to_string(params.max_tokens) + ") that max_tokens or max_completion_tokens sets.",
                       "min_tokens");
  return std::nullopt;
}

std::optional<ApiError> parse_common(const json& obj, GenerationRequest& r) {
  std::optional<std::string> model;
  PDS_TRY(read_string(obj, "model", model));
  if (model) r.model = *model;

  std::optional<double> temperature;
  PDS_TRY(read_number(obj, "temperature", temperature));
  if (temperature) {
    if (!(*temperature >= 0.0 && *temperature <= 2.0)) {
      return value_error("temperature", "a number between 0 and 2", obj["temperature"]);
    }
    r.params.temperature = static_cast<float>(*temperature);
  }

  std::optional<double> top_p;
  PDS_TRY(read_number(obj, "top_p", top_p));
  if (top_p) {
    if (!(*top_p > 0.0 && *top_p <= 1.0)) {
      return value_error("top_p", "a number greater than 0 and at most 1", obj["top_p"]);
    }
    r.params.top_p = static_cast<float>(*top_p);
  }

  std::optional<int64_t> top_k;
  PDS_TRY(read_int(obj, "top_k", top_k));
  if (top_k) {
    if (*top_k < -1) {
      return value_error("top_k", "-1 or 0 (disabled) or a positive integer", obj["top_k"]);
    }
    r.params.top_k = *top_k <= 0 ? 0 : clamp_int(*top_k);
  }

  if (const json* sv = field(obj, "seed")) {
    const std::optional<uint64_t> seed = as_seed(*sv);
    if (!seed) return type_error("seed", "an integer in [-2^63, 2^64)", *sv);
    r.params.seed = *seed;
  }

  PDS_TRY(parse_stop(obj, r.params.stop));
  PDS_TRY(parse_stop_extensions(obj, r.params));

  std::optional<bool> stream;
  PDS_TRY(read_bool(obj, "stream", stream));
  r.stream = stream.value_or(false);

  if (const json* so = field(obj, "stream_options")) {
    if (!so->is_object()) return type_error("stream_options", "an object", *so);
    if (!r.stream) {
      return bad_request("The 'stream_options' parameter is only allowed when 'stream' is enabled.",
                         "stream_options");
    }
    if (const json* iu = field(*so, "include_usage")) {
      if (!iu->is_boolean()) return type_error("stream_options.include_usage", "a boolean", *iu);
      r.include_usage = iu->get<bool>();
    }
  }

  std::optional<int64_t> n;
  PDS_TRY(read_int(obj, "n", n));
  if (n) {
    if (*n < 1 || *n > kMaxN) {
      return value_error("n", "an integer between 1 and " + std::to_string(kMaxN), obj["n"]);
    }
    r.n = static_cast<int>(*n);
  }

  std::optional<bool> ignore_eos;
  PDS_TRY(read_bool(obj, "ignore_eos", ignore_eos));
  r.params.ignore_eos = ignore_eos.value_or(false);

  std::optional<std::string> user;
  PDS_TRY(read_string(obj, "user", user));
  if (user) r.user = *user;

  // Extensions (as vLLM): scheduling priority and prefix-cache namespace.
  std::optional<int64_t> priority;
  PDS_TRY(read_int(obj, "priority", priority));
  if (priority) r.priority = clamp_int(*priority);
  std::optional<std::string> cache_salt;
  PDS_TRY(read_string(obj, "cache_salt", cache_salt));
  if (cache_salt) r.cache_salt = *cache_salt;
  // Extension: decode SLO class (gateway/slo_class.h); the gateway checks the key allows it.
  std::optional<std::string> slo_class;
  PDS_TRY(read_string(obj, "slo_class", slo_class));
  if (slo_class) {
    if (*slo_class != "high" && *slo_class != "medium" && *slo_class != "low")
      return value_error("slo_class", "one of 'high', 'medium', 'low'", obj["slo_class"]);
    r.slo_class = *slo_class;
  }
  // Extension: KV tokens kept per sequence (token eviction, --kv-budget); checked against
  // the engine's limits at submission.
  std::optional<int64_t> kv_budget;
  PDS_TRY(read_int(obj, "kv_budget", kv_budget));
  if (kv_budget) {
    // Above INT32_MAX no context is that long: named here, as the value sent (not clamped).
    if (*kv_budget < 1 || *kv_budget > std::numeric_limits<int32_t>::max())
      return value_error("kv_budget", "an integer between the server's minimum (--kv-sinks + --kv-recent) and the context length",
                         obj["kv_budget"]);
    r.kv_budget = static_cast<int>(*kv_budget);
  }

  // OpenAI's penalties over the tokens generated so far (engine::adjust_logits).
  for (auto [name, out] : {std::pair<const char*, float*>{"presence_penalty", &r.params.presence_penalty},
                           {"frequency_penalty", &r.params.frequency_penalty}}) {
    std::optional<double> p;
    PDS_TRY(read_number(obj, name, p));
    if (p && (*p < -2.0 || *p > 2.0)) return value_error(name, "a number between -2 and 2", obj[name]);
    if (p) *out = static_cast<float>(*p);
  }
  PDS_TRY(parse_sampler_extensions(obj, r.params));
  // OpenAI's logit_bias: {"token id": bias in [-100, 100]}; the engine checks the ids
  // against the vocabulary.
  if (const json* lb = field(obj, "logit_bias"); lb && !lb->is_null()) {
    if (!lb->is_object()) return type_error("logit_bias", "an object", *lb);
    if (lb->size() > 1024) return bad_request("Invalid 'logit_bias': at most 1024 tokens may be biased.", "logit_bias");
    for (auto it = lb->begin(); it != lb->end(); ++it) {
      const std::string& key = it.key();
      const bool digits = !key.empty() && key.size() <= 9 && (key == "0" || key[0] != '0') &&
                          std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
      if (!digits)
        return bad_request("Invalid 'logit_bias': key '" + key + "' is not a token id (a non-negative integer, no leading zeros).",
                           "logit_bias");
      if (!it.value().is_number() || it.value().get<double>() < -100.0 || it.value().get<double>() > 100.0)
        return bad_request("Invalid 'logit_bias': the bias of token " + key + " must be a number between -100 and 100.", "logit_bias");
      // Kept at 0 too, so every id is checked against the vocabulary.
      r.params.logit_bias.emplace_back(std::stoi(key), static_cast<float>(it.value().get<double>()));
    }
  }
  return std::nullopt;
}

/// max_tokens-like field: an integer >= 1.
std::optional<ApiError> parse_max_tokens(const json& obj, const char* name, int& out) {
  std::optional<int64_t> v;
  PDS_TRY(read_int(obj, name, v));
  if (!v) return std::nullopt;
  if (*v < 1) return value_error(name, "an integer >= 1", obj[name]);
  out = clamp_int(*v);
  return std::nullopt;
}

// ---- /v1/completions -----------------------------------------------------------------

std::optional<ApiError> parse_token_list(const json& arr, std::vector<int32_t>& out) {
  if (arr.empty()) return bad_request("Invalid 'prompt': the token list is empty.", "prompt");
  out.reserve(arr.size());
  for (const auto& t : arr) {
    auto id = as_integer(t);
    if (!id) return type_error("prompt", "a string, an array of strings or token ids", arr);
    if (*id < 0 || *id > std::numeric_limits<int32_t>::max()) {
      return bad_request("Invalid 'prompt': token id " + std::to_string(*id) + " is out of range.",
                         "prompt");
    }
    out.push_back(static_cast<int32_t>(*id));
  }
  return std::nullopt;
}

std::optional<ApiError> parse_prompt(const json& obj, std::vector<PromptInput>& out) {
  if (!has_key(obj, "prompt") || obj["prompt"].is_null()) return missing("prompt");
  const json& p = obj["prompt"];
  const char* expected = "a string, an array of strings, or an array of token ids";
  if (p.is_string()) {
    out.push_back(PromptInput{false, p.get<std::string>(), {}});
    return std::nullopt;
  }
  if (!p.is_array()) return type_error("prompt", expected, p);
  if (p.empty()) return bad_request("Invalid 'prompt': the prompt is empty.", "prompt");
  const json& first = p.front();
  if (first.is_string()) {
    for (const auto& s : p) {
      if (!s.is_string()) return type_error("prompt", expected, s);
      out.push_back(PromptInput{false, s.get<std::string>(), {}});
    }
  } else if (first.is_number()) {
    PromptInput in;
    in.is_tokens = true;
    PDS_TRY(parse_token_list(p, in.tokens));
    out.push_back(std::move(in));
  } else if (first.is_array()) {
    for (const auto& a : p) {
      if (!a.is_array()) return type_error("prompt", expected, a);
      PromptInput in;
      in.is_tokens = true;
      PDS_TRY(parse_token_list(a, in.tokens));
      out.push_back(std::move(in));
    }
  } else {
    return type_error("prompt", expected, first);
  }
  return std::nullopt;
}

/// echo, suffix and best_of ≠ n (legacy completions fields; vLLM also takes echo on chat)
/// change the answer, so a request that sets them is refused rather than served without them.
std::optional<ApiError> refuse_echo_suffix_best_of(const json& obj, const GenerationRequest& r) {
  std::optional<bool> echo;
  PDS_TRY(read_bool(obj, "echo", echo));
  if (echo.value_or(false)) {
    return unsupported("echo", "'echo' is not supported by this server; omit it or set it to false.");
  }
  std::optional<std::string> suffix;
  PDS_TRY(read_string(obj, "suffix", suffix));
  if (suffix && !suffix->empty()) {
    return unsupported("suffix", "'suffix' is not supported by this server.");
  }
  std::optional<int64_t> best_of;
  PDS_TRY(read_int(obj, "best_of", best_of));
  if (best_of && *best_of != r.n) {
    return unsupported("best_of", "'best_of' is not supported by this server; omit it or set it to n.");
  }
  return std::nullopt;
}

std::optional<ApiError> parse_completion_fields(const json& obj, GenerationRequest& r,
                                                uint64_t max_grammar_states = kDefaultMaxGrammarStates) {
  r.endpoint = Endpoint::Completions;
  PDS_TRY(parse_prompt(obj, r.prompts));
  PDS_TRY(parse_common(obj, r));

  // Absent ⇒ 16 (OpenAI default); explicit null ⇒ no limit (as vLLM).
  r.params.max_tokens = has_key(obj, "max_tokens") && obj["max_tokens"].is_null()
                            ? -1
                            : kDefaultCompletionMaxTokens;
  PDS_TRY(parse_max_tokens(obj, "max_tokens", r.params.max_tokens));
  PDS_TRY(check_min_tokens(r.params));

  std::optional<int64_t> logprobs;
  PDS_TRY(read_int(obj, "logprobs", logprobs));
  if (logprobs) {
    if (*logprobs < 0 || *logprobs > kMaxLogprobs) {
      return value_error("logprobs", "an integer between 0 and " + std::to_string(kMaxLogprobs),
                         obj["logprobs"]);
    }
    r.params.top_logprobs = static_cast<int>(*logprobs);
  }

  PDS_TRY(refuse_echo_suffix_best_of(obj, r));
  PDS_TRY(parse_structured_output(obj, r.params, &r.grammar_param, max_grammar_states));
  if (r.num_choices() > kMaxChoices) {
    return bad_request("Too many choices: the number of prompts times n must be at most " +
                           std::to_string(kMaxChoices) + ".",
                       "n");
  }
  return std::nullopt;
}

// ---- /v1/chat/completions ------------------------------------------------------------

std::optional<ApiError> parse_content(const json& content, const std::string& pname,
                                      std::string& out) {
  if (content.is_null()) return std::nullopt;
  if (content.is_string()) {
    out = content.get<std::string>();
    return std::nullopt;
  }
  if (!content.is_array()) return type_error(pname, "a string or an array of content parts", content);
  bool first = true;
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    const std::string ppart = pname + "[" + std::to_string(i) + "]";
    if (!part.is_object()) return type_error(ppart, "an object", part);
    const json* type = field(part, "type");
    if (!type || !type->is_string()) return missing(ppart + ".type");
    if (type->get_ref<const std::string&>() != "text") {
      return bad_request("Invalid value for " + quoted(ppart + ".type") + ": only 'text' content " +
                             "parts are supported, but got " + dump_json(*type) + ".",
                         ppart + ".type");
    }
    const json* text = field(part, "text");
    if (!text) return missing(ppart + ".text");
    if (!text->is_string()) return type_error(ppart + ".text", "a string", *text);
    if (!first) out += "\n";
    out += text->get<std::string>();
    first = false;
  }
  return std::nullopt;
}

std::optional<ApiError> parse_messages(const json& obj, std::vector<tokenizer::ChatMessage>& out,
                                       json* template_out = nullptr) {
  const json* msgs = field(obj, "messages");
  if (!msgs) return missing("messages");
  if (!msgs->is_array()) return type_error("messages", "an array", *msgs);
  if (msgs->empty()) {
    return bad_request("Invalid 'messages': empty array. Expected an array with minimum length 1, "
                       "but got an empty array instead.",
                       "messages");
  }
  for (size_t i = 0; i < msgs->size(); ++i) {
    const json& m = (*msgs)[i];
    const std::string pm = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return type_error(pm, "an object", m);
    const json* role = field(m, "role");
    if (!role) return missing(pm + ".role");
    if (!role->is_string()) return type_error(pm + ".role", "a string", *role);
    std::string r = role->get<std::string>();
    if (r == "developer") r = "system";
    if (r == "function") {
      return unsupported(pm + ".role", "Messages with role '" + r +
                                           "' are not supported by this server; use 'tool'.");
    }
    if (r != "system" && r != "user" && r != "assistant" && r != "tool") {
      return value_error(pm + ".role", "one of 'system', 'developer', 'user', 'assistant', 'tool'", *role);
    }
    tokenizer::ChatMessage msg;
    msg.role = r;
    // content: required, and null only for an assistant; an assistant turn with tool_calls
    // may leave it out (OpenAI: "required unless tool_calls ... is specified").
    static const json kNullContent;
    auto it = m.find("content");
    const auto calls = m.find("tool_calls");
    const bool calls_only = it == m.end() && r == "assistant" && calls != m.end() && !calls->is_null();
    if ((it == m.end() && !calls_only) || (it != m.end() && it->is_null() && r != "assistant")) return missing(pm + ".content");
    const json& content = calls_only ? kNullContent : *it;
    PDS_TRY(parse_content(content, pm + ".content", msg.content));
    if (template_out) {
      json tm = {{"role", r}, {"content", content.is_null() ? json() : json(msg.content)}};
      for (const char* k : {"tool_calls", "tool_call_id", "name"})
        if (auto f = m.find(k); f != m.end()) tm[k] = *f;
      template_out->push_back(std::move(tm));
    }
    PDS_TRY(render_tool_message(m, pm, msg.role, msg.content));  // tool calls and results (tool_calls.h)
    out.push_back(std::move(msg));
  }
  return std::nullopt;
}

/// `chat_template_kwargs` (vLLM, llama.cpp): a JSON object of template variables or null;
/// OpenAI's `reasoning_effort` becomes the template variable of that name (as vLLM and
/// llama.cpp pass it, e.g. to gpt-oss's template) unless chat_template_kwargs sets it.
std::optional<ApiError> parse_chat_template_kwargs(const json& obj, json& out) {
  if (const json* k = field(obj, "chat_template_kwargs"); k && !k->is_null()) {
    if (!k->is_object()) return type_error("chat_template_kwargs", "an object", *k);
    if (std::string why = tokenizer::template_kwargs_error(*k); !why.empty())
      return bad_request("Invalid 'chat_template_kwargs': " + why + ".", "chat_template_kwargs");
    out = *k;
  }
  std::optional<std::string> effort;
  PDS_TRY(read_string(obj, "reasoning_effort", effort));
  if (effort) {
    static const char* const kEfforts[] = {"none", "minimal", "low", "medium", "high", "xhigh"};
    if (std::find(std::begin(kEfforts), std::end(kEfforts), *effort) == std::end(kEfforts))
      return value_error("reasoning_effort", "one of 'none', 'minimal', 'low', 'medium', 'high', 'xhigh'", obj["reasoning_effort"]);
    if (!out.is_object() || !out.contains("reasoning_effort")) out["reasoning_effort"] = *effort;
  }
  return std::nullopt;
}

std::optional<ApiError> parse_chat_fields(const json& obj, GenerationRequest& r,
                                          uint64_t max_grammar_states = kDefaultMaxGrammarStates) {
  r.endpoint = Endpoint::ChatCompletions;
  PDS_TRY(parse_messages(obj, r.messages, &r.template_messages));
  PDS_TRY(parse_chat_template_kwargs(obj, r.chat_template_kwargs));
  PDS_TRY(parse_common(obj, r));

  r.params.max_tokens = -1;
  PDS_TRY(parse_max_tokens(obj, "max_tokens", r.params.max_tokens));
  PDS_TRY(parse_max_tokens(obj, "max_completion_tokens", r.params.max_tokens));
  PDS_TRY(check_min_tokens(r.params));
  PDS_TRY(refuse_echo_suffix_best_of(obj, r));
  // vLLM's: false renders the conversation without the assistant's opening (the model then
  // continues the last message's turn, as a base model would).
  std::optional<bool> agp;
  PDS_TRY(read_bool(obj, "add_generation_prompt", agp));
  r.add_generation_prompt = agp.value_or(true);

  std::optional<bool> logprobs;
  PDS_TRY(read_bool(obj, "logprobs", logprobs));
  std::optional<int64_t> top_logprobs;
  PDS_TRY(read_int(obj, "top_logprobs", top_logprobs));
  if (top_logprobs) {
    if (*top_logprobs < 0 || *top_logprobs > kMaxLogprobs) {
      return value_error("top_logprobs", "an integer between 0 and " + std::to_string(kMaxLogprobs),
                         obj["top_logprobs"]);
    }
    if (!logprobs.value_or(false)) {
      return bad_request("'top_logprobs' requires 'logprobs' to be true.", "top_logprobs");
    }
  }
  if (logprobs.value_or(false)) r.params.top_logprobs = static_cast<int>(top_logprobs.value_or(0));

  if (const json* fns = field(obj, "functions")) {
    if (!fns->is_array() || !fns->empty()) {
      return unsupported("functions", "'functions' are not supported by this server.");
    }
  }
  PDS_TRY(parse_structured_output(obj, r.params, &r.grammar_param, max_grammar_states));
  PDS_TRY(parse_tools(obj, r.tools, max_grammar_states));
  if (const json* t = field(obj, "tools"); t && t->is_array()) r.template_tools = *t;
  if (r.tools.active()) {  // describe the tools in the system message; constrain the output
    if (!r.params.grammar.empty())
      return bad_request("'tools' cannot be combined with a structured-output constraint.", "tools");
    if (r.messages.empty() || r.messages[0].role != "system") r.messages.insert(r.messages.begin(), {"system", ""});
    std::string& sys = r.messages[0].content;
    sys += (sys.empty() ? "" : "\n\n") + tools_system_prompt(r.tools);
    r.params.grammar = tools_grammar(r.tools);
    r.grammar_param = "tools";
  }
  return std::nullopt;
}

template <typename Fn>
ParsedRequest parse_object(const json& body, Fn&& fn) {
  ParsedRequest out;
  if (!body.is_object()) {
    out.error = bad_request("The request body must be a JSON object, but got " +
                            json_type_phrase(body) + ".");
    return out;
  }
  if (auto e = fn(body, out.request)) out.error = std::move(*e);
  return out;
}

template <typename Fn>
ParsedRequest parse_text(std::string_view body, Fn&& fn) {
  json j;
  try {
    j = json::parse(body.begin(), body.end());
  } catch (const json::exception& e) {  // syntax errors, and numbers out of range (1e400)
    // Drop the library's "[json.exception.parse_error.101] " prefix.
    std::string what = e.what();
    if (const size_t p = what.find("] "); what.rfind("[json.exception.", 0) == 0 && p != std::string::npos)
      what = what.substr(p + 2);
    ParsedRequest out;
    out.error = bad_request("We could not parse the JSON body of your request: " + what);
    return out;
  }
  return parse_object(j, fn);
}

}  // namespace

ParsedRequest parse_completion_json(const json& body) {
  return parse_object(body, [](const json& o, GenerationRequest& r) { return parse_completion_fields(o, r); });
}
ParsedRequest parse_completion_request(std::string_view body, uint64_t max_grammar_states) {
  return parse_text(body, [&](const json& o, GenerationRequest& r) { return parse_completion_fields(o, r, max_grammar_states); });
}
ParsedRequest parse_chat_json(const json& body) {
  return parse_object(body, [](const json& o, GenerationRequest& r) { return parse_chat_fields(o, r); });
}
ParsedRequest parse_chat_request(std::string_view body, uint64_t max_grammar_states) {
  return parse_text(body, [&](const json& o, GenerationRequest& r) { return parse_chat_fields(o, r, max_grammar_states); });
}

ParsedRequest parse_apply_template_request(std::string_view body) {
  return parse_text(body, [](const json& obj, GenerationRequest& r) -> std::optional<ApiError> {
    r.endpoint = Endpoint::ChatCompletions;
    PDS_TRY(parse_messages(obj, r.messages, &r.template_messages));
    PDS_TRY(parse_chat_template_kwargs(obj, r.chat_template_kwargs));
    std::optional<bool> agp;
    PDS_TRY(read_bool(obj, "add_generation_prompt", agp));
    r.add_generation_prompt = agp.value_or(true);
    PDS_TRY(parse_tools(obj, r.tools));
    if (const json* t = field(obj, "tools"); t && t->is_array()) r.template_tools = *t;
    if (r.tools.active()) {  // as a chat request describes them without a Jinja template
      if (r.messages.empty() || r.messages[0].role != "system") r.messages.insert(r.messages.begin(), {"system", ""});
      std::string& sys = r.messages[0].content;
      sys += (sys.empty() ? "" : "\n\n") + tools_system_prompt(r.tools);
    }
    return std::nullopt;
  });
}

std::optional<ApiError> check_model(const GenerationRequest& req, const std::string& served_model) {
  if (req.model.empty() || req.model == served_model) return std::nullopt;
  return model_not_found(req.model);
}

}  // namespace pdserve::server
