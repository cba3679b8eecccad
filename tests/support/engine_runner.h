// Test helpers that drive an Engine directly (no HTTP): run a request to completion and
// collect its tokens, text, logprobs and finish reason.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

namespace pdserve::testing {

struct Completion {
  std::vector<int32_t> tokens;
  std::vector<engine::TokenLogprob> logprobs;
  std::string text;
  engine::FinishReason finish = engine::FinishReason::None;
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int n_deltas = 0;
};

/// Drains `stream` until its final delta (fails the test after 120 s).
inline Completion drain(engine::RequestStream& stream) {
  Completion c;
  engine::StreamDelta d;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    if (!stream.next(d, std::chrono::milliseconds(100))) continue;
    c.n_deltas++;
    c.tokens.insert(c.tokens.end(), d.tokens.begin(), d.tokens.end());
    c.logprobs.insert(c.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
    c.text += d.text;
    c.prompt_tokens = d.prompt_tokens;
    c.completion_tokens = d.completion_tokens;
    if (d.finish != engine::FinishReason::None) {
      c.finish = d.finish;
      return c;
    }
  }
  ADD_FAILURE() << "request did not finish within 120 s";
  return c;
}

inline std::unique_ptr<engine::Engine> make_engine(engine::EngineConfig cfg) {
  if (cfg.model_path.empty()) cfg.model_path = "../shared/models/stories260K.gguf";
  auto e = engine::Engine::create(cfg);
  EXPECT_TRUE(e.ok()) << e.error();
  return e.ok() ? std::move(e.value()) : nullptr;
}

inline std::shared_ptr<engine::RequestStream> submit(engine::Engine& e, const std::vector<int32_t>& prompt,
                                                      const engine::SamplingParams& p) {
  auto s = e.submit(prompt, p);
  EXPECT_TRUE(s.ok()) << s.error();
  return s.ok() ? s.value() : nullptr;
}

}  // namespace pdserve::testing
