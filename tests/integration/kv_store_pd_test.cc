// The store in a PD cluster: prefill workers write the blocks they compute to Redis, and a
// decode worker looks in the store before asking a prefill worker — so a prompt
// prefilled once is served by a second decode worker from the store, with no new
// remote prefill and the same output.
#include <gtest/gtest.h>

#include "support/cluster.h"
#include "support/kv_store_util.h"
#include "support/redis_server.h"

namespace pdserve {
namespace {

using testing::Cluster;
using testing::ClusterOptions;
using testing::complete;
using testing::Completion;
using testing::long_prompt;
using testing::RedisServer;
using testing::Role;
using testing::tier_metric;

TEST(KvStorePd, ASecondDecodeWorkerGetsThePrefillFromTheStore) {
  RedisServer redis;
  ASSERT_TRUE(redis.ready()) << redis.error();
  ClusterOptions o;
  o.prefill_workers = 1;
  o.decode_workers = 2;
  o.prefill_args = {"--kv-store", redis.url()};
  o.decode_args = {"--kv-store", redis.url()};
  o.router_args = {"--policy", "round_robin"};
  Cluster c(o);
  ASSERT_TRUE(c.ready()) << c.error();

  const Completion first = complete(c.router_port(), long_prompt(0));
  ASSERT_EQ(first.status, 200) << first.body << c.logs();
  ASSERT_GE(first.prompt_tokens, 160);
  const double remote0 = c.metric(Role::Decode, 0, "pdserve_remote_prefill_total");
  const double remote1 = c.metric(Role::Decode, 1, "pdserve_remote_prefill_total");
  ASSERT_EQ(remote0 + remote1, 1) << c.logs();
  const int other = remote0 == 1 ? 1 : 0;  // round_robin sends the next request there
  // The prefill worker wrote the prompt's blocks.
  const int prefill_http = c.node(Role::Prefill, 0).http_port();
  ASSERT_TRUE(testing::wait_until(
      [&] { return tier_metric(prefill_http, "pdserve_kv_store_writes_total", "redis") >= first.prompt_tokens / 16; },
      std::chrono::seconds(20)))
      << c.logs();

  const Completion second = complete(c.router_port(), long_prompt(0));
  ASSERT_EQ(second.status, 200) << second.body;
  EXPECT_TRUE(second.same_output(first)) << second.text << "\nvs\n" << first.text;
  const int other_http = c.node(Role::Decode, other).http_port();
  EXPECT_EQ(c.metric(Role::Decode, other, "pdserve_remote_prefill_total"), 0) << c.logs();
  EXPECT_GE(tier_metric(other_http, "pdserve_kv_store_hits_total", "redis"), first.prompt_tokens / 16 - 1);
  EXPECT_GE(second.cached_tokens, first.prompt_tokens * 9 / 10);
}

}  // namespace
}  // namespace pdserve
