// Test doubles for the server layer: a byte-level FakeTokenizer and a FakeEngine that
// "generates" by echoing the prompt's non-control tokens back, one token per delta, on a
// thread per request. The FakeEngine records submissions and aborts so tests can check
// what the API layer asked for and that it always releases requests.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "engine/output_processor.h"
#include "engine/request_stream.h"
#include "engine/sampling_params.h"
#include "tokenizer/tokenizer.h"

namespace pdserve::testing {

/// ids: 0 <unk>, 1 <s> (BOS), 2 </s> (EOS), 3 + b for byte b. Pieces are single raw bytes,
/// so a multi-byte UTF-8 character spans several tokens.
class FakeTokenizer : public tokenizer::Tokenizer {
 public:
  static constexpr int32_t kBos = 1, kEos = 2, kByteBase = 3;

  explicit FakeTokenizer(std::string chat_template = "") : Tokenizer(make_vocab(chat_template)) {}

  std::vector<int32_t> encode(std::string_view text, bool add_bos,
                              bool parse_special = false) const override {
    std::vector<int32_t> ids;
    if (add_bos) ids.push_back(kBos);
    size_t i = 0;
    while (i < text.size()) {
      if (parse_special && text.substr(i, 3) == "<s>") {
        ids.push_back(kBos);
        i += 3;
      } else if (parse_special && text.substr(i, 4) == "</s>") {
        ids.push_back(kEos);
        i += 4;
      } else {
        ids.push_back(kByteBase + static_cast<unsigned char>(text[i]));
        ++i;
      }
    }
    return ids;
  }

  std::string token_to_piece(int32_t id) const override {
    if (id >= kByteBase && id < kByteBase + 256) return std::string(1, static_cast<char>(id - kByteBase));
    return "";
  }

  /// Token ids of `text` without BOS (what the fake engine echoes back).
  std::vector<int32_t> ids(std::string_view text) const { return encode(text, false, false); }

 private:
  static tokenizer::Vocab make_vocab(const std::string& chat_template) {
    tokenizer::Vocab v;
    v.model = "llama";
    v.tokens = {"<unk>", "<s>", "</s>"};
    v.types = {tokenizer::TokenType::UNKNOWN, tokenizer::TokenType::CONTROL,
               tokenizer::TokenType::CONTROL};
    for (int b = 0; b < 256; ++b) {
      v.tokens.push_back(std::string(1, static_cast<char>(b)));
      v.types.push_back(tokenizer::TokenType::BYTE);
    }
    v.scores.assign(v.tokens.size(), 0.f);
    for (int32_t i = 0; i < static_cast<int32_t>(v.tokens.size()); ++i) v.token_to_id[v.tokens[i]] = i;
    v.unk_id = 0;
    v.bos_id = kBos;
    v.eos_id = kEos;
    v.add_bos = true;
    v.chat_template = chat_template;
    return v;
  }
};

struct FakeEngineOptions {
  std::string model_name = "fake-model";
  int context_length = 256;
  std::chrono::milliseconds token_delay{0};  // pause before each generated token
  std::string chat_template;                 // the vocab's tokenizer.chat_template
};

/// Output rule: the prompt's non-control tokens in order, then EOS (finish "stop", no
/// token sent for it), unless ignore_eos (then the prompt cycles). Text, stop strings,
/// max_tokens and the context end as the engine does them (engine::OutputProcessor).
/// Logprobs: the token at -0.25 and alternatives token+1, token+2, ... at -1.5, -2.5, ...
class FakeEngine : public engine::Engine {
 public:
  struct Submission {
    std::vector<int32_t> prompt;
    engine::SamplingParams params;
  };

  explicit FakeEngine(FakeEngineOptions opts = {})
      : opts_(std::move(opts)), tok_(opts_.chat_template) {}
  ~FakeEngine() override { shutdown(); }

  Result<std::shared_ptr<engine::RequestStream>> submit(std::vector<int32_t> prompt,
                                                        const engine::SamplingParams& params) override {
    std::lock_guard<std::mutex> lock(mu_);
    submissions_.push_back({prompt, params});
    if (submit_error_) return Status(submit_error_code_, *submit_error_);
    if (prompt.empty()) return Status::InvalidArgument("empty prompt");
    if (static_cast<int>(prompt.size()) >= opts_.context_length) {
      return Status::InvalidArgument("prompt of " + std::to_string(prompt.size()) +
                           " tokens does not fit the context of " +
                           std::to_string(opts_.context_length));
    }
    auto stream = std::make_shared<engine::RequestStream>("fake-" + std::to_string(++next_id_));
    ++active_;
    threads_.emplace_back([this, stream, prompt = std::move(prompt), params] {
      generate(*stream, prompt, params);
      --active_;
    });
    return stream;
  }

  const tokenizer::Tokenizer& tokenizer() const override { return tok_; }
  const std::string& model_name() const override { return opts_.model_name; }
  int context_length() const override { return opts_.context_length; }
  engine::EngineStats stats() const override {
    engine::EngineStats s;
    s.kv_blocks_total = 64;
    s.requests_running = active_.load();
    s.kv_blocks_used = 2 * s.requests_running;
    s.kv_blocks_free = s.kv_blocks_total - s.kv_blocks_used;
    s.requests_waiting = 0;
    return s;
  }
  void shutdown() override {
    shutdown_.store(true);
    std::vector<std::thread> threads;
    {
      std::lock_guard<std::mutex> lock(mu_);
      threads.swap(threads_);
    }
    for (auto& t : threads) t.join();
  }

  std::string not_ready_reason() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return not_ready_;
  }

  // ---- test controls and observations ----
  const FakeTokenizer& fake_tokenizer() const { return tok_; }
  /// not_ready_reason() from now on ("" = ready).
  void set_not_ready(std::string reason) {
    std::lock_guard<std::mutex> lock(mu_);
    not_ready_ = std::move(reason);
  }
  /// submit() fails with this message and code from now on (nullopt: accept again).
  void set_submit_error(std::optional<std::string> msg, StatusCode code = StatusCode::InvalidArgument) {
    std::lock_guard<std::mutex> lock(mu_);
    submit_error_ = std::move(msg);
    submit_error_code_ = code;
  }
  /// Requests fail (FinishReason::Error) after this many tokens (-1: never).
  void set_fail_after(int tokens) { fail_after_.store(tokens); }
  void set_token_delay(std::chrono::milliseconds d) { token_delay_ms_.store(static_cast<int>(d.count())); }
  /// Reported in every delta's cached_tokens.
  void set_cached_tokens(int n) { cached_tokens_.store(n); }

  std::vector<Submission> submissions() const {
    std::lock_guard<std::mutex> lock(mu_);
    return submissions_;
  }
  int aborts() const { return aborts_.load(); }
  int active() const { return active_.load(); }

 private:
  void generate(engine::RequestStream& stream, const std::vector<int32_t>& prompt,
                const engine::SamplingParams& params) {
    std::vector<int32_t> src;
    for (int32_t id : prompt) {
      if (id >= FakeTokenizer::kByteBase) src.push_back(id);
    }
    const int prompt_tokens = static_cast<int>(prompt.size());
    const int room = opts_.context_length - prompt_tokens;
    engine::OutputProcessor output(tok_, params, params.max_tokens >= 0 ? std::min(params.max_tokens, room) : room);
    auto base = [&](engine::FinishReason f) {
      engine::StreamDelta d;
      d.finish = f;
      d.prompt_tokens = prompt_tokens;
      d.completion_tokens = output.num_generated();
      d.cached_tokens = cached_tokens_.load();
      return d;
    };
    while (true) {
      const int delay = std::max<int>(token_delay_ms_.load(), static_cast<int>(opts_.token_delay.count()));
      if (delay > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay));
      if (stream.aborted() || shutdown_.load()) {
        if (stream.aborted()) ++aborts_;
        stream.push(base(engine::FinishReason::Abort));
        return;
      }
      const int produced = output.num_generated();
      if (fail_after_.load() >= 0 && produced >= fail_after_.load()) {
        auto d = base(engine::FinishReason::Error);
        d.error = "fake engine failure";
        stream.push(std::move(d));
        return;
      }
      const size_t idx = static_cast<size_t>(produced);
      if (src.empty() || (idx >= src.size() && !params.ignore_eos)) {  // EOS, not sent as a token
        auto d = base(engine::FinishReason::Stop);
        output.flush(d);
        stream.push(std::move(d));
        return;
      }
      const int32_t tok = src[idx % src.size()];
      std::optional<engine::TokenLogprob> lp;
      if (params.top_logprobs >= 0) {
        lp.emplace();
        lp->token = tok;
        lp->logprob = -0.25f;
        for (int k = 0; k < params.top_logprobs; ++k) {
          lp->top.push_back({k == 0 ? tok : FakeTokenizer::kByteBase + (tok - FakeTokenizer::kByteBase + k) % 256,
                             k == 0 ? -0.25f : -0.5f - static_cast<float>(k)});
        }
      }
      engine::StreamDelta d = base(engine::FinishReason::None);
      d.finish = output.add_token(tok, std::move(lp), d);
      d.completion_tokens = output.num_generated();
      const bool done = d.finish != engine::FinishReason::None;
      stream.push(std::move(d));
      if (done) return;
    }
  }

  FakeEngineOptions opts_;
  FakeTokenizer tok_;
  mutable std::mutex mu_;
  std::vector<Submission> submissions_;
  std::vector<std::thread> threads_;
  std::optional<std::string> submit_error_;
  StatusCode submit_error_code_ = StatusCode::InvalidArgument;
  std::string not_ready_;
  std::atomic<int> fail_after_{-1};
  std::atomic<int> token_delay_ms_{0};
  std::atomic<int> cached_tokens_{0};
  std::atomic<int> aborts_{0};
  std::atomic<int> active_{0};
  std::atomic<bool> shutdown_{false};
  int next_id_ = 0;
};

}  // namespace pdserve::testing
