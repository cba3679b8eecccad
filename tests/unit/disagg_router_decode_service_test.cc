// DecodeServiceImpl over a FakeEngine on a real loopback gRPC server: the stream of a
// Generate call (accepted message, deltas, finish), refusals (with their code, as the
// router reads them), cancellation (the engine request is aborted), Health and Load.
#include <gtest/gtest.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "disagg/decode_service.h"
#include "disagg/proto_convert.h"
#include "disagg/router_choice.h"
#include "support/fake_engine.h"
#include "support/wait.h"

namespace pdserve::disagg {
namespace {

using namespace std::chrono_literals;
using testing::FakeEngine;

class DecodeServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    service_ = std::make_unique<DecodeServiceImpl>(engine_);
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    b.RegisterService(service_.get());
    server_ = b.BuildAndStart();
    ASSERT_TRUE(server_ && port_ > 0);
    stub_ = DecodeService::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(port_), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    server_->Shutdown(std::chrono::system_clock::now() + 2s);
    engine_.shutdown();
  }

  GenerateRequest request(const std::string& text, int max_tokens = 16) {
    GenerateRequest r;
    r.set_request_id("t1");
    for (int32_t t : engine_.fake_tokenizer().ids(text)) r.add_prompt_tokens(t);
    engine::SamplingParams p;
    p.temperature = 0;
    p.max_tokens = max_tokens;
    to_proto(p, r.mutable_params());
    return r;
  }

  FakeEngine engine_;
  std::unique_ptr<DecodeServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<DecodeService::Stub> stub_;
  int port_ = 0;
};

TEST_F(DecodeServiceTest, StreamsAcceptedThenDeltasThenFinish) {
  grpc::ClientContext ctx;
  auto reader = stub_->Generate(&ctx, request("hello"));
  std::vector<GenerateResponse> msgs;
  GenerateResponse m;
  while (reader->Read(&m)) msgs.push_back(m);
  ASSERT_TRUE(reader->Finish().ok());
  ASSERT_GE(msgs.size(), 2u);
  // The "accepted" message: no tokens, no finish, the prompt length.
  EXPECT_EQ(msgs[0].tokens_size(), 0);
  EXPECT_EQ(msgs[0].finish_reason(), "");
  EXPECT_EQ(msgs[0].reject_status(), 0);
  EXPECT_EQ(msgs[0].prompt_tokens(), 5);
  std::string text;
  std::vector<int32_t> tokens;
  for (size_t i = 1; i < msgs.size(); ++i) {
    text += msgs[i].text();
    tokens.insert(tokens.end(), msgs[i].tokens().begin(), msgs[i].tokens().end());
    EXPECT_EQ(msgs[i].finish_reason().empty(), i + 1 < msgs.size());
  }
  EXPECT_EQ(text, "hello");
  EXPECT_EQ(tokens, engine_.fake_tokenizer().ids("hello"));
  EXPECT_EQ(msgs.back().finish_reason(), "stop");
  EXPECT_EQ(msgs.back().completion_tokens(), 5);
  EXPECT_EQ(msgs.back().prompt_tokens(), 5);
  // The engine got the request as sent.
  auto subs = engine_.submissions();
  ASSERT_EQ(subs.size(), 1u);
  EXPECT_EQ(subs[0].params.temperature, 0.f);
  EXPECT_EQ(subs[0].params.max_tokens, 16);
}

TEST_F(DecodeServiceTest, MaxTokensGivesLength) {
  grpc::ClientContext ctx;
  auto reader = stub_->Generate(&ctx, request("hello", 2));
  GenerateResponse m, last;
  int tokens = 0;
  while (reader->Read(&m)) {
    tokens += m.tokens_size();
    last = m;
  }
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(tokens, 2);
  EXPECT_EQ(last.finish_reason(), "length");
  EXPECT_EQ(last.completion_tokens(), 2);
}

TEST_F(DecodeServiceTest, RefusalIsOneMessageWithStatus400) {
  engine_.set_submit_error("the prompt is too long for the KV pool");
  grpc::ClientContext ctx;
  auto reader = stub_->Generate(&ctx, request("hi"));
  std::vector<GenerateResponse> msgs;
  GenerateResponse m;
  while (reader->Read(&m)) msgs.push_back(m);
  EXPECT_TRUE(reader->Finish().ok());
  ASSERT_EQ(msgs.size(), 1u);
  EXPECT_EQ(msgs[0].reject_status(), 400);
  EXPECT_EQ(msgs[0].error(), "the prompt is too long for the KV pool");
  EXPECT_EQ(msgs[0].finish_reason(), "error");
}

TEST_F(DecodeServiceTest, RefusalCarriesItsCodeAndHttpStatus) {
  // RateLimited (--max-cache-salts) is a 429 for the router, not a bad request.
  for (auto [code, http] : {std::pair{StatusCode::RateLimited, 429}, std::pair{StatusCode::InvalidArgument, 400},
                            std::pair{StatusCode::ResourceExhausted, 400}, std::pair{StatusCode::Unavailable, 503}}) {
    engine_.set_submit_error("refused", code);
    grpc::ClientContext ctx;
    auto reader = stub_->Generate(&ctx, request("hi"));
    GenerateResponse m;
    ASSERT_TRUE(reader->Read(&m)) << name(code);
    EXPECT_EQ(m.reject_status(), http) << name(code);
    EXPECT_EQ(m.reject_code(), name(code));
    EXPECT_EQ(m.error(), "refused");
    const Status back = refusal_status(m);
    EXPECT_EQ(back.code(), code);
    EXPECT_EQ(back.message(), "refused");
    while (reader->Read(&m)) {
    }
    EXPECT_TRUE(reader->Finish().ok());
  }
  // A refusal without a code (an older worker) is a bad request.
  GenerateResponse old;
  old.set_reject_status(400);
  old.set_error("bad");
  EXPECT_EQ(refusal_status(old).code(), StatusCode::InvalidArgument);
}

TEST_F(DecodeServiceTest, CancelAbortsTheEngineRequest) {
  engine_.set_token_delay(20ms);
  GenerateRequest r = request("abcdefghijklmnopqrstuvwxyz", 1000);
  r.mutable_params()->set_ignore_eos(true);
  grpc::ClientContext ctx;
  auto reader = stub_->Generate(&ctx, r);
  GenerateResponse m;
  int tokens = 0;
  while (tokens < 3 && reader->Read(&m)) tokens += m.tokens_size();
  ASSERT_EQ(tokens, 3);
  ctx.TryCancel();
  while (reader->Read(&m)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(testing::wait_until([&] { return engine_.aborts() == 1 && engine_.active() == 0; }));
}

TEST_F(DecodeServiceTest, HealthAndLoad) {
  {
    grpc::ClientContext ctx;
    HealthResponse h;
    ASSERT_TRUE(stub_->Health(&ctx, HealthRequest(), &h).ok());
    EXPECT_TRUE(h.ok());
    EXPECT_EQ(h.role(), "decode");
    EXPECT_EQ(h.model_name(), "fake-model");
    EXPECT_EQ(h.context_length(), 256);
    EXPECT_EQ(h.vocab_fingerprint(), engine_.tokenizer().fingerprint());
    EXPECT_EQ(h.vocab_fingerprint().size(), 16u);
  }
  grpc::ClientContext ctx;
  LoadResponse l;
  ASSERT_TRUE(stub_->Load(&ctx, LoadRequest(), &l).ok());
  EXPECT_EQ(l.kv_blocks_total(), 64);
  EXPECT_EQ(l.requests_running(), 0);
  EXPECT_EQ(l.kv_blocks_free(), 64);
}

// A worker restarted on another model between two of the router's health checks must not
// continue its streams: each call names the model the router expects, and a worker of
// another vocabulary fails it with FAILED_PRECONDITION before the engine sees it.
TEST_F(DecodeServiceTest, ACallForAnotherModelFailsBeforeTheEngine) {
  GenerateRequest r = request("hello");
  r.set_vocab_fingerprint("0123456789abcdef");
  {
    grpc::ClientContext ctx;
    auto reader = stub_->Generate(&ctx, r);
    GenerateResponse m;
    EXPECT_FALSE(reader->Read(&m)) << "no message, not even a refusal";
    const grpc::Status st = reader->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_NE(st.error_message().find("serves another vocabulary"), std::string::npos) << st.error_message();
  }
  r.set_vocab_fingerprint(engine_.tokenizer().fingerprint());
  grpc::ClientContext ctx;
  auto reader = stub_->Generate(&ctx, r);
  std::string text;
  GenerateResponse m;
  while (reader->Read(&m)) text += m.text();
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(text, "hello") << "the model it serves is served";
}

}  // namespace
}  // namespace pdserve::disagg
