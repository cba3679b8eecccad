// Token eviction in a PD cluster: the decode worker evicts (--kv-budget), the prefill
// worker sends full prompt blocks; outputs equal a monolithic engine with the same budget.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "support/cluster.h"
#include "support/engine_runner.h"
#include "support/pool_free.h"
#include "support/prometheus.h"
#include "support/reference.h"

namespace pdserve {
namespace {

using json = nlohmann::json;
using testing::Cluster;
using testing::ClusterOptions;
using testing::Role;

TEST(DisaggKvBudget, DecodeWorkerEvictsAndMatchesMonolithic) {
  const auto cases = testing::load_reference("../shared/reference/stories260K.json");
  for (const char* policy : {"streaming", "h2o"}) {
    engine::EngineConfig mono;
    mono.kv_budget = 16;
    mono.kv_evict.policy = std::string(policy) == "h2o" ? kv::TokenEvictionPolicy::kH2o : kv::TokenEvictionPolicy::kStreaming;
    mono.kv_evict.recent = 4;
    auto e = testing::make_engine(mono);
    ClusterOptions o;
    o.decode_args = {"--remote-prefill-threshold", "0", "--kv-budget", "16", "--kv-evict", policy, "--kv-recent", "4"};
    Cluster c(o);
    ASSERT_TRUE(c.ready()) << c.error();
    for (const auto& r : cases) {
      engine::SamplingParams p;
      p.temperature = 0.f;
      p.max_tokens = 50;
      p.ignore_eos = true;
      const testing::Completion want = testing::drain(*testing::submit(*e, r.prompt_tokens, p));
      auto cli = c.router_client();
      json body = {{"prompt", r.prompt}, {"max_tokens", 50}, {"temperature", 0}, {"ignore_eos", true}};
      auto res = cli.Post("/v1/completions", body.dump(), "application/json");
      ASSERT_TRUE(res) << policy;
      ASSERT_EQ(res->status, 200) << res->body << "\n" << c.logs();
      EXPECT_EQ(json::parse(res->body)["choices"][0]["text"], want.text) << policy << ", prompt '" << r.prompt << "'";
    }
    const auto m = c.metrics(Role::Decode, 0);
    ASSERT_TRUE(m);
    // streaming prompts come from the prefill worker; h2o ones are prefilled locally.
    const double remote = testing::sum_samples(*m, "pdserve_remote_prefill_total", "", "");
    EXPECT_EQ(remote, std::string(policy) == "streaming" ? static_cast<double>(cases.size()) : 0.0) << policy;
    EXPECT_TRUE(testing::wait_pool_free(c.node(Role::Decode, 0).http_port())) << c.logs();
  }
}

}  // namespace
}  // namespace pdserve
