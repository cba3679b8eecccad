// --max-cache-salts through a real PD cluster (router + prefill + decode processes): a
// decode worker at its cap refuses a new salt, and the router answers exactly what `serve`
// answers (429, the same JSON body, Retry-After), streamed or not, while the request
// holding the slot and a later request with the refused salt are served with the reference
// output. The request that holds the slot is made to last by the prefill worker's
// --fault-delay-ms (each of its 5 layer messages waits 300 ms while the decode worker holds
// the request), so the test does not race a generation. (A prefill worker's refusal is
// tested in disagg_prefill_service_test.cc: its salts are held only while it computes.)
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "support/cluster.h"
#include "support/held_stream.h"
#include "support/reference.h"
#include "support/server_process.h"
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

// Reference cases: long_case()'s prompt (13 tokens) is above the decode worker's
// --remote-prefill-threshold 8 and goes to the prefill worker; short_case()'s (5) is
// prefilled by the decode worker.
const testing::ReferenceCase& long_case() { return reference()[1]; }
const testing::ReferenceCase& short_case() { return reference()[0]; }

json greedy_body(const testing::ReferenceCase& c, const std::string& salt) {
  return {{"prompt", c.prompt}, {"max_tokens", c.tokens.size()}, {"temperature", 0}, {"cache_salt", salt}};
}

struct Answer {
  int status = 0;
  std::string retry_after;
  json body;
};

Answer post(int port, const json& body) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(5, 0);
  c.set_read_timeout(60, 0);
  auto res = c.Post("/v1/completions", body.dump(), "application/json");
  if (!res) return {};
  return {res->status, res->get_header_value("Retry-After"), json::parse(res->body, nullptr, false)};
}

/// A node's /health body (the worker's metrics port, the router's API port).
json health(Cluster& c, Role r) {
  auto res = c.client(r).Get("/health");
  return res ? json::parse(res->body, nullptr, false) : json();
}

/// What `serve --max-cache-salts 1` answers a new salt while another salt's request runs,
/// non-streamed and streamed.
std::pair<Answer, Answer> serve_refusal(const json& refused) {
  testing::ServerProcess serve({"--max-cache-salts", "1", "--ctx-size", "4096", "--fault-step-delay-ms", "2"});
  EXPECT_TRUE(serve.ready()) << serve.error();
  if (!serve.ready()) return {};
  json hold = {{"prompt", "Once upon a time"}, {"max_tokens", 4000}, {"ignore_eos", true}, {"stream", true},
               {"cache_salt", "A"}};
  testing::HeldStream held(serve.port(), hold.dump());
  EXPECT_TRUE(testing::wait_until([&] { return held.started.load(); }));
  EXPECT_EQ(held.status, 200);
  json streamed = refused;
  streamed["stream"] = true;
  std::pair<Answer, Answer> out{post(serve.port(), refused), post(serve.port(), streamed)};
  EXPECT_FALSE(held.finished.load()) << "the held request ended before the refusals";
  return out;
}

TEST(DisaggCacheSalts, ANewSaltPastTheDecodeWorkersCapGetsTheSame429AsServe) {
  const json refused = greedy_body(short_case(), "B");
  const auto [serve_429, serve_429_streamed] = serve_refusal(refused);
  ASSERT_EQ(serve_429.status, 429) << serve_429.body.dump();
  ASSERT_EQ(serve_429_streamed.status, 429) << serve_429_streamed.body.dump();

  ClusterOptions o;
  o.decode_args = {"--max-cache-salts", "1", "--remote-prefill-threshold", "8"};
  o.prefill_args = {"--fault-delay-ms", "300"};
  Cluster cluster(o);
  ASSERT_TRUE(cluster.ready()) << cluster.error();
  const int port = cluster.router_port();

  // Salt A's request takes the decode worker's one slot (its prompt waits ~1.5 s for KV).
  auto a = std::async(std::launch::async, [&] { return post(port, greedy_body(long_case(), "A")); });
  ASSERT_TRUE(testing::wait_until([&] { return health(cluster, Role::Decode)["cache_salts_in_use"] == 1; }))
      << cluster.logs();

  // Salt B: the router answers what serve answers, streamed or not.
  const Answer b = post(port, refused);
  json streamed = refused;
  streamed["stream"] = true;
  const Answer b_streamed = post(port, streamed);
  EXPECT_EQ(a.wait_for(std::chrono::seconds(0)), std::future_status::timeout) << "salt A's request ended too soon";
  EXPECT_EQ(b.status, 429) << b.body.dump();
  EXPECT_EQ(b.retry_after, serve_429.retry_after);
  EXPECT_EQ(b.body, serve_429.body);
  EXPECT_EQ(b_streamed.status, 429) << b_streamed.body.dump();
  EXPECT_EQ(b_streamed.retry_after, serve_429_streamed.retry_after);
  EXPECT_EQ(b_streamed.body, serve_429_streamed.body);

  // Salt A's request is served; then salt B's.
  const Answer a_done = a.get();
  ASSERT_EQ(a_done.status, 200) << a_done.body.dump() << cluster.logs();
  EXPECT_EQ(a_done.body["choices"][0]["text"], long_case().text);
  ASSERT_TRUE(testing::wait_until([&] { return health(cluster, Role::Decode)["cache_salts_in_use"] == 0; }));
  const Answer b_later = post(port, refused);
  ASSERT_EQ(b_later.status, 200) << b_later.body.dump();
  EXPECT_EQ(b_later.body["choices"][0]["text"], short_case().text);
}

}  // namespace
}  // namespace pdserve
