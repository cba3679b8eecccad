// The Redis tier (--kv-store redis://...) against a real redis-server the test starts on a
// free loopback port: a prompt computed on one `serve` is a prefix hit on another and on
// a restarted one, with output bit-identical to the uncached run; cache salts never
// share; values tampered through redis-cli are rejected and recomputed; Redis killed
// mid-run costs recompute, never a wrong token, and hits resume once it is back.
#include <gtest/gtest.h>

#include <future>
#include <sstream>
#include <thread>
#include <vector>

#include "support/kv_store_util.h"
#include "support/redis_server.h"
#include "support/server_process.h"

namespace pdserve {
namespace {

using testing::complete;
using testing::Completion;
using testing::long_prompt;
using testing::RedisServer;
using testing::ServerProcess;
using testing::tier_metric;

std::vector<std::string> store_flags(const RedisServer& r) { return {"--kv-store", r.url(), "--kv-store-timeout-ms", "500"}; }

bool wait_writes(ServerProcess& srv, double blocks) {
  return testing::wait_until([&] { return tier_metric(srv.port(), "pdserve_kv_store_writes_total", "redis") >= blocks; },
                             std::chrono::seconds(20), std::chrono::milliseconds(20));
}

std::vector<std::string> stored_keys(const RedisServer& r) {
  std::istringstream in(r.cli({"--scan", "--pattern", "pdserve:kv:*"}));
  std::vector<std::string> keys;
  for (std::string k; in >> k;) keys.push_back(k);
  return keys;
}

class KvStoreRedis : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(redis_.ready()) << redis_.error(); }
  RedisServer redis_;
};

TEST_F(KvStoreRedis, CrossInstanceHitAndWarmRestartAreBitIdentical) {
  ServerProcess a(store_flags(redis_));
  ASSERT_TRUE(a.ready()) << a.error();
  ServerProcess b(store_flags(redis_));
  ASSERT_TRUE(b.ready()) << b.error();
  const Completion cold = complete(a.port(), long_prompt(0));
  ASSERT_EQ(cold.status, 200) << cold.body;
  ASSERT_GE(cold.prompt_tokens, 160);
  EXPECT_EQ(cold.cached_tokens, 0);
  ASSERT_TRUE(wait_writes(a, cold.prompt_tokens / 16)) << a.log();
  EXPECT_EQ(static_cast<int>(stored_keys(redis_).size()), cold.prompt_tokens / 16);

  const Completion on_b = complete(b.port(), long_prompt(0));  // computed on A, a hit on B
  ASSERT_EQ(on_b.status, 200) << on_b.body;
  EXPECT_GE(on_b.cached_tokens, cold.prompt_tokens * 9 / 10);
  EXPECT_TRUE(on_b.same_output(cold)) << on_b.text << "\nvs\n" << cold.text;
  EXPECT_GE(tier_metric(b.port(), "pdserve_kv_store_hits_total", "redis"), cold.prompt_tokens / 16 - 1);
  EXPECT_GT(testing::scrape(b.port())["pdserve_kv_store_bytes_total{tier=\"redis\",direction=\"read\"}"], 0);

  // Warm restart: a new process on the same Redis.
  a.stop();
  ServerProcess a2(store_flags(redis_));
  ASSERT_TRUE(a2.ready()) << a2.error();
  const Completion warm = complete(a2.port(), long_prompt(0));
  EXPECT_GE(warm.cached_tokens, cold.prompt_tokens * 9 / 10);
  EXPECT_TRUE(warm.same_output(cold));
}

TEST_F(KvStoreRedis, DifferentSaltsNeverShare) {
  ServerProcess a(store_flags(redis_));
  ASSERT_TRUE(a.ready()) << a.error();
  ServerProcess b(store_flags(redis_));
  ASSERT_TRUE(b.ready()) << b.error();
  const Completion t1 = complete(a.port(), long_prompt(2), "tenant-1");
  ASSERT_EQ(t1.status, 200) << t1.body;
  ASSERT_TRUE(wait_writes(a, t1.prompt_tokens / 16));
  const Completion other = complete(b.port(), long_prompt(2), "tenant-2");
  EXPECT_EQ(other.cached_tokens, 0);
  const Completion unsalted = complete(b.port(), long_prompt(2));
  EXPECT_EQ(unsalted.cached_tokens, 0);
  EXPECT_EQ(tier_metric(b.port(), "pdserve_kv_store_hits_total", "redis"), 0);
  const Completion same = complete(b.port(), long_prompt(2), "tenant-1");  // the salt A used
  EXPECT_GE(same.cached_tokens, t1.prompt_tokens * 9 / 10);
  EXPECT_TRUE(same.same_output(t1));
  EXPECT_TRUE(other.same_output(t1));
  EXPECT_TRUE(unsalted.same_output(t1));
}

TEST_F(KvStoreRedis, TamperedValuesAreRejectedAndRecomputed) {
  ServerProcess a(store_flags(redis_));
  ASSERT_TRUE(a.ready()) << a.error();
  ServerProcess b(store_flags(redis_));
  ASSERT_TRUE(b.ready()) << b.error();
  // Value layout (kv/block_key.h): magic 4, version 4, key 32, count 4, ids from byte 44.
  struct Case {
    const char* what;
    bool in_ids;
  };
  int variant = 3;
  for (const Case& c : {Case{"token ids", true}, Case{"K/V bytes", false}}) {
    SCOPED_TRACE(c.what);
    redis_.cli({"FLUSHALL"});
    const double w0 = tier_metric(a.port(), "pdserve_kv_store_writes_total", "redis");
    const Completion cold = complete(a.port(), long_prompt(variant));
    ASSERT_EQ(cold.status, 200) << cold.body;
    ASSERT_TRUE(wait_writes(a, w0 + cold.prompt_tokens / 16));
    ASSERT_TRUE(testing::wait_until([&] { return static_cast<int>(stored_keys(redis_).size()) == cold.prompt_tokens / 16; },
                                    std::chrono::seconds(20)));
    for (const std::string& k : stored_keys(redis_)) {
      const long len = std::stol(redis_.cli({"STRLEN", k}));
      // An id byte, or a byte in the middle of the payload (before the trailing checksum).
      const long at = c.in_ids ? 44 + 4 * 5 + 1 : len - 32 - (len - 100) / 2;
      EXPECT_NE(redis_.cli({"SETRANGE", k, std::to_string(at), "Z"}).find(std::to_string(len)), std::string::npos);
    }
    const double errors0 = tier_metric(b.port(), "pdserve_kv_store_errors_total", "redis");
    const Completion on_b = complete(b.port(), long_prompt(variant));
    ASSERT_EQ(on_b.status, 200) << on_b.body;
    // The first block is rejected: nothing after it is used. (B's own cache may still share
    // the first tokens of the previous variant, inside block 0: less than one block.)
    EXPECT_LT(on_b.cached_tokens, 16);
    EXPECT_TRUE(on_b.same_output(cold)) << on_b.text << "\nvs\n" << cold.text;
    EXPECT_GT(tier_metric(b.port(), "pdserve_kv_store_errors_total", "redis"), errors0);
    EXPECT_EQ(tier_metric(b.port(), "pdserve_kv_store_hits_total", "redis"), 0);
    ++variant;
  }
}

TEST_F(KvStoreRedis, KilledMidRunCostsRecomputeAndHitsResume) {
  ServerProcess a(store_flags(redis_));
  ASSERT_TRUE(a.ready()) << a.error();
  ServerProcess b(store_flags(redis_));
  ASSERT_TRUE(b.ready()) << b.error();
  ServerProcess ref(std::vector<std::string>{"--no-prefix-cache"});
  ASSERT_TRUE(ref.ready()) << ref.error();
  const Completion p5 = complete(a.port(), long_prompt(5));
  ASSERT_TRUE(wait_writes(a, p5.prompt_tokens / 16));

  redis_.kill();
  // Every request is still answered, and right: recomputed where the store cannot help.
  for (int v : {5, 6}) {
    const Completion got = complete(b.port(), long_prompt(v));
    ASSERT_EQ(got.status, 200) << got.body;
    EXPECT_LT(got.cached_tokens, 16);  // no store block (at most v5's first tokens, from B's own cache)
    EXPECT_TRUE(got.same_output(complete(ref.port(), long_prompt(v)))) << v;
  }
  EXPECT_GT(tier_metric(b.port(), "pdserve_kv_store_errors_total", "redis"), 0);
  EXPECT_EQ(tier_metric(b.port(), "pdserve_kv_store_up", "redis"), 0);
  EXPECT_NE(b.log().find("computing without it"), std::string::npos);

  ASSERT_TRUE(redis_.start()) << redis_.error();  // back, empty
  for (ServerProcess* s : {&a, &b})
    ASSERT_TRUE(testing::wait_until([&] { return tier_metric(s->port(), "pdserve_kv_store_up", "redis") == 1; },
                                    std::chrono::seconds(15)));
  EXPECT_NE(b.log().find("reconnected"), std::string::npos);
  const double writes0 = tier_metric(a.port(), "pdserve_kv_store_writes_total", "redis");
  const Completion p7 = complete(a.port(), long_prompt(7));
  ASSERT_TRUE(wait_writes(a, writes0 + p7.prompt_tokens / 16));
  const Completion hit = complete(b.port(), long_prompt(7));
  EXPECT_GE(hit.cached_tokens, p7.prompt_tokens * 9 / 10);
  EXPECT_TRUE(hit.same_output(p7));
}

TEST_F(KvStoreRedis, AFetchWaitsOffTheStepLoopWhileOthersRun) {
  ServerProcess a(store_flags(redis_));
  ASSERT_TRUE(a.ready()) << a.error();
  ServerProcess b(std::vector<std::string>{"--kv-store", redis_.url(), "--kv-store-timeout-ms", "20000"});
  ASSERT_TRUE(b.ready()) << b.error();
  const Completion cold = complete(a.port(), long_prompt(8));
  ASSERT_TRUE(wait_writes(a, cold.prompt_tokens / 16));

  // Redis stalls for 4 s; B's fetch of prompt 8 waits for it, in the loading state. The
  // fetch must come after the stall has begun: Redis then leaves a PING unanswered.
  std::thread stall([&] { redis_.cli({"DEBUG", "SLEEP", "4"}); });
  if (!testing::wait_until([&] { return redis_.unresponsive(); }, std::chrono::seconds(10), std::chrono::milliseconds(1))) {
    stall.join();
    FAIL() << "DEBUG SLEEP did not begin";
  }
  auto slow = std::async(std::launch::async, [&] { return complete(b.port(), long_prompt(8)); });
  EXPECT_TRUE(testing::wait_until([&] { return testing::scrape(b.port())["pdserve_requests_waiting"] == 1; },
                                  std::chrono::seconds(10)));
  // Meanwhile B serves a prompt with nothing to fetch (shorter than a block).
  const Completion other = complete(b.port(), "Once upon a time");
  EXPECT_EQ(other.status, 200) << other.body;
  EXPECT_EQ(slow.wait_for(std::chrono::seconds(0)), std::future_status::timeout);  // still loading
  const Completion got = slow.get();
  stall.join();
  EXPECT_GE(got.cached_tokens, cold.prompt_tokens * 9 / 10);  // the store answered after its stall
  EXPECT_TRUE(got.same_output(cold));
}

TEST_F(KvStoreRedis, AFullRedisCostsRecomputeNotErrors) {
  ServerProcess a(store_flags(redis_));
  ASSERT_TRUE(a.ready()) << a.error();
  ServerProcess b(store_flags(redis_));
  ASSERT_TRUE(b.ready()) << b.error();
  // maxmemory below what Redis already uses, no eviction: every SET answers OOM.
  redis_.cli({"CONFIG", "SET", "maxmemory-policy", "noeviction"});
  redis_.cli({"CONFIG", "SET", "maxmemory", "1"});
  const Completion cold = complete(a.port(), long_prompt(9));
  ASSERT_EQ(cold.status, 200) << cold.body;
  ASSERT_TRUE(testing::wait_until(
      [&] { return tier_metric(a.port(), "pdserve_kv_store_errors_total", "redis") >= cold.prompt_tokens / 16; },
      std::chrono::seconds(20)));
  EXPECT_EQ(tier_metric(a.port(), "pdserve_kv_store_writes_total", "redis"), 0);
  const Completion on_b = complete(b.port(), long_prompt(9));
  EXPECT_EQ(on_b.cached_tokens, 0);
  EXPECT_TRUE(on_b.same_output(cold));
  redis_.cli({"CONFIG", "SET", "maxmemory", "0"});  // room again: the next prompt is shared
  const Completion next = complete(a.port(), long_prompt(10));
  ASSERT_TRUE(wait_writes(a, next.prompt_tokens / 16));
  const Completion next_b = complete(b.port(), long_prompt(10));
  EXPECT_GE(next_b.cached_tokens, next.prompt_tokens * 9 / 10);
  EXPECT_TRUE(next_b.same_output(next));
}

}  // namespace
}  // namespace pdserve
