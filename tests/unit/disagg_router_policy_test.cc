// Routing policies of the router (no network): round robin, least load, prefix affinity
// (consistent hashing: distribution, stickiness, failover, minimal movement) and the
// length split, plus the HOST:PORT list parser.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "disagg/routing_policy.h"
#include "disagg/worker_client.h"

namespace pdserve::disagg {
namespace {

std::vector<WorkerView> make_workers(int n, int n_long = 0) {
  std::vector<WorkerView> w;
  for (int i = 0; i < n + n_long; ++i) {
    WorkerView v;
    v.address = "10.0.0." + std::to_string(i + 1) + ":7000";
    v.healthy = true;
    v.long_group = i >= n;
    w.push_back(v);
  }
  return w;
}

std::vector<int32_t> random_prompt(std::mt19937& rng, int len) {
  std::uniform_int_distribution<int32_t> d(0, 31999);
  std::vector<int32_t> p(static_cast<size_t>(len));
  for (auto& t : p) t = d(rng);
  return p;
}

void expect_permutation(const std::vector<int>& order, size_t n) {
  ASSERT_EQ(order.size(), n);
  std::set<int> s(order.begin(), order.end());
  EXPECT_EQ(s.size(), n);
  EXPECT_EQ(*s.begin(), 0);
  EXPECT_EQ(*s.rbegin(), static_cast<int>(n) - 1);
}

// (An unknown policy name is refused at the CLI edge: tests/integration/cli_test.cc.)
TEST(RoutingPolicy, FactoryKnowsTheNames) {
  const std::pair<const char*, RoutingPolicyKind> kinds[] = {{"round_robin", RoutingPolicyKind::kRoundRobin},
                                                              {"least_load", RoutingPolicyKind::kLeastLoad},
                                                              {"prefix_affinity", RoutingPolicyKind::kPrefixAffinity},
                                                              {"length", RoutingPolicyKind::kLength}};
  for (const auto& [name, kind] : kinds) {
    PolicyConfig c;
    c.kind = kind;
    auto p = make_routing_policy(c);
    ASSERT_TRUE(p.ok()) << name;
    EXPECT_STREQ(p.value()->name(), name);
    EXPECT_STREQ(disagg::name(kind), name);
  }
  PolicyConfig bad;
  bad.kind = RoutingPolicyKind::kPrefixAffinity;
  bad.virtual_nodes = 0;
  auto p = make_routing_policy(bad);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.code(), StatusCode::InvalidArgument);
  EXPECT_NE(p.error().find("prefix_affinity"), std::string::npos);
}

TEST(RoutingPolicy, RoundRobinCyclesOverHealthyWorkers) {
  RoundRobinPolicy rr;
  auto w = make_workers(3);
  std::vector<int> firsts;
  for (int i = 0; i < 6; ++i) {
    auto order = rr.rank({1, 2, 3}, w);
    expect_permutation(order, 3);
    firsts.push_back(order[0]);
  }
  EXPECT_EQ(firsts, (std::vector<int>{0, 1, 2, 0, 1, 2}));

  w[1].healthy = false;
  std::map<int, int> count;
  for (int i = 0; i < 100; ++i) {
    auto order = rr.rank({1}, w);
    expect_permutation(order, 3);
    EXPECT_EQ(order.back(), 1) << "the unhealthy worker is the last resort";
    ++count[order[0]];
  }
  EXPECT_EQ(count[0], 50);
  EXPECT_EQ(count[2], 50);
}

TEST(RoutingPolicy, RoundRobinWithNoHealthyWorkerStillRanksAll) {
  RoundRobinPolicy rr;
  auto w = make_workers(2);
  for (auto& v : w) v.healthy = false;
  expect_permutation(rr.rank({1}, w), 2);
  EXPECT_TRUE(rr.rank({1}, {}).empty());
}

TEST(RoutingPolicy, LeastLoadPrefersFewestRequestsThenKvUsage) {
  LeastLoadPolicy ll;
  auto w = make_workers(3);
  w[0].load = 5;
  w[1].load = 2;
  w[2].load = 3;
  EXPECT_EQ(ll.rank({1}, w), (std::vector<int>{1, 2, 0}));
  w[2].load = 2;
  w[1].kv_usage = 0.7;
  w[2].kv_usage = 0.2;
  EXPECT_EQ(ll.rank({1}, w)[0], 2);
  w[2].healthy = false;
  auto order = ll.rank({1}, w);
  EXPECT_EQ(order[0], 1);
  EXPECT_EQ(order.back(), 2);
}

TEST(RoutingPolicy, LeastLoadSpreadsTies) {
  LeastLoadPolicy ll;
  auto w = make_workers(4);
  std::map<int, int> count;
  for (int i = 0; i < 400; ++i) ++count[ll.rank({1}, w)[0]];
  for (int i = 0; i < 4; ++i) EXPECT_EQ(count[i], 100) << i;
}

TEST(RoutingPolicy, PrefixAffinityIsStickyForASharedPrefix) {
  PrefixAffinityPolicy pa(/*prefix_blocks=*/2, /*block_size=*/16);
  auto w = make_workers(4);
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    const auto base = random_prompt(rng, 32);
    const int owner = pa.rank(base, w)[0];
    for (int k = 0; k < 5; ++k) {
      auto p = base;
      auto tail = random_prompt(rng, 1 + k * 20);
      p.insert(p.end(), tail.begin(), tail.end());  // same first 2 blocks, any continuation
      EXPECT_EQ(pa.rank(p, w)[0], owner);
      EXPECT_EQ(pa.prefix_key(p), pa.prefix_key(base));
    }
  }
}

TEST(RoutingPolicy, PrefixAffinityKeyUsesFullBlocksOnly) {
  PrefixAffinityPolicy pa(2, 16);
  std::mt19937 rng(3);
  auto p = random_prompt(rng, 40);
  auto q = p;
  q[35] += 1;  // past the 2 key blocks
  EXPECT_EQ(pa.prefix_key(p), pa.prefix_key(q));
  auto r = p;
  r[31] += 1;  // inside the second block
  EXPECT_NE(pa.prefix_key(p), pa.prefix_key(r));
  // 20 tokens: one full block is the key, the partial second one is not.
  std::vector<int32_t> a(p.begin(), p.begin() + 20), b = a;
  b[19] += 1;
  EXPECT_EQ(pa.prefix_key(a), pa.prefix_key(b));
  // Shorter than a block: the whole prompt.
  std::vector<int32_t> c(p.begin(), p.begin() + 5), d = c;
  d[4] += 1;
  EXPECT_NE(pa.prefix_key(c), pa.prefix_key(d));
}

TEST(RoutingPolicy, PrefixAffinitySpreadsDistinctPrefixes) {
  PrefixAffinityPolicy pa(2, 16, 100);
  auto w = make_workers(4);
  std::mt19937 rng(11);
  std::map<int, int> count;
  const int n = 4000;
  for (int i = 0; i < n; ++i) ++count[pa.rank(random_prompt(rng, 40), w)[0]];
  for (int i = 0; i < 4; ++i) {
    EXPECT_GT(count[i], n / 4 * 0.6) << "worker " << i;
    EXPECT_LT(count[i], n / 4 * 1.4) << "worker " << i;
  }
}

TEST(RoutingPolicy, PrefixAffinityFailsOverToTheNextNodeOnTheRing) {
  PrefixAffinityPolicy pa(2, 16);
  auto w = make_workers(4);
  std::mt19937 rng(5);
  for (int trial = 0; trial < 100; ++trial) {
    const auto p = random_prompt(rng, 32);
    const auto healthy_order = pa.rank(p, w);
    expect_permutation(healthy_order, 4);
    auto w2 = w;
    w2[static_cast<size_t>(healthy_order[0])].healthy = false;
    const auto order = pa.rank(p, w2);
    // The ring order is kept; the dead owner moves to the end; the successor takes over.
    EXPECT_EQ(order[0], healthy_order[1]);
    EXPECT_EQ(order.back(), healthy_order[0]);
    // Once the owner is back, its prefixes return to it.
    EXPECT_EQ(pa.rank(p, w)[0], healthy_order[0]);
  }
}

TEST(RoutingPolicy, PrefixAffinityMovesOnlyTheRemovedWorkersKeys) {
  PrefixAffinityPolicy pa(2, 16);
  auto w4 = make_workers(4);
  auto w3 = w4;
  w3.pop_back();  // worker 3 leaves the set (the ring is rebuilt)
  std::mt19937 rng(9);
  int moved = 0;
  for (int i = 0; i < 1000; ++i) {
    const auto p = random_prompt(rng, 32);
    const int before = pa.rank(p, w4)[0];
    const int after = pa.rank(p, w3)[0];
    if (before != 3) {
      EXPECT_EQ(after, before);
    } else {
      ++moved;
    }
  }
  EXPECT_GT(moved, 100);
}

TEST(RoutingPolicy, LengthSplitsByThreshold) {
  LengthPolicy lp(/*threshold=*/100);
  auto w = make_workers(2, /*n_long=*/2);  // 0,1 normal; 2,3 long
  std::vector<int32_t> short_p(100, 5), long_p(101, 5);
  std::map<int, int> count;
  for (int i = 0; i < 20; ++i) {
    const auto s = lp.rank(short_p, w);
    expect_permutation(s, 4);
    EXPECT_LT(s[0], 2);
    EXPECT_LT(s[1], 2);  // the rest of the group before the other group
    const auto l = lp.rank(long_p, w);
    EXPECT_GE(l[0], 2);
    EXPECT_GE(l[1], 2);
    ++count[s[0]];
    ++count[l[0]];
  }
  for (int i = 0; i < 4; ++i) EXPECT_EQ(count[i], 10) << "ties rotate within a group";
}

TEST(RoutingPolicy, LengthUsesTheOtherGroupWhenOneHasNoHealthyWorker) {
  LengthPolicy lp(10);
  auto w = make_workers(1, 1);
  std::vector<int32_t> long_p(50, 5), short_p(5, 5);
  w[1].healthy = false;
  EXPECT_EQ(lp.rank(long_p, w), (std::vector<int>{0, 1}));
  w[1].healthy = true;
  w[0].healthy = false;
  EXPECT_EQ(lp.rank(short_p, w), (std::vector<int>{1, 0}));
  // No long group configured: long prompts go to the normal workers.
  auto normal_only = make_workers(2);
  EXPECT_LT(lp.rank(long_p, normal_only)[0], 2);
}

TEST(RoutingPolicy, LengthPrefersTheLeastLoadedInTheGroup) {
  LengthPolicy lp(10);
  auto w = make_workers(2, 2);
  w[2].load = 4;
  w[3].load = 1;
  w[0].load = 0;
  EXPECT_EQ(lp.rank(std::vector<int32_t>(50, 1), w)[0], 3);
}

TEST(WorkerAddresses, ParsesCommaSeparatedLists) {
  auto r = parse_address_list("127.0.0.1:5000, localhost:6000,,[::1]:7000");
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r.value(), (std::vector<std::string>{"127.0.0.1:5000", "localhost:6000", "[::1]:7000"}));
  EXPECT_TRUE(parse_address_list("").ok());
  EXPECT_FALSE(parse_address_list("localhost").ok());
  EXPECT_FALSE(parse_address_list("localhost:").ok());
  EXPECT_FALSE(parse_address_list("host:http").ok());
  EXPECT_FALSE(parse_address_list("host:0").ok());
  EXPECT_FALSE(parse_address_list("host:65536").ok());
  EXPECT_FALSE(parse_address_list("host:99999999999999999999").ok()) << "no overflow";
  EXPECT_TRUE(parse_address_list("host:65535").ok());
  EXPECT_TRUE(parse_address_list("host:00080").ok());
  // White space separates items like a comma (it used to join "A:1 B:2" into "A:1B:2").
  auto spaced = parse_address_list("127.0.0.1:9001 127.0.0.1:9002\t,\nh:3");
  ASSERT_TRUE(spaced.ok()) << spaced.error();
  EXPECT_EQ(spaced.value(), (std::vector<std::string>{"127.0.0.1:9001", "127.0.0.1:9002", "h:3"}));
  for (const char* bad : {"127.0.0.1: 80", "127.0.0.1:9001:9002", "http://127.0.0.1:9001", "::1:80", "[::1]", "h:"})
    EXPECT_FALSE(parse_address_list(bad).ok()) << bad;
}

}  // namespace
}  // namespace pdserve::disagg
