// The disaggregated cluster across real network hops: etcd, a router, two prefill and two
// decode workers, each in its own network namespace (tests/support/netns_lab.h: veth
// pairs to a bridge, own 10.x addresses), finding each other through etcd. Shows: output
// equal to a monolithic `serve`; a decode worker's link cut (ip link set down) mid-stream
// ⇒ the client's stream continues unbroken from the other decode worker; a prefill
// worker's link cut mid-transfer ⇒ the other prefill worker (or a local recompute), same
// output; a killed worker gone within its lease TTL; a new worker used within 2 s; SIGTERM
// drain loses no request. No namespaces (not root) ⇒ the suite FAILS.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/etcd_process.h"
#include "support/netns_lab.h"
#include "support/pd_node.h"
#include "support/prometheus.h"
#include "support/server_process.h"
#include "support/sse_client.h"
#include "support/wait.h"

namespace pdserve {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
using testing::PdNode;

constexpr int kTtl = 2;

json completion(const std::string& prompt, int max_tokens) {
  return {{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"ignore_eos", true}};
}

std::string long_prompt() {
  std::string p = "Lily and Ben went to the park with their dog. ";
  for (int i = 0; i < 3; ++i) p += p;
  return p;  // ~ 100+ tokens: several KV blocks per layer
}

double metric_sum(PdNode& n, const std::string& name) {
  return testing::sum_samples(testing::parse_prometheus_text(n.metrics_text()), name);
}

class MultiHost : public ::testing::Test {
 protected:
  static inline const std::vector<std::string> kHosts = {"etcd", "router", "prefill0", "prefill1", "decode0", "decode1", "decode2"};

  void SetUp() override {
    lab_ = std::make_unique<testing::NetnsLab>(kHosts);
    ASSERT_TRUE(lab_->ok()) << lab_->error();  // FAIL (never skip) without namespaces
    testing::EtcdProcess::Options eo;
    eo.host = lab_->ip("etcd");
    eo.prefix = lab_->exec_prefix("etcd");
    etcd_ = std::make_unique<testing::EtcdProcess>(eo);
    ASSERT_TRUE(etcd_->ready()) << etcd_->error();
    url_ = etcd_->discovery_url("/mh");
    serve_ = std::make_unique<testing::ServerProcess>(std::vector<std::string>{});
    ASSERT_TRUE(serve_->ready()) << serve_->error();
  }

  std::vector<std::string> common(bool worker) const {
    std::vector<std::string> a = {"--discovery", url_, "--grpc-keepalive-ms", "500", "--grpc-keepalive-timeout-ms", "1000"};
    if (worker) a.insert(a.end(), {"--discovery-ttl", std::to_string(kTtl)});
    return a;
  }
  std::unique_ptr<PdNode> node(const std::string& role, const std::string& host, std::vector<std::string> extra = {}) {
    PdNode::Options o;
    o.role = role;
    o.host = lab_->ip(host);
    o.prefix = lab_->exec_prefix(host);
    o.args = common(role != "router");
    o.args.insert(o.args.end(), extra.begin(), extra.end());
    return std::make_unique<PdNode>(o);
  }
  /// A decode worker; `step_delay_ms` > 0 paces its engine steps (--fault-step-delay-ms).
  std::unique_ptr<PdNode> decode(const std::string& host, int step_delay_ms = 0) {
    std::vector<std::string> extra = {"--remote-prefill-threshold", "0", "--kv-compression", "auto", "--drain-timeout", "20"};
    if (step_delay_ms > 0) extra.insert(extra.end(), {"--fault-step-delay-ms", std::to_string(step_delay_ms)});
    return node("decode", host, extra);
  }
  /// The full cluster: prefill workers first (their blocks paced by `prefill_delay_ms`, the
  /// decode workers' steps by `decode_delay_ms`).
  void start_cluster(int prefill_delay_ms = 0, int decode_delay_ms = 0) {
    for (const char* h : {"prefill0", "prefill1"}) {
      std::vector<std::string> extra;
      if (prefill_delay_ms > 0) extra = {"--fault-delay-ms", std::to_string(prefill_delay_ms)};
      prefill_.push_back(node("prefill", h, extra));
    }
    decode_.push_back(decode("decode0", decode_delay_ms));
    decode_.push_back(decode("decode1", decode_delay_ms));
    for (auto& n : prefill_) ASSERT_TRUE(n->start()) << n->error();
    for (auto& n : decode_) ASSERT_TRUE(n->start()) << n->error();
    router_ = node("router", "router", {"--policy", "round_robin", "--health-interval-ms", "250"});
    ASSERT_TRUE(router_->start()) << router_->error();
    ASSERT_TRUE(testing::wait_until([&] { return router_workers().size() == 2; }, 10s)) << router_->log();
    // Each decode worker sees both prefill workers.
    for (auto& d : decode_)
      ASSERT_TRUE(testing::wait_until([&] { return d->log().find(prefill_[1]->address() + " is healthy") != std::string::npos &&
                                                   d->log().find(prefill_[0]->address() + " is healthy") != std::string::npos; }, 10s))
          << d->log();
  }
  std::map<std::string, double> router_workers() {
    std::map<std::string, double> out;
    for (const auto& s : testing::parse_prometheus_text(router_->metrics_text()))
      if (s.name == "pdserve_router_decode_worker_up")
        if (auto a = s.label("address")) out[*a] = s.value;
    return out;
  }
  json want(const json& body) { return testing::post_json("127.0.0.1", serve_->port(), "/v1/completions", body); }
  json via_router(const json& body) { return testing::post_json(router_->host(), router_->port(), "/v1/completions", body); }
  std::string logs() {
    std::string out;
    auto add = [&](const char* what, PdNode& n) {
      std::string l = n.log();
      if (l.size() > 2500) l = l.substr(l.size() - 2500);
      out += std::string("---- ") + what + " " + n.address() + " ----\n" + l + "\n";
    };
    if (router_) add("router", *router_);
    for (auto& n : decode_) add("decode", *n);
    for (auto& n : prefill_) add("prefill", *n);
    return out;
  }

  std::unique_ptr<testing::NetnsLab> lab_;
  std::unique_ptr<testing::EtcdProcess> etcd_;
  std::unique_ptr<testing::ServerProcess> serve_;
  std::string url_;
  std::vector<std::unique_ptr<PdNode>> prefill_, decode_;
  std::unique_ptr<PdNode> router_;
};

// Output equality, a killed worker leaving, a new one joining, SIGTERM drain.
TEST_F(MultiHost, DiscoveryAcrossHostsKillJoinDrain) {
  start_cluster();
  const json body = completion(long_prompt(), 32);
  const json w = want(body);
  for (int i = 0; i < 4; ++i) {  // both decode workers (round robin), both prefill workers
    const json got = via_router(body);
    ASSERT_FALSE(got.is_null());
    EXPECT_EQ(got["choices"][0]["text"], w["choices"][0]["text"]) << logs();
  }
  for (auto& d : decode_) {
    EXPECT_GT(metric_sum(*d, "pdserve_remote_prefill_total"), 0) << d->log();
    EXPECT_EQ(metric_sum(*d, "pdserve_kv_recompute_fallback_total"), 0);
    // --kv-compression auto: a remote (non-loopback) prefill worker ⇒ zstd on the wire.
    EXPECT_GT(testing::sum_samples(testing::parse_prometheus_text(d->metrics_text()), "pdserve_kv_transfer_bytes_total", "codec",
                                   "zstd"), 0);
  }

  // Killed ⇒ gone from the router within the lease TTL.
  const std::string gone = decode_[1]->address();
  decode_[1]->kill();
  const auto t_kill = std::chrono::steady_clock::now();
  ASSERT_TRUE(testing::wait_until([&] { return router_workers().count(gone) == 0; }, 15s)) << logs();
  EXPECT_LE(std::chrono::duration<double>(std::chrono::steady_clock::now() - t_kill).count(), kTtl + 1.0);

  // A new worker on a new host is used within 2 s of being healthy.
  decode_.push_back(decode("decode2"));
  ASSERT_TRUE(decode_.back()->start()) << decode_.back()->error();
  const auto t_up = std::chrono::steady_clock::now();
  ASSERT_TRUE(testing::wait_until([&] {
    via_router(completion("Hi", 2));
    return metric_sum(*decode_.back(), "pdserve_request_success_total") > 0;
  }, 10s, 50ms)) << logs();
  EXPECT_LE(std::chrono::duration<double>(std::chrono::steady_clock::now() - t_up).count(), 2.0);

  // SIGTERM drain of decode0 while streams run on both: none is lost.
  const std::vector<std::string> prompts = {"Once upon a time", "The little dog", "Lily and Ben", "One day, a bird"};
  std::vector<json> wants;
  for (const auto& p : prompts) wants.push_back(want(completion(p, 160)));
  std::atomic<int> started{0};
  std::vector<std::future<testing::Streamed>> futs;
  for (const auto& p : prompts)
    futs.push_back(std::async(std::launch::async, [&, p] {
      bool first = true;
      return testing::stream_completion(router_->host(), router_->port(), completion(p, 160), [&](const json&) {
        if (first) started++;
        first = false;
      });
    }));
  ASSERT_TRUE(testing::wait_until([&] { return started.load() == 4; }, 30s));
  decode_[0]->term();
  for (size_t i = 0; i < futs.size(); ++i) {
    const testing::Streamed got = futs[i].get();
    EXPECT_TRUE(got.done) << got.error;
    ASSERT_EQ(got.texts.size(), 1u);
    EXPECT_EQ(got.texts[0], wants[i]["choices"][0]["text"].get<std::string>()) << "request " << i << "\n" << logs();
  }
  ASSERT_TRUE(testing::wait_until([&] { return !decode_[0]->running(); }, 25s));
  EXPECT_EQ(decode_[0]->exit_code(), 0) << decode_[0]->log();
  EXPECT_TRUE(testing::wait_until([&] { return router_workers().count(decode_[0]->address()) == 0; }, 2s));
}

// A decode worker's link is cut mid-stream: the router resumes the stream on the other
// decode worker; the client sees `serve`'s output, unbroken. The decode workers' steps are
// paced (5 ms: 480 tokens take 2.4 s) so that the stream is still running when the link is
// cut, however late the client's thread is (stories260K alone makes 480 tokens in ~0.1 s).
TEST_F(MultiHost, DecodeLinkCutMidStream) {
  start_cluster(/*prefill_delay_ms=*/0, /*decode_delay_ms=*/5);
  const json body = completion("Once upon a time", 480);
  const json w = want(body);
  std::string victim;
  const auto t0 = std::chrono::steady_clock::now();
  const testing::Streamed got = testing::stream_completion(router_->host(), router_->port(), body, [&](const json&) {
    if (!victim.empty()) return;
    for (size_t d = 0; d < decode_.size(); ++d)
      if (metric_sum(*decode_[d], "pdserve_requests_running") > 0) victim = d == 0 ? "decode0" : "decode1";
    if (victim.empty()) victim = "decode0";  // round robin's first pick
    ASSERT_TRUE(lab_->set_link(victim, false)) << lab_->error();
  });
  ASSERT_FALSE(victim.empty());
  EXPECT_TRUE(got.done) << got.error;
  ASSERT_EQ(got.texts.size(), 1u);
  EXPECT_EQ(got.texts[0], w["choices"][0]["text"].get<std::string>()) << logs();
  EXPECT_EQ(got.usage["completion_tokens"], w["usage"]["completion_tokens"]);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 30s);
  EXPECT_NE(router_->log().find("resuming on another worker"), std::string::npos) << router_->log();
}

// A prefill worker's link is cut while it streams KV blocks (paced by --fault-delay-ms):
// the decode worker gets the KV from the other prefill worker (or recomputes); the output
// is `serve`'s.
TEST_F(MultiHost, PrefillLinkCutMidTransfer) {
  start_cluster(/*prefill_delay_ms=*/400);
  const json body = completion(long_prompt(), 16);
  const json w = want(body);
  auto fut = std::async(std::launch::async, [&] { return via_router(body); });
  int cut = -1;
  ASSERT_TRUE(testing::wait_until([&] {
    for (int p = 0; p < 2; ++p)
      if (testing::sum_samples(testing::parse_prometheus_text(prefill_[p]->metrics_text()), "pdserve_kv_transfer_bytes_total") > 0)
        cut = p;
    return cut >= 0;
  }, 20s, 20ms)) << logs();
  ASSERT_TRUE(lab_->set_link(cut == 0 ? "prefill0" : "prefill1", false)) << lab_->error();
  const json got = fut.get();
  ASSERT_FALSE(got.is_null());
  EXPECT_EQ(got["choices"][0]["text"], w["choices"][0]["text"]) << logs();
  double failures = 0;
  for (auto& d : decode_) failures += metric_sum(*d, "pdserve_kv_transfer_failures_total");
  EXPECT_GT(failures, 0) << "the transfer was not cut mid-way\n" << logs();
}

}  // namespace
}  // namespace pdserve
