// Service discovery on loopback with a real etcd (started here): workers register under
// a lease (--discovery etcd://...), the router and decode workers watch the prefix. A
// request through the discovered cluster gives `serve`'s output (its prompt prefilled by
// the discovered prefill worker); a SIGKILLed decode worker is gone from the router within
// its lease TTL; a new one is used within 2 s of being healthy; SIGTERM drains a decode
// worker without losing a stream; bad discovery URLs and an unreachable etcd are handled.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "disagg/etcd_client.h"
#include "support/child_process.h"
#include "support/etcd_process.h"
#include "support/pd_node.h"
#include "support/ports.h"
#include "support/prometheus.h"
#include "support/server_process.h"
#include "support/sse_client.h"
#include "support/wait.h"
#include "support/pdserve_bin.h"

namespace pdserve {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
using testing::PdNode;

constexpr int kTtl = 2;

/// The router's decode workers: address → up (1/0); absent ones are gone.
std::map<std::string, double> router_workers(PdNode& router) {
  std::map<std::string, double> out;
  for (const auto& s : testing::parse_prometheus_text(router.metrics_text()))
    if (s.name == "pdserve_router_decode_worker_up")
      if (auto a = s.label("address")) out[*a] = s.value;
  return out;
}

double metric_sum(PdNode& n, const std::string& name) {
  return testing::sum_samples(testing::parse_prometheus_text(n.metrics_text()), name);
}

std::vector<std::string> disc_args(const std::string& url) {
  return {"--discovery", url, "--discovery-ttl", std::to_string(kTtl), "--grpc-keepalive-ms", "1000",
          "--grpc-keepalive-timeout-ms", "1000"};
}

/// The router registers nothing: no lease TTL.
std::vector<std::string> router_args(const std::string& url) {
  return {"--discovery", url, "--grpc-keepalive-ms", "1000", "--grpc-keepalive-timeout-ms", "1000", "--policy", "round_robin"};
}

std::vector<std::string> plus(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

json completion(const std::string& prompt, int max_tokens) {
  return {{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"ignore_eos", true}};
}

TEST(Discovery, EtcdWorkersComeAndGo) {
  testing::EtcdProcess etcd;
  ASSERT_TRUE(etcd.ready()) << etcd.error();
  const std::string url = etcd.discovery_url("/t" + std::to_string(::getpid()));
  testing::ServerProcess serve(std::vector<std::string>{});
  ASSERT_TRUE(serve.ready()) << serve.error();

  PdNode prefill("prefill", disc_args(url));
  ASSERT_TRUE(prefill.start()) << prefill.error();
  const auto decode_args = plus(disc_args(url), {"--remote-prefill-threshold", "0"});
  PdNode d0("decode", decode_args), d1("decode", decode_args);
  ASSERT_TRUE(d0.start()) << d0.error();
  ASSERT_TRUE(d1.start()) << d1.error();
  PdNode router("router", router_args(url));
  ASSERT_TRUE(router.start()) << router.error();

  // Both decode workers found (no static list anywhere).
  ASSERT_TRUE(testing::wait_until([&] {
    auto w = router_workers(router);
    return w[d0.address()] == 1 && w[d1.address()] == 1;
  }, 10s)) << router.log();

  // Output equal to the monolithic server, the prompt prefilled by the discovered worker.
  const json body = completion("Once upon a time, there was a little girl", 24);
  const json want = testing::post_json("127.0.0.1", serve.port(), "/v1/completions", body);
  for (int i = 0; i < 2; ++i) {
    const json got = testing::post_json("127.0.0.1", router.port(), "/v1/completions", body);
    ASSERT_FALSE(got.is_null());
    EXPECT_EQ(got["choices"][0]["text"], want["choices"][0]["text"]) << got.dump();
  }
  EXPECT_GT(metric_sum(d0, "pdserve_remote_prefill_total") + metric_sum(d1, "pdserve_remote_prefill_total"), 0)
      << d0.log();
  EXPECT_EQ(metric_sum(d0, "pdserve_kv_recompute_fallback_total") + metric_sum(d1, "pdserve_kv_recompute_fallback_total"), 0);

  // A killed worker is gone from the router within its lease TTL (+ etcd's expiry tick).
  const std::string gone = d1.address();
  d1.kill();
  const auto t_kill = std::chrono::steady_clock::now();
  ASSERT_TRUE(testing::wait_until([&] { return router_workers(router).count(gone) == 0; }, 15s)) << router.log();
  const double gone_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_kill).count();
  EXPECT_LE(gone_s, kTtl + 1.0) << "removed " << gone_s << " s after the kill";
  for (int i = 0; i < 3; ++i) {
    const json got = testing::post_json("127.0.0.1", router.port(), "/v1/completions", body);
    EXPECT_EQ(got["choices"][0]["text"], want["choices"][0]["text"]) << got.dump();
  }

  // A new worker is used within 2 s of being healthy, nothing restarted.
  PdNode d2("decode", decode_args);
  ASSERT_TRUE(d2.start()) << d2.error();
  const auto t_up = std::chrono::steady_clock::now();
  ASSERT_TRUE(testing::wait_until([&] {
    testing::post_json("127.0.0.1", router.port(), "/v1/completions", completion("Hi", 2));
    return metric_sum(d2, "pdserve_request_success_total") > 0;
  }, 10s, 50ms)) << router.log();
  const double used_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_up).count();
  EXPECT_LE(used_s, 2.0);
  const json on_new = testing::post_json("127.0.0.1", router.port(), "/v1/completions", body);
  EXPECT_EQ(on_new["choices"][0]["text"], want["choices"][0]["text"]);

  // The entries carry role, address, model, KV layout and load.
  disagg::EtcdClient client("127.0.0.1", etcd.port());
  int64_t rev = 0;
  auto kvs = client.range_prefix(url.substr(url.rfind('/')) + "/", &rev);
  ASSERT_TRUE(kvs.ok()) << kvs.error();
  ASSERT_EQ(kvs.value().size(), 3u);  // prefill, d0, d2
  for (const auto& kv : kvs.value()) {
    const json v = json::parse(kv.value);
    EXPECT_EQ(kv.key, url.substr(url.rfind('/')) + "/" + v["role"].get<std::string>() + "/" + v["address"].get<std::string>());
    EXPECT_FALSE(v["model"].get<std::string>().empty());
    EXPECT_EQ(v["kv"]["block_size"], 16);
    EXPECT_TRUE(v["load"].contains("requests_running"));
    EXPECT_NE(kv.lease, 0);
  }
}

TEST(Discovery, SigtermDrainLosesNoStream) {
  testing::EtcdProcess etcd;
  ASSERT_TRUE(etcd.ready()) << etcd.error();
  const std::string url = etcd.discovery_url("/drain" + std::to_string(::getpid()));
  testing::ServerProcess serve(std::vector<std::string>{});
  ASSERT_TRUE(serve.ready()) << serve.error();
  // Paced steps (10 ms: the 160-token streams take 1.6 s) so that d0 still has streams to
  // drain when the test thread looks at its /health, however late that thread is.
  const auto decode_args = plus(disc_args(url), {"--drain-timeout", "20", "--fault-step-delay-ms", "10"});
  PdNode d0("decode", decode_args), d1("decode", decode_args);
  ASSERT_TRUE(d0.start()) << d0.error();
  ASSERT_TRUE(d1.start()) << d1.error();
  PdNode router("router", router_args(url));
  ASSERT_TRUE(router.start()) << router.error();
  ASSERT_TRUE(testing::wait_until([&] { return router_workers(router).size() == 2; }, 10s));

  const std::vector<std::string> prompts = {"Once upon a time", "The little dog", "Lily and Ben", "One day, a bird"};
  std::vector<json> want;
  for (const auto& p : prompts) want.push_back(testing::post_json("127.0.0.1", serve.port(), "/v1/completions", completion(p, 160)));

  std::atomic<int> started{0};
  std::vector<std::future<testing::Streamed>> futs;
  for (const auto& p : prompts)
    futs.push_back(std::async(std::launch::async, [&, p] {
      bool first = true;
      return testing::stream_completion("127.0.0.1", router.port(), completion(p, 160), [&](const json&) {
        if (first) started++;
        first = false;
      });
    }));
  ASSERT_TRUE(testing::wait_until([&] { return started.load() == 4; }, 30s));
  d0.term();
  // While it drains: /health says so, and new requests go elsewhere and succeed.
  bool saw_draining = false;
  testing::wait_until([&] {
    std::string b;
    if (d0.health_status(&b) == 503 && b.find("draining") != std::string::npos) saw_draining = true;
    return saw_draining || !d0.running();
  }, 20s, 5ms);
  const json after = testing::post_json("127.0.0.1", router.port(), "/v1/completions", completion("The little dog", 160));
  EXPECT_EQ(after["choices"][0]["text"], want[1]["choices"][0]["text"]);
  for (size_t i = 0; i < futs.size(); ++i) {
    const testing::Streamed got = futs[i].get();
    EXPECT_TRUE(got.done) << got.error;
    ASSERT_EQ(got.texts.size(), 1u);
    EXPECT_EQ(got.texts[0], want[i]["choices"][0]["text"].get<std::string>()) << "request " << i;
    EXPECT_EQ(got.finish[0], "length");
  }
  ASSERT_TRUE(testing::wait_until([&] { return !d0.running(); }, 25s));
  EXPECT_EQ(d0.exit_code(), 0);
  EXPECT_TRUE(saw_draining) << d0.log();
  const std::string log = d0.log();
  EXPECT_NE(log.find("draining"), std::string::npos) << log;
  EXPECT_NE(log.find("deregistered"), std::string::npos) << log;
  // Deregistered at once (lease revoked), not after the TTL.
  EXPECT_TRUE(testing::wait_until([&] { return router_workers(router).count(d0.address()) == 0; }, 1s));
}

TEST(Discovery, BadUrlIsOneLineError) {
  for (const std::string role : {"router", "decode", "prefill"})
    for (const std::string bad : {"etcd://127.0.0.1", "zk://h:1", "etcd://:2379", "dns://name:port", "etcd://h:99999"}) {
      testing::ChildProcess p;
      char tmpl[] = "/tmp/pdserve-disc-XXXXXX";
      const int fd = ::mkstemp(tmpl);
      ::close(fd);
      ASSERT_TRUE(p.spawn({testing::pdserve_bin(), role, "--model", testing::kStoriesModel, "--port", std::to_string(testing::free_port()),
                           "--discovery", bad},
                          tmpl));
      ASSERT_TRUE(testing::wait_until([&] { return !p.running(); }, 30s));
      std::ifstream in(tmpl);
      std::stringstream ss;
      ss << in.rdbuf();
      ::unlink(tmpl);
      const std::string out = ss.str();
      EXPECT_EQ(p.exit_code(), 2) << role << " " << bad << ": " << out;
      EXPECT_EQ(out.rfind("error: --discovery '" + bad + "'", 0), 0u) << out;
      EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
    }
}

TEST(Discovery, UnreachableEtcdIsRetriedWithBackoff) {
  const int port = testing::free_port();
  const std::string url = "etcd://127.0.0.1:" + std::to_string(port) + "/late";
  PdNode prefill("prefill", disc_args(url));
  ASSERT_TRUE(prefill.start()) << prefill.error();  // serves (and retries) meanwhile
  ASSERT_TRUE(testing::wait_until([&] {
    const std::string l = prefill.log();
    return l.find("retrying in 400 ms") != std::string::npos;  // second attempt, doubled
  }, 10s)) << prefill.log();
  EXPECT_NE(prefill.log().find("unreachable"), std::string::npos);
  testing::EtcdProcess::Options o;
  o.client_port = port;
  testing::EtcdProcess etcd(o);
  ASSERT_TRUE(etcd.ready()) << etcd.error();
  disagg::EtcdClient client("127.0.0.1", port);
  ASSERT_TRUE(testing::wait_until([&] {
    int64_t rev;
    auto kvs = client.range_prefix("/late/prefill/", &rev);
    return kvs.ok() && kvs.value().size() == 1 && kvs.value()[0].key == "/late/prefill/" + prefill.address();
  }, 15s)) << prefill.log();
}

TEST(Discovery, DnsNameResolvesToEveryAddress) {
  // "localhost" resolves to 127.0.0.1: the router finds the decode worker through it.
  PdNode d0("decode", {});
  ASSERT_TRUE(d0.start()) << d0.error();
  PdNode router("router", {"--discovery", "dns://localhost:" + std::to_string(d0.port())});
  ASSERT_TRUE(router.start()) << router.error();
  ASSERT_TRUE(testing::wait_until([&] { return router_workers(router)["127.0.0.1:" + std::to_string(d0.port())] == 1; }, 10s))
      << router.log();
  const json got = testing::post_json("127.0.0.1", router.port(), "/v1/completions", completion("Hi", 4));
  EXPECT_EQ(got["usage"]["completion_tokens"], 4);
}

}  // namespace
}  // namespace pdserve
