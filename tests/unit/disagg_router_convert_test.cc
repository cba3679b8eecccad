// proto_convert: engine types ↔ worker-protocol messages.
#include <gtest/gtest.h>

#include "disagg/proto_convert.h"

namespace pdserve::disagg {
namespace {

TEST(ProtoConvert, SamplingParamsRoundTrip) {
  engine::SamplingParams p;
  p.temperature = 0.7f;
  p.top_p = 0.9f;
  p.top_k = 40;
  p.seed = 1234567890123ull;
  p.max_tokens = -1;
  p.stop = {"\n\n", "END"};
  p.top_logprobs = 3;
  p.ignore_eos = true;
  SamplingParams m;
  to_proto(p, &m);
  EXPECT_TRUE(m.has_seed());
  const engine::SamplingParams q = from_proto(m);
  EXPECT_EQ(q.temperature, p.temperature);
  EXPECT_EQ(q.top_p, p.top_p);
  EXPECT_EQ(q.top_k, p.top_k);
  EXPECT_EQ(q.seed, p.seed);
  EXPECT_EQ(q.max_tokens, p.max_tokens);
  EXPECT_EQ(q.stop, p.stop);
  EXPECT_EQ(q.top_logprobs, p.top_logprobs);
  EXPECT_EQ(q.ignore_eos, p.ignore_eos);

  engine::SamplingParams unseeded;  // defaults: no seed, no logprobs
  to_proto(unseeded, &m);
  EXPECT_FALSE(m.has_seed());
  const engine::SamplingParams r = from_proto(m);
  EXPECT_FALSE(r.seed.has_value());
  EXPECT_EQ(r.top_logprobs, -1);
  EXPECT_EQ(r.max_tokens, 16);
  EXPECT_TRUE(r.stop.empty());
}

TEST(ProtoConvert, StreamDeltaRoundTrip) {
  engine::StreamDelta d;
  d.tokens = {5, 6};
  engine::TokenLogprob lp;
  lp.token = 5;
  lp.logprob = -0.5f;
  lp.top = {{5, -0.5f}, {9, -1.25f}};
  d.logprobs = {lp, lp};
  d.text = std::string("h\xc3\xa9\0llo", 6);  // bytes, including a NUL
  d.finish = engine::FinishReason::Length;
  d.prompt_tokens = 11;
  d.completion_tokens = 7;
  d.cached_tokens = 4;
  GenerateResponse m;
  to_proto(d, &m);
  EXPECT_EQ(m.finish_reason(), "length");
  EXPECT_EQ(m.reject_status(), 0);
  const engine::StreamDelta e = from_proto(m);
  EXPECT_EQ(e.tokens, d.tokens);
  ASSERT_EQ(e.logprobs.size(), 2u);
  EXPECT_EQ(e.logprobs[1].token, 5);
  EXPECT_EQ(e.logprobs[1].logprob, -0.5f);
  EXPECT_EQ(e.logprobs[1].top, lp.top);
  EXPECT_EQ(e.text, d.text);
  EXPECT_EQ(e.finish, engine::FinishReason::Length);
  EXPECT_EQ(e.prompt_tokens, 11);
  EXPECT_EQ(e.completion_tokens, 7);
  EXPECT_EQ(e.cached_tokens, 4);
}

TEST(ProtoConvert, FinishReasonNames) {
  using engine::FinishReason;
  for (FinishReason r : {FinishReason::None, FinishReason::Stop, FinishReason::Length, FinishReason::Abort,
                         FinishReason::Error}) {
    EXPECT_EQ(finish_reason_from_name(engine::finish_reason_name(r)), r);
  }
  EXPECT_EQ(finish_reason_from_name("bogus"), FinishReason::Error);

  engine::StreamDelta err;
  err.finish = FinishReason::Error;
  err.error = "boom";
  GenerateResponse m;
  to_proto(err, &m);
  EXPECT_EQ(m.finish_reason(), "error");
  EXPECT_EQ(from_proto(m).error, "boom");
}

}  // namespace
}  // namespace pdserve::disagg
