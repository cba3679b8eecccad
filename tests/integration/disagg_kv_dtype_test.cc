// KV transfer in the stored dtype (synth-llama-small-q8_0: 4 layers, 2 KV heads, head_dim
// 32, 16-token blocks): for f16, q8_0 and q4_0 caches a remotely prefilled request gives the
// same text as the decode worker computing it locally, and each block crosses the wire in
// its stored size — K+V of 4 layers x 16 tokens x 2 heads x (64 | 34 | 18) bytes — so
// pdserve_kv_transfer_bytes_total shrinks by the dtype's ratio. A prefill worker with
// another --kv-dtype is refused at the handshake (naming both dtypes) and the decode
// worker recomputes: that run is the local baseline.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "support/cluster.h"
#include "support/pool_free.h"
#include "support/prometheus.h"

namespace pdserve {
namespace {

using json = nlohmann::json;
using testing::Cluster;
using testing::ClusterOptions;
using testing::Role;

const std::vector<std::string> kPrompts = {
    "Hello world, this is a longer prompt that spans a few blocks of the cache",
    "The quick brown fox jumps over the lazy dog.",
    "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20",
};

double metric_sum(Cluster& c, Role r, const std::string& name, const std::string& label = "",
                  const std::string& value = "") {
  const auto m = c.metrics(r, 0);
  return m ? testing::sum_samples(*m, name, label, value) : -1;
}

struct PdRun {
  std::vector<std::string> texts;
  int blocks = 0;  // prompt blocks of all requests (16 tokens each)
};

PdRun run(Cluster& c) {
  PdRun r;
  for (const auto& p : kPrompts) {
    auto cli = c.router_client();
    auto res = cli.Post("/v1/completions", json{{"prompt", p}, {"max_tokens", 8}, {"temperature", 0}}.dump(),
                        "application/json");
    EXPECT_TRUE(res && res->status == 200) << (res ? res->body : "no response") << c.logs();
    if (!res || res->status != 200) continue;
    const json j = json::parse(res->body);
    r.texts.push_back(j["choices"][0]["text"]);
    r.blocks += (j["usage"]["prompt_tokens"].get<int>() + 15) / 16;
  }
  return r;
}

ClusterOptions options(const std::string& prefill_dtype, const std::string& decode_dtype) {
  ClusterOptions o;
  o.model = "../shared/models/synth-llama-small-q8_0.gguf";
  o.prefill_args = {"--kv-dtype", prefill_dtype};
  // No decode-side prefix cache: every prompt block crosses the wire.
  o.decode_args = {"--kv-dtype", decode_dtype, "--remote-prefill-threshold", "0", "--kv-transfer-timeout", "5",
                   "--no-prefix-cache"};
  return o;
}

TEST(DisaggKvDtype, BlocksCrossInTheStoredDtypeAndMatchLocalPrefill) {
  for (auto [dtype, other, row] : {std::tuple{"f16", "q8_0", 64}, {"q8_0", "f16", 34}, {"q4_0", "q8_0", 18}}) {
    PdRun remote, local;
    {
      Cluster c(options(dtype, dtype));
      ASSERT_TRUE(c.ready()) << c.error();
      remote = run(c);
      EXPECT_EQ(metric_sum(c, Role::Decode, "pdserve_remote_prefill_total"), kPrompts.size()) << dtype;
      EXPECT_EQ(metric_sum(c, Role::Decode, "pdserve_kv_recompute_fallback_total"), 0) << dtype;
      const double per_block = 2.0 * 4 * 16 * 2 * row;
      EXPECT_EQ(metric_sum(c, Role::Decode, "pdserve_kv_transfer_bytes_total", "codec", "none"), remote.blocks * per_block)
          << dtype;
      EXPECT_TRUE(testing::wait_pool_free(c.node(Role::Decode).http_port()));
    }
    {
      Cluster c(options(other, dtype));  // refused at the handshake: local prefill
      ASSERT_TRUE(c.ready()) << c.error();
      local = run(c);
      EXPECT_GT(metric_sum(c, Role::Decode, "pdserve_kv_transfer_failures_total", "reason", "handshake"), 0) << dtype;
      EXPECT_EQ(metric_sum(c, Role::Decode, "pdserve_kv_transfer_bytes_total"), 0) << dtype;
      const std::string why = std::string("KV dtype ") + dtype + " (decode) vs " + other + " (prefill)";
      EXPECT_NE(c.node(Role::Decode).log().find(why), std::string::npos) << c.logs();
      // /health and /metrics report the pool in bytes of the dtype.
      auto h = c.client(Role::Decode).Get("/health");
      ASSERT_TRUE(h && h->status == 200);
      const json hj = json::parse(h->body);
      EXPECT_EQ(hj["kv_dtype"], dtype);
      EXPECT_EQ(hj["kv_bytes_total"].get<int64_t>(), hj["kv_blocks_total"].get<int64_t>() * 2 * 4 * 16 * 2 * row);
      EXPECT_EQ(metric_sum(c, Role::Decode, "pdserve_kv_bytes_total"), hj["kv_bytes_total"].get<double>());
    }
    EXPECT_EQ(remote.texts, local.texts) << dtype;
    EXPECT_EQ(remote.texts.size(), kPrompts.size());
  }
}

}  // namespace
}  // namespace pdserve
