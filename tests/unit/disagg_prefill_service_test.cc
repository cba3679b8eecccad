// PrefillServiceImpl over a FakeEngine on a real loopback gRPC server: the engine's
// refusal reaches the decode side with its StatusCode — RateLimited (the prefill worker's
// --max-cache-salts) stays distinct from ResourceExhausted though both travel as
// RESOURCE_EXHAUSTED — and the decode side's GrpcKvSource counts it as "rate_limited" and
// reports the transfer failed (the engine then prefills locally).
#include <gtest/gtest.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>

#include "disagg/grpc_status.h"
#include "disagg/prefill_client.h"
#include "disagg/prefill_service.h"
#include "disagg/proto_convert.h"
#include "support/fake_engine.h"
#include "support/wait.h"

namespace pdserve::disagg {
namespace {

using namespace std::chrono_literals;
using testing::FakeEngine;

/// Blocks nobody writes to: the prefill engine refuses before any is sent.
class NoBlocks final : public engine::KvBlockAccess {
 public:
  const engine::KvLayout& layout() const override { return layout_; }  // = the FakeEngine's (empty)
  void write(int, int32_t, const void*, const void*) override { ADD_FAILURE() << "a refused prefill wrote a block"; }

 private:
  engine::KvLayout layout_;
};

/// Runs `task` on `source` (a refused prefill: no block is written) and returns its result.
engine::RemotePrefillResult run_refused(GrpcKvSource& source, const engine::RemotePrefillTask& task) {
  NoBlocks blocks;
  std::promise<engine::RemotePrefillResult> done;
  source.start(task, blocks, [&](engine::RemotePrefillResult r) { done.set_value(std::move(r)); });
  auto result = done.get_future();
  EXPECT_EQ(result.wait_for(10s), std::future_status::ready);
  return result.get();
}

class PrefillServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    service_ = std::make_unique<PrefillServiceImpl>(engine_, FaultConfig{}, nullptr);
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    b.RegisterService(service_.get());
    server_ = b.BuildAndStart();
    ASSERT_TRUE(server_ && port_ > 0);
  }
  void TearDown() override {
    server_->Shutdown(std::chrono::system_clock::now() + 2s);
    engine_.shutdown();
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  /// The status of one Prefill call of a short prompt.
  grpc::Status prefill() {
    auto stub = PrefillService::NewStub(grpc::CreateChannel(address(), grpc::InsecureChannelCredentials()));
    PrefillRequest req;
    req.set_request_id("p1");
    for (int32_t t : engine_.fake_tokenizer().ids("hello")) req.add_prompt_tokens(t);
    *req.mutable_spec() = to_spec(engine::KvLayout{});
    req.set_cache_salt("tenant-b");
    grpc::ClientContext ctx;
    auto reader = stub->Prefill(&ctx, req);
    PrefillResponse res;
    while (reader->Read(&res)) {
    }
    return reader->Finish();
  }

  FakeEngine engine_;
  std::unique_ptr<PrefillServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

TEST_F(PrefillServiceTest, EngineRefusalsKeepTheirCodeOverTheWire) {
  for (StatusCode code : {StatusCode::RateLimited, StatusCode::ResourceExhausted, StatusCode::InvalidArgument}) {
    engine_.set_submit_error("refused: " + std::string(name(code)), code);
    const grpc::Status st = prefill();
    EXPECT_EQ(st.error_code(), to_grpc(code)) << name(code);
    const Status back = from_grpc(st);
    EXPECT_EQ(back.code(), code) << name(code);
    EXPECT_EQ(back.message(), "refused: " + std::string(name(code)));
  }
}

// A prefill worker older than the decode worker (a lower Health sampling_level) samples the
// first token without the fields it does not know: it is not available for such a request,
// so the decode worker prefills it locally.
TEST_F(PrefillServiceTest, AnOlderPrefillWorkerIsNotUsedForNewerSamplingFields) {
  service_->report_sampling_level(1);
  KvSourceConfig cfg;
  cfg.prefill_addrs = {address()};
  GrpcKvSource source(cfg, std::make_shared<engine::TransferMetrics>());
  engine::SamplingParams pen, min_tokens;
  pen.presence_penalty = 1.0f;
  min_tokens.min_tokens = 4;
  ASSERT_TRUE(::pdserve::testing::wait_until([&] { return source.available(pen); }));
  EXPECT_TRUE(source.available(engine::SamplingParams{}));
  EXPECT_FALSE(source.available(min_tokens));
  engine::RemotePrefillTask task;
  task.seq_id = 9;
  task.prompt = engine_.fake_tokenizer().ids("hello");
  task.params = min_tokens;
  task.block_ids = {0};
  EXPECT_FALSE(run_refused(source, task).ok);
  EXPECT_EQ(engine_.submissions().size(), 0u) << "the older worker got the request";
}

TEST_F(PrefillServiceTest, ARateLimitedPrefillIsCountedAsSuchAndReportedFailed) {
  engine_.set_submit_error("Too many cache_salt namespaces in use", StatusCode::RateLimited);
  auto metrics = std::make_shared<engine::TransferMetrics>();
  KvSourceConfig cfg;
  cfg.prefill_addrs = {address()};
  GrpcKvSource source(cfg, metrics);
  ASSERT_TRUE(source.available(engine::SamplingParams{}));
  engine::RemotePrefillTask task;
  task.seq_id = 7;
  task.prompt = engine_.fake_tokenizer().ids("hello");
  task.cache_salt = "tenant-b";
  task.block_ids = {0};
  const engine::RemotePrefillResult r = run_refused(source, task);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("rate_limited"), std::string::npos) << r.error;
  engine::MetricsSnapshot m;
  metrics->fill(m);
  EXPECT_EQ(m.kv_transfer_failures["rate_limited"], 1);
  EXPECT_EQ(m.kv_transfer_failures.count("rejected"), 0u);
}

}  // namespace
}  // namespace pdserve::disagg
