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

/// Output rule: the prompt's non-control tokens in order, then EOS (finish "stop"), unless
/// ignore_eos (then the prompt cycles). max_tokens and the context end give "length";
/// stop strings give "stop" with the stop text removed. Logprobs: the token at -0.25 and
/// alternatives token+1, token+2, ... at -1.5, -2.5, ...
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
  /// Waits until `pred()` holds or `timeout` passes; returns pred().
  template <typename Pred>
  static bool wait_until(Pred pred, std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!pred()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
  }

 private:
  static size_t incomplete_utf8_tail(const std::string& s) {
    // Length of a trailing, not yet complete UTF-8 sequence (0 when s ends complete).
    for (size_t k = 1; k <= 3 && k <= s.size(); ++k) {
      const auto c = static_cast<unsigned char>(s[s.size() - k]);
      if ((c & 0xC0) == 0x80) continue;  // continuation byte: look further back
      size_t need = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
      return need > k ? k : 0;
    }
    return 0;
  }

  void generate(engine::RequestStream& stream, const std::vector<int32_t>& prompt,
                const engine::SamplingParams& params) {
    std::vector<int32_t> src;
    for (int32_t id : prompt) {
      if (id >= FakeTokenizer::kByteBase) src.push_back(id);
    }
    const int prompt_tokens = static_cast<int>(prompt.size());
    int produced = 0;
    std::string all;      // every generated byte
    size_t emitted = 0;   // bytes of `all` already sent
    auto base = [&](engine::FinishReason f) {
      engine::StreamDelta d;
      d.finish = f;
      d.prompt_tokens = prompt_tokens;
      d.completion_tokens = produced;
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
      if (fail_after_.load() >= 0 && produced >= fail_after_.load()) {
        auto d = base(engine::FinishReason::Error);
        d.error = "fake engine failure";
        stream.push(std::move(d));
        return;
      }
      const size_t idx = static_cast<size_t>(produced);
      if (src.empty() || (idx >= src.size() && !params.ignore_eos)) {  // EOS
        auto d = base(engine::FinishReason::Stop);
        d.text = all.substr(emitted);
        stream.push(std::move(d));
        return;
      }
      const int32_t tok = src[idx % src.size()];
      ++produced;
      all += tok_.token_to_piece(tok);
      engine::StreamDelta d = base(engine::FinishReason::None);
      d.tokens = {tok};
      if (params.top_logprobs >= 0) {
        engine::TokenLogprob lp;
        lp.token = tok;
        lp.logprob = -0.25f;
        for (int k = 0; k < params.top_logprobs; ++k) {
          lp.top.push_back({k == 0 ? tok : FakeTokenizer::kByteBase + (tok - FakeTokenizer::kByteBase + k) % 256,
                            k == 0 ? -0.25f : -0.5f - static_cast<float>(k)});
        }
        d.logprobs.push_back(std::move(lp));
      }
      // Stop strings: cut at the earliest match; hold back a possible partial match.
      size_t stop_at = std::string::npos, hold = 0;
      for (const auto& s : params.stop) {
        if (s.empty()) continue;
        const size_t pos = all.find(s);
        if (pos != std::string::npos) stop_at = std::min(stop_at, pos);
        for (size_t k = std::min(s.size() - 1, all.size()); k > 0; --k) {
          if (all.compare(all.size() - k, k, s, 0, k) == 0) {
            hold = std::max(hold, k);
            break;
          }
        }
      }
      if (stop_at != std::string::npos) {
        d.text = stop_at > emitted ? all.substr(emitted, stop_at - emitted) : "";
        d.finish = engine::FinishReason::Stop;
        stream.push(std::move(d));
        return;
      }
      const bool length = (params.max_tokens >= 0 && produced >= params.max_tokens) ||
                          prompt_tokens + produced >= opts_.context_length;
      if (length) {
        d.text = all.substr(emitted);
        d.finish = engine::FinishReason::Length;
        stream.push(std::move(d));
        return;
      }
      hold = std::max(hold, incomplete_utf8_tail(all));
      const size_t safe = std::max(emitted, all.size() - std::min(hold, all.size()));
      d.text = all.substr(emitted, safe - emitted);
      emitted = safe;
      stream.push(std::move(d));
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
