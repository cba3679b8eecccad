#include "server/generation.h"

#include <algorithm>
#include <utility>

#include "base/log.h"
#include "base/clock.h"

namespace pdserve::server {

namespace {

std::string vocab_piece(const tokenizer::Vocab& v, int32_t id) {
  if (id < 0 || id >= v.size()) return {};
  return v.tokens[static_cast<size_t>(id)];
}

/// B such that no text of more than n·B bytes tokenizes to n tokens or fewer, or 0 when
/// the vocabulary gives no such bound. Every token covers a disjoint span of the input
/// of at most B bytes (its piece, or its text for special tokens), unless the tokenizer
/// drops input: stripping whitespace next to special tokens, or a byte that no token
/// encodes (checked here for each byte value).
size_t bytes_per_token_bound(const tokenizer::Tokenizer& tok) {
  const tokenizer::Vocab& v = tok.vocab();
  for (uint8_t f : v.strip)
    if (f) return 0;
  for (int b = 0; b < 256; ++b) {
    const std::string s(1, static_cast<char>(b));
    if (tok.decode(tok.encode(s, false, false)).find(s) == std::string::npos) return 0;
  }
  size_t m = 1;
  for (int32_t id = 0; id < v.size(); ++id)
    m = std::max({m, tok.token_to_piece(id).size(), v.tokens[static_cast<size_t>(id)].size()});
  return m;
}

}  // namespace

PromptEncoder::PromptEncoder(const tokenizer::Tokenizer& tok,
                             tokenizer::ChatTemplateKind chat_template,
                             std::shared_ptr<const tokenizer::JinjaChatTemplate> jinja, std::time_t template_now,
                             json template_kwargs)
    : tok_(tok),
      chat_template_(chat_template),
      jinja_(std::move(jinja)),
      template_syntax_(jinja_ ? detect_tool_syntax(jinja_->source()) : ToolSyntax::kWrapper),
      template_now_(template_now),
      template_kwargs_(std::move(template_kwargs)),
      bos_text_(vocab_piece(tok.vocab(), tok.vocab().bos_id)),
      eos_text_(vocab_piece(tok.vocab(), tok.vocab().eos_id)),
      max_bytes_per_token_(bytes_per_token_bound(tok)) {}

std::optional<ApiError> PromptEncoder::check_bytes(size_t bytes, int max_tokens, const GenerationRequest& req) const {
  if (max_tokens <= 0 || max_bytes_per_token_ == 0) return std::nullopt;
  if (static_cast<uint64_t>(bytes) <= static_cast<uint64_t>(max_tokens) * max_bytes_per_token_) return std::nullopt;
  const std::string param = req.prompt_param();
  return bad_request("This model's maximum context length is " + std::to_string(max_tokens) +
                         " tokens. However, your prompt is " + std::to_string(bytes) +
                         " bytes long, more than that many tokens can hold (at most " +
                         std::to_string(max_bytes_per_token_) + " bytes per token). Please reduce the length of the " +
                         (req.endpoint == Endpoint::ChatCompletions ? "messages." : "prompt."),
                     param, std::string("context_length_exceeded"));
}

std::string PromptEncoder::render(const std::vector<tokenizer::ChatMessage>& messages) const {
  return tokenizer::render_chat(chat_template_, messages, /*add_generation_prompt=*/true, bos_text_,
                                eos_text_);
}

std::string PromptEncoder::render_chat_prompt(const GenerationRequest& req, std::vector<tokenizer::TextSpan>* content,
                                              bool* bos_stripped, bool add_generation_prompt,
                                              ToolSyntax* tool_syntax, std::optional<ApiError>* error) const {
  if (bos_stripped) *bos_stripped = false;
  if (tool_syntax) *tool_syntax = ToolSyntax::kWrapper;
  if (jinja_) {
    const auto& caps = jinja_->caps();
    bool tool_turns = false;
    for (const auto& m : req.template_messages)
      tool_turns |= m.contains("tool_calls") || m.value("role", "") == "tool";
    const bool template_form =
        (!req.tools.active() || caps.supports_tools) && (!tool_turns || caps.supports_tool_calls);
    json messages = json::array();
    if (template_form) {
      messages = req.template_messages;
      if (template_syntax_ == ToolSyntax::kMistral) {  // ids from elsewhere (call_..., another server's)
        for (json& m : messages) {
          if (auto calls = m.find("tool_calls"); calls != m.end() && calls->is_array())
            for (json& c : *calls)
              if (c.is_object() && c.contains("id") && c["id"].is_string()) c["id"] = mistral_call_id(c["id"]);
          if (auto id = m.find("tool_call_id"); id != m.end() && id->is_string()) *id = mistral_call_id(*id);
        }
      }
    } else {
      for (const auto& m : req.messages) messages.push_back({{"role", m.role}, {"content", m.content}});
    }
    const json tools = template_form && req.tools.active() ? req.template_tools : json();
    const ToolSyntax syntax = tools.is_null() ? ToolSyntax::kWrapper : template_syntax_;
    if (!tools.is_null() && syntax == ToolSyntax::kWrapper) {  // the template defines no call syntax
      if (!messages.empty() && messages[0].value("role", "") == "system" && messages[0]["content"].is_string())
        messages[0]["content"] = messages[0]["content"].get<std::string>() + "\n\n" + tool_syntax_instructions();
      else
        messages.insert(messages.begin(), json{{"role", "system"}, {"content", tool_syntax_instructions()}});
    }
    const bool strip = tok_.vocab().add_bos;
    json kwargs = template_kwargs_;
    if (req.chat_template_kwargs.is_object())
      for (const auto& [name, value] : req.chat_template_kwargs.items()) kwargs[name] = value;
    try {
      std::vector<tokenizer::TextSpan> spans;
      std::string text = jinja_->apply_with_spans(messages, tools, add_generation_prompt,
                                                  template_now_ ? template_now_ : std::time(nullptr), strip, &spans, kwargs);
      if (bos_stripped) *bos_stripped = strip && !bos_text_.empty();
      if (content) *content = std::move(spans);
      if (tool_syntax) *tool_syntax = syntax;
      return text;
    } catch (const std::exception& e) {
      if (error && req.chat_template_kwargs.is_object() && !req.chat_template_kwargs.empty()) {
        bool renders_without = false;
        try {
          jinja_->apply(messages, tools, add_generation_prompt, template_now_ ? template_now_ : std::time(nullptr), strip,
                        nullptr, template_kwargs_);
          renders_without = true;
        } catch (const std::exception&) {
        }
        if (renders_without) {
          *error = bad_request(std::string("The chat template fails with this request's chat_template_kwargs (or "
                                           "reasoning_effort): ") + e.what(),
                               "chat_template_kwargs");
          return "";
        }
      }
      PDS_LOG_WARN("chat template: {}; this request uses the built-in '{}' format", e.what(),
                   tokenizer::chat_template_name(chat_template_));
    }
  }
  return tokenizer::render_chat(chat_template_, req.messages, add_generation_prompt, bos_text_, eos_text_, content);
}

std::optional<ApiError> PromptEncoder::encode(const GenerationRequest& req, int context_length,
                                              std::vector<std::vector<int32_t>>& out, ToolSyntax* tool_syntax) const {
  const auto& vocab = tok_.vocab();
  const std::string param = req.prompt_param();
  out.clear();
  if (req.endpoint == Endpoint::ChatCompletions) {
    // Special tokens only in the template's text; message content is plain text.
    std::vector<tokenizer::TextSpan> content;
    bool bos_stripped = false;
    std::optional<ApiError> template_error;
    const std::string text = render_chat_prompt(req, &content, &bos_stripped, req.add_generation_prompt, tool_syntax,
                                                &template_error);
    if (template_error) return template_error;
    if (auto err = check_bytes(text.size(), context_length, req)) return err;  // before tokenizing
    // Templates that spell BOS in text (e.g. Llama 3) must not get a second one (the
    // Jinja path already removed a leading BOS text, as llama.cpp does).
    bool add_bos = vocab.add_bos;
    const bool bos_in_template = content.empty() || content.front().offset >= bos_text_.size();
    if (!bos_stripped && add_bos && !bos_text_.empty() && text.rfind(bos_text_, 0) == 0 && bos_in_template)
      add_bos = false;
    out.push_back(tok_.encode_chat(text, add_bos, content));
  } else {
    for (const auto& p : req.prompts) {
      if (p.is_tokens) {
        if (vocab.size() > 0) {
          for (int32_t id : p.tokens) {
            if (id < 0 || id >= vocab.size()) {
              return bad_request("Invalid 'prompt': token id " + std::to_string(id) +
                                     " is outside the vocabulary [0, " +
                                     std::to_string(vocab.size()) + ").",
                                 param);
            }
          }
        }
        out.push_back(p.tokens);
      } else {
        if (auto err = check_bytes(p.text.size(), context_length, req)) return err;  // before tokenizing
        out.push_back(tok_.encode(p.text, vocab.add_bos, /*parse_special=*/false));
      }
    }
  }
  for (const auto& ids : out) {
    if (ids.empty()) return bad_request("Invalid '" + param + "': the prompt is empty.", param);
    if (context_length > 0 && static_cast<int64_t>(ids.size()) >= context_length) {
      return bad_request("This model's maximum context length is " +
                             std::to_string(context_length) + " tokens. However, your prompt is " +
                             std::to_string(ids.size()) +
                             " tokens long, which leaves no room for generated tokens. "
                             "Please reduce the length of the " +
                             (req.endpoint == Endpoint::ChatCompletions ? "messages." : "prompt."),
                         param, std::string("context_length_exceeded"));
    }
  }
  return std::nullopt;
}

std::optional<ApiError> ChoiceStreams::submit(engine::Engine& engine, const GenerationRequest& req,
                                              const std::vector<std::vector<int32_t>>& prompts) {
  slots_.clear();
  slots_.reserve(prompts.size() * static_cast<size_t>(req.n));
  // An engine that cannot serve now (a router without a healthy decode worker): 503, which
  // clients retry, not a 400 for a request that is fine.
  if (const std::string why = engine.not_ready_reason(); !why.empty()) return unavailable("Service unavailable: " + why + ".");
  engine::RequestOptions opts;
  opts.n = req.n;
  opts.priority = req.priority;
  opts.cache_salt = req.cache_salt;
  if (lease_) {
    opts.cache_salt = lease_->cache_salt(req.cache_salt);
    opts.slo_class = static_cast<int>(lease_->slo_class());
    if (opts.slo_class >= 0) {
      opts.ttft_target_s = lease_->policy().ttft_s;
      opts.tpot_target_s = lease_->policy().tpot_s;
      opts.max_queue_s = lease_->policy().max_queue_s;
    }
  }
  for (const auto& [token, bias] : req.params.logit_bias)
    if (token >= engine.tokenizer().vocab().size())
      return bad_request("Invalid 'logit_bias': token " + std::to_string(token) + " is not in the vocabulary (ids 0 to " +
                             std::to_string(engine.tokenizer().vocab().size() - 1) + ").",
                         "logit_bias");
  for (int32_t token : req.params.stop_token_ids)
    if (token >= engine.tokenizer().vocab().size())
      return bad_request("Invalid 'stop_token_ids': token " + std::to_string(token) + " is not in the vocabulary (ids 0 to " +
                             std::to_string(engine.tokenizer().vocab().size() - 1) + ").",
                         "stop_token_ids");
  opts.kv_budget = req.kv_budget;
  if (req.kv_budget > 0)
    if (std::string why = engine.kv_budget_error(req.kv_budget); !why.empty()) return bad_request(why, "kv_budget");
  for (const auto& prompt : prompts) {
    // One engine request per prompt; its n choices share the prompt's KV blocks and
    // choice k samples with seed + k.
    auto r = engine.submit_group(prompt, req.params, opts);
    if (!r.ok()) {
      abort_all();
      // The code decides: a bad request is a 400 naming the prompt; an engine that went
      // unavailable meanwhile (e.g. every decode worker died) answers 503, which clients
      // retry; a new cache_salt while --max-cache-salts others are in use is a 429 naming
      // the salt (retryable: the request is fine, the server is busy with other salts).
      if (r.status().code() == StatusCode::RateLimited)
        return ApiError{429, r.status().message() + ".", "requests",
                        std::string("cache_salt"), std::string("rate_limit_exceeded")};
      return api_error(r.status(), std::string(req.prompt_param()));
    }
    for (int k = 0; k < req.n; ++k) {
      Slot s;
      s.stream = std::move(r.value()[k]);
      s.stream->set_push_event(ready_);
      s.first_of_prompt = k == 0;
      s.prompt_tokens = static_cast<int>(prompt.size());
      slots_.push_back(std::move(s));
      ++unfinished_;
    }
  }
  return std::nullopt;
}

void ChoiceStreams::record(Slot& s, const engine::StreamDelta& d) {
  if (d.prompt_tokens > 0) s.prompt_tokens = d.prompt_tokens;
  if (d.cached_tokens > 0) s.cached_tokens = d.cached_tokens;
  if (d.completion_tokens > s.completion_tokens) {
    completion_total_ += d.completion_tokens - s.completion_tokens;
    s.completion_tokens = d.completion_tokens;
    if (lease_) lease_->on_tokens(completion_total_, now_seconds());
  }
  if (d.finish != engine::FinishReason::None && !s.finished) {
    s.finished = true;
    --unfinished_;
  }
}

bool ChoiceStreams::next(Event& out, std::chrono::milliseconds timeout) {
  const size_t n = slots_.size();
  if (unfinished_ == 0 || n == 0) return false;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    // One non-blocking pass over the unfinished choices, starting after the last served
    // one so that no choice starves the others.
    for (size_t k = 0; k < n; ++k) {
      const size_t i = (cursor_ + k) % n;
      Slot& s = slots_[i];
      if (s.finished) continue;
      if (s.stream->next(out.delta, std::chrono::milliseconds(0))) {
        out.choice = static_cast<int>(i);
        record(s, out.delta);
        cursor_ = (i + 1) % n;
        return true;
      }
    }
    // Nothing ready: sleep until any choice's stream is pushed to (a push since the pass
    // above left the event raised) or the timeout ends.
    if (timeout.count() <= 0 || !ready_->wait_until(deadline)) return false;
  }
}

void ChoiceStreams::abort_all() {
  for (auto& s : slots_) {
    if (!s.finished && s.stream) s.stream->abort();
  }
}

UsageCounts ChoiceStreams::usage() const {
  UsageCounts u;
  for (const auto& s : slots_) {
    if (s.first_of_prompt) {
      u.prompt_tokens += s.prompt_tokens;
      u.cached_tokens += s.cached_tokens;
    }
    u.completion_tokens += s.completion_tokens;
  }
  return u;
}

}  // namespace pdserve::server
