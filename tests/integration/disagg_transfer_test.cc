// KV transfer between real prefill and decode workers on loopback: injected faults end
// in the correct output (retry on another prefill worker, or local recompute) and leave
// no KV block in use; a decode-side prefix-cache hit sends only the missing blocks;
// zstd-compressed transfers give the same output.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "support/cluster.h"
#include "support/pool_free.h"
#include "support/prometheus.h"
#include "support/reference.h"
#include "support/wait.h"

namespace pdserve {
namespace {

using json = nlohmann::json;
using testing::Cluster;
using testing::ClusterOptions;
using testing::Role;

const std::vector<testing::ReferenceCase>& reference() {
  static const auto r = testing::load_reference("../shared/reference/stories260K.json");
  return r;
}

/// Sum of every sample of `name` (with label `label` = `value`, when given) in a node's
/// /metrics; -1 when the node does not answer.
double metric_sum(Cluster& c, Role r, int i, const std::string& name, const std::string& label = "",
                  const std::string& value = "") {
  const auto m = c.metrics(r, i);
  return m ? testing::sum_samples(*m, name, label, value) : -1;
}

/// Greedy completion of every reference case through the router; checks exact text.
void expect_reference_outputs(Cluster& c, const std::string& what) {
  for (const auto& r : reference()) {
    auto cli = c.router_client();
    json body = {{"prompt", r.prompt}, {"max_tokens", r.tokens.size()}, {"temperature", 0}};
    auto res = cli.Post("/v1/completions", body.dump(), "application/json");
    ASSERT_TRUE(res) << what;
    ASSERT_EQ(res->status, 200) << what << ": " << res->body << "\n" << c.logs();
    EXPECT_EQ(json::parse(res->body)["choices"][0]["text"], r.text) << what << ", prompt '" << r.prompt << "'";
  }
}

/// Waits until every running worker's KV pool is free (testing::wait_pool_free).
bool wait_no_blocks_used(Cluster& c) {
  for (Role r : {Role::Prefill, Role::Decode})
    for (int k = 0; k < c.count(r); ++k)
      if (c.running(r, k) && !testing::wait_pool_free(c.node(r, k).http_port())) return false;
  return true;
}

ClusterOptions options(std::vector<std::string> prefill_args, int prefill_workers = 1) {
  ClusterOptions o;
  o.prefill_workers = prefill_workers;
  o.prefill_args = std::move(prefill_args);
  o.decode_args = {"--remote-prefill-threshold", "0", "--kv-transfer-timeout", "1"};
  return o;
}

TEST(DisaggTransfer, RemotePrefillMatchesTheReferenceWithAndWithoutZstd) {
  for (const char* codec : {"none", "zstd:3"}) {
    ClusterOptions o = options({});
    o.decode_args.insert(o.decode_args.end(), {"--kv-compression", codec});
    Cluster c(o);
    ASSERT_TRUE(c.ready()) << c.error();
    expect_reference_outputs(c, codec);
    EXPECT_EQ(metric_sum(c, Role::Decode, 0, "pdserve_remote_prefill_total"), reference().size());
    EXPECT_EQ(metric_sum(c, Role::Decode, 0, "pdserve_kv_recompute_fallback_total"), 0);
    const std::string codec_label = std::string(codec) == "none" ? "none" : "zstd";
    EXPECT_GT(metric_sum(c, Role::Decode, 0, "pdserve_kv_transfer_bytes_total", "codec", codec_label), 0);
    EXPECT_EQ(metric_sum(c, Role::Decode, 0, "pdserve_kv_transfer_bytes_total", "codec", codec_label),
              metric_sum(c, Role::Prefill, 0, "pdserve_kv_transfer_bytes_total", "codec", codec_label));
    EXPECT_TRUE(wait_no_blocks_used(c)) << c.logs();
  }
}

TEST(DisaggTransfer, EachInjectedFaultEndsInTheCorrectOutput) {
  struct Case {
    const char* name;
    std::vector<std::string> prefill_args;
    const char* reason;  // expected failure reason label
  };
  const std::vector<Case> cases = {
      {"corrupt block", {"--fault-corrupt-block", "2"}, "checksum"},
      {"dropped stream", {"--fault-drop-after", "3"}, "stream"},
      {"slow blocks past the transfer timeout", {"--fault-delay-ms", "300"}, "timeout"},
  };
  for (const Case& fc : cases) {
    Cluster c(options(fc.prefill_args));
    ASSERT_TRUE(c.ready()) << c.error();
    expect_reference_outputs(c, fc.name);
    EXPECT_GT(metric_sum(c, Role::Decode, 0, "pdserve_kv_transfer_failures_total", "reason", fc.reason), 0)
        << fc.name;
    EXPECT_EQ(metric_sum(c, Role::Decode, 0, "pdserve_kv_recompute_fallback_total"), reference().size()) << fc.name;
    EXPECT_TRUE(wait_no_blocks_used(c)) << fc.name << "\n" << c.logs();
  }
}

TEST(DisaggTransfer, AFaultyPrefillWorkerIsRetriedOnAHealthyOne) {
  // Two prefill workers, one of which corrupts its first block message; a decode worker
  // that knows both. Requests that meet the faulty one first are retried on the healthy
  // one: no recompute is needed.
  Cluster healthy(options({}));
  Cluster faulty(options({"--fault-corrupt-block", "0"}));
  ASSERT_TRUE(healthy.ready()) << healthy.error();
  ASSERT_TRUE(faulty.ready()) << faulty.error();
  ClusterOptions o;
  o.prefill_workers = 0;  // the decode worker is pointed at the two clusters' prefill workers
  o.decode_args = {"--remote-prefill-threshold", "0", "--prefill",
                   faulty.node(Role::Prefill, 0).address() + "," + healthy.node(Role::Prefill, 0).address()};
  Cluster c(o);
  ASSERT_TRUE(c.ready()) << c.error();
  expect_reference_outputs(c, "retry");
  EXPECT_GT(metric_sum(c, Role::Decode, 0, "pdserve_kv_transfer_failures_total", "reason", "checksum"), 0);
  EXPECT_EQ(metric_sum(c, Role::Decode, 0, "pdserve_kv_recompute_fallback_total"), 0);
  EXPECT_EQ(metric_sum(c, Role::Decode, 0, "pdserve_remote_prefill_total"), reference().size());
  EXPECT_TRUE(wait_no_blocks_used(c));
  EXPECT_TRUE(wait_no_blocks_used(faulty));
  EXPECT_TRUE(wait_no_blocks_used(healthy));
}

TEST(DisaggTransfer, PrefillWorkerDeathFallsBackToLocalPrefill) {
  Cluster c(options({"--fault-exit-after-blocks", "2"}));
  ASSERT_TRUE(c.ready()) << c.error();
  expect_reference_outputs(c, "prefill worker exits mid-stream");
  EXPECT_FALSE(c.running(Role::Prefill, 0));
  EXPECT_GE(metric_sum(c, Role::Decode, 0, "pdserve_kv_recompute_fallback_total"), 1);
  // With no healthy prefill worker left, later requests are prefilled locally — once the
  // decode worker has marked it down: its health check (every 500 ms) logs it, or a
  // request already found it unreachable (a second recompute fallback).
  ASSERT_TRUE(testing::wait_until([&] {
    return c.node(Role::Decode).log().find("is unreachable") != std::string::npos ||
           metric_sum(c, Role::Decode, 0, "pdserve_kv_recompute_fallback_total") >= 2;
  })) << c.logs();
  const double local_before = metric_sum(c, Role::Decode, 0, "pdserve_local_prefill_total");
  expect_reference_outputs(c, "after the prefill worker died");
  EXPECT_GT(metric_sum(c, Role::Decode, 0, "pdserve_local_prefill_total"), local_before);
  EXPECT_TRUE(wait_no_blocks_used(c)) << c.logs();
}

TEST(DisaggTransfer, DecodePrefixCacheHitSendsOnlyTheMissingBlocks) {
  Cluster c(options({}));
  ASSERT_TRUE(c.ready()) << c.error();
  // stories260K, 16-token blocks, f16 KV: one block of one layer is 16·4·8·2 = 1024 bytes
  // of K and as many of V; 5 layers ⇒ 10240 bytes per block over the wire (codec none).
  constexpr double kBlockWire = 10240;
  const std::string prompt =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her "
      "friends and her";
  auto cli = c.router_client();
  auto tokens = [&](const std::string& p) {
    json r = json::parse(cli.Post("/v1/completions", json{{"prompt", p}, {"max_tokens", 1}}.dump(), "application/json")->body);
    return r["usage"]["prompt_tokens"].get<int>();
  };
  const int n = tokens(prompt);
  const int total_blocks = (n + 15) / 16;
  const double after_first = metric_sum(c, Role::Decode, 0, "pdserve_kv_transfer_bytes_total");
  EXPECT_EQ(after_first, total_blocks * kBlockWire);
  // The same prompt again: the decode worker has every full block but must compute at
  // least one token, so only the blocks from the last cached one on cross the wire.
  tokens(prompt);
  const int cached_blocks = (n - 1) / 16;
  EXPECT_EQ(metric_sum(c, Role::Decode, 0, "pdserve_kv_transfer_bytes_total") - after_first,
            (total_blocks - cached_blocks) * kBlockWire);
  EXPECT_TRUE(wait_no_blocks_used(c));
}

TEST(DisaggTransfer, AKvLayoutMismatchIsRefusedAtHandshakeAndRecomputed) {
  // The prefill worker uses 8-token blocks, the decode worker 16: the prefill side refuses
  // the stream at once (naming the difference) and the decode worker computes locally.
  Cluster c(options({"--block-size", "8"}));
  ASSERT_TRUE(c.ready()) << c.error();
  expect_reference_outputs(c, "layout mismatch");
  EXPECT_GT(metric_sum(c, Role::Decode, 0, "pdserve_kv_transfer_failures_total", "reason", "handshake"), 0);
  EXPECT_EQ(metric_sum(c, Role::Decode, 0, "pdserve_kv_transfer_bytes_total"), 0);
  EXPECT_NE(c.node(Role::Decode, 0).log().find("block size 16 (decode) vs 8 (prefill)"), std::string::npos) << c.logs();
  EXPECT_TRUE(wait_no_blocks_used(c));
}

TEST(DisaggTransfer, CacheSaltReachesThePrefillWorker) {
  ClusterOptions o = options({});
  o.decode_args.push_back("--no-prefix-cache");  // the decode worker asks for every block
  Cluster c(o);
  ASSERT_TRUE(c.ready()) << c.error();
  const std::string prompt =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her "
      "friends and her";
  auto send = [&](const std::string& salt) {
    auto cli = c.router_client();
    auto res = cli.Post("/v1/completions", json{{"prompt", prompt}, {"max_tokens", 1}, {"cache_salt", salt}}.dump(),
                        "application/json");
    ASSERT_TRUE(res && res->status == 200);
  };
  send("tenant-a");
  send("tenant-b");  // another namespace: no hit on the prefill worker
  EXPECT_EQ(metric_sum(c, Role::Prefill, 0, "pdserve_prefix_cache_hits_total"), 0);
  send("tenant-a");
  EXPECT_GT(metric_sum(c, Role::Prefill, 0, "pdserve_prefix_cache_hits_total"), 0);
}

}  // namespace
}  // namespace pdserve
