// Rate limiter and gateway admission with a fake clock: token-bucket refill, refunds,
// concurrency, key vs tenant scopes, exactness under many threads, reset formats.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "gateway/gateway.h"
#include "gateway/rate_limiter.h"

namespace pdserve::gateway {
namespace {

struct FakeClock {
  std::shared_ptr<std::atomic<double>> t = std::make_shared<std::atomic<double>>(1000.0);
  Clock clock() const {
    auto p = t;
    return [p] { return p->load(); };
  }
  void advance(double s) { t->store(t->load() + s); }
};

TEST(RateLimiter, RequestsPerMinuteRefillsContinuously) {
  FakeClock fc;
  RateLimiter rl(fc.clock());
  Limits l;
  l.requests_per_minute = 6;  // one every 10 s
  for (int i = 0; i < 6; ++i) {
    RateTicket t;
    RateDecision d = rl.acquire("k", l, "t", {}, 0, &t);
    ASSERT_TRUE(d.allowed) << i;
    EXPECT_EQ(d.state.remaining_requests, 5 - i);
    EXPECT_EQ(d.state.limit_requests, 6);
  }
  RateDecision d = rl.acquire("k", l, "t", {}, 0, nullptr);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, "requests");
  EXPECT_EQ(d.scope, "key");
  EXPECT_DOUBLE_EQ(d.retry_after_s, 10.0);
  EXPECT_DOUBLE_EQ(d.state.reset_requests_s, 60.0);
  fc.advance(9.9);
  EXPECT_FALSE(rl.acquire("k", l, "t", {}, 0, nullptr).allowed);
  EXPECT_NEAR(rl.acquire("k", l, "t", {}, 0, nullptr).retry_after_s, 0.1, 1e-9);
  fc.advance(0.1);
  EXPECT_TRUE(rl.acquire("k", l, "t", {}, 0, nullptr).allowed);
  EXPECT_FALSE(rl.acquire("k", l, "t", {}, 0, nullptr).allowed);
}

TEST(RateLimiter, TokensAreRefundedByActualUse) {
  FakeClock fc;
  RateLimiter rl(fc.clock());
  Limits l;
  l.tokens_per_minute = 100;
  RateTicket a;
  ASSERT_TRUE(rl.acquire("k", l, "t", {}, 80, &a).allowed);
  RateDecision d = rl.acquire("k", l, "t", {}, 30, nullptr);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, "tokens");
  // 20 left, 30 needed: 10 tokens at 100/60 per second.
  EXPECT_NEAR(d.retry_after_s, 6.0, 1e-9);
  EXPECT_EQ(d.state.remaining_tokens, 20);
  rl.release(a, 50);  // used 50 of the 80 estimated: 30 come back
  EXPECT_TRUE(rl.acquire("k", l, "t", {}, 50, nullptr).allowed);
  // More than the bucket can ever hold: refused, and no wait helps.
  RateDecision big = rl.acquire("k", l, "t", {}, 101, nullptr);
  EXPECT_FALSE(big.allowed);
  EXPECT_EQ(big.reason, "request_too_large");
  EXPECT_EQ(big.retry_after_s, 0);
}

TEST(RateLimiter, TenantLimitSpansItsKeysAndRefusalDebitsNothing) {
  FakeClock fc;
  RateLimiter rl(fc.clock());
  Limits key;
  key.requests_per_minute = 10;
  Limits tenant;
  tenant.max_concurrent = 2;
  RateTicket t1, t2;
  ASSERT_TRUE(rl.acquire("k1", key, "T", tenant, 0, &t1).allowed);
  ASSERT_TRUE(rl.acquire("k2", key, "T", tenant, 0, &t2).allowed);
  RateDecision d = rl.acquire("k1", key, "T", tenant, 0, nullptr);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, "concurrency");
  EXPECT_EQ(d.scope, "tenant");
  // The refused request took no request token from k1.
  EXPECT_EQ(rl.peek("k1", key, "T", tenant).remaining_requests, 9);
  rl.release(t1, 0);
  EXPECT_EQ(rl.concurrent("T"), 1);
  EXPECT_TRUE(rl.acquire("k1", key, "T", tenant, 0, nullptr).allowed);
}

TEST(RateLimiter, ExactUnderManyThreads) {
  FakeClock fc;  // frozen: no refill while the threads race
  RateLimiter rl(fc.clock());
  Limits l;
  l.requests_per_minute = 1000;
  l.tokens_per_minute = 5000;
  std::atomic<int> ok{0};
  std::vector<std::thread> th;
  for (int i = 0; i < 32; ++i)
    th.emplace_back([&] {
      for (int j = 0; j < 100; ++j)
        if (rl.acquire("k", l, "t", l, 7, nullptr).allowed) ok++;
    });
  for (auto& t : th) t.join();
  EXPECT_EQ(ok.load(), 5000 / 7);  // the token bucket binds first (714 × 7 ≤ 5000)
  EXPECT_EQ(rl.peek("k", l, "t", l).remaining_tokens, 5000 - 714 * 7);
}

TEST(RateLimiter, ResetFormatIsOpenAIs) {
  EXPECT_EQ(format_reset(0), "0s");
  EXPECT_EQ(format_reset(0.12), "120ms");
  EXPECT_EQ(format_reset(2.5), "2.5s");
  EXPECT_EQ(format_reset(90), "1m30s");
  EXPECT_EQ(format_reset(60), "1m0s");
}

std::shared_ptr<const AuthConfig> config(const std::string& text) {
  auto c = parse_auth_config(text, "auth.json");
  EXPECT_TRUE(c.ok()) << c.status().message();
  return c.ok() ? c.value() : nullptr;
}

TEST(Gateway, AuthenticatesByHashAndAppliesClassQueueBound) {
  FakeClock fc;
  const std::string text = R"({
  "classes": {"low": {"max_queue": 2}},
  "tenants": {"a": {"slo_class": "low", "allowed_slo_classes": ["high"]}, "b": {}},
  "keys": [{"key_sha256": ")" + hash_api_key("ka") + R"(", "tenant": "a"},
           {"key_sha256": ")" + hash_api_key("kb") + R"(", "tenant": "b", "models": ["m1"]}]
})";
  Gateway g(config(text), "", fc.clock());
  EXPECT_FALSE(g.authenticate("Bearer nope").ok());
  EXPECT_FALSE(g.authenticate("").ok());
  EXPECT_FALSE(g.authenticate(hash_api_key("ka")).ok());  // the hash is not the key
  auto a = g.authenticate("Bearer ka");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a.value().tenant->name, "a");
  auto b = g.authenticate("bearer kb");
  ASSERT_TRUE(b.ok());
  // Model not allowed for b; allowed for a (no list).
  auto r = g.admit(b.value(), "m2", std::nullopt, 10, nullptr);
  ASSERT_TRUE(std::holds_alternative<Refusal>(r));
  EXPECT_EQ(std::get<Refusal>(r).kind, Refusal::Kind::kModelNotFound);
  // b may not pick high.
  r = g.admit(b.value(), "m1", SloClass::kHigh, 10, nullptr);
  ASSERT_TRUE(std::holds_alternative<Refusal>(r));
  EXPECT_EQ(std::get<Refusal>(r).kind, Refusal::Kind::kBadClass);
  // a: low by default, queue bound 2; high allowed and unbounded.
  auto l1 = g.admit(a.value(), "m2", std::nullopt, 10, nullptr);
  auto l2 = g.admit(a.value(), "m2", std::nullopt, 10, nullptr);
  ASSERT_TRUE(std::holds_alternative<std::shared_ptr<RequestLease>>(l1));
  ASSERT_TRUE(std::holds_alternative<std::shared_ptr<RequestLease>>(l2));
  EXPECT_EQ(std::get<0>(l1)->slo_class(), SloClass::kLow);
  r = g.admit(a.value(), "m2", std::nullopt, 10, nullptr);
  ASSERT_TRUE(std::holds_alternative<Refusal>(r));
  EXPECT_EQ(std::get<Refusal>(r).kind, Refusal::Kind::kOverloaded);
  EXPECT_TRUE(std::holds_alternative<std::shared_ptr<RequestLease>>(g.admit(a.value(), "m2", SloClass::kHigh, 10, nullptr)));
  // A first token frees a queue place.
  std::get<0>(l1)->on_tokens(1, fc.t->load());
  EXPECT_EQ(g.queued(SloClass::kLow), 1);
  EXPECT_TRUE(std::holds_alternative<std::shared_ptr<RequestLease>>(g.admit(a.value(), "m2", std::nullopt, 10, nullptr)));
  // Tenants have their own prefix-cache namespaces.
  EXPECT_NE(std::get<0>(l1)->cache_salt(""), std::get<0>(g.admit(b.value(), "m1", std::nullopt, 1, nullptr))->cache_salt(""));
}

TEST(AuthConfig, SharedCacheGroupAndInheritance) {
  auto c = config(R"({"tenants": {"a": {"share_cache_group": "g", "slo_class": "high", "models": ["x"]},
                                   "b": {"share_cache_group": "g"}, "c": {}},
                      "keys": [{"key_sha256": ")" + std::string(64, 'a') + R"(", "tenant": "a", "limits": {"requests_per_minute": 5}}]})");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->tenants.at("a").cache_salt(), c->tenants.at("b").cache_salt());
  EXPECT_NE(c->tenants.at("a").cache_salt(), c->tenants.at("c").cache_salt());
  EXPECT_EQ(c->keys[0].slo_class, SloClass::kHigh);
  EXPECT_TRUE(c->keys[0].allows_model("x"));
  EXPECT_FALSE(c->keys[0].allows_model("y"));
  EXPECT_EQ(c->keys[0].limits.requests_per_minute, 5);
}

TEST(AuthConfig, AKeyMayAskForItsOwnAndItsTenantsDefaultClass) {
  // The README's example: tenant default medium, high allowed; the key's own class low.
  auto c = config(R"({"tenants": {"acme": {"slo_class": "medium", "allowed_slo_classes": ["high"]},
                                   "solo": {"slo_class": "low"}},
                      "keys": [{"key_sha256": ")" + std::string(64, 'a') + R"(", "tenant": "acme", "slo_class": "low"},
                               {"key_sha256": ")" + std::string(64, 'b') + R"(", "tenant": "solo"},
                               {"key_sha256": ")" + std::string(64, 'c') + R"(", "tenant": "acme",
                                "allowed_slo_classes": ["low"]}]})");
  ASSERT_TRUE(c);
  const KeyConfig& ci = c->keys[0];
  EXPECT_EQ(ci.slo_class, SloClass::kLow);
  EXPECT_TRUE(ci.allows_class(SloClass::kLow));     // its own
  EXPECT_TRUE(ci.allows_class(SloClass::kMedium));  // its tenant's default
  EXPECT_TRUE(ci.allows_class(SloClass::kHigh));    // the tenant's list
  const KeyConfig& solo = c->keys[1];
  EXPECT_TRUE(solo.allows_class(SloClass::kLow));
  EXPECT_FALSE(solo.allows_class(SloClass::kMedium));
  EXPECT_FALSE(solo.allows_class(SloClass::kHigh));
  const KeyConfig& own = c->keys[2];  // its own list replaces the tenant's; the default stays
  EXPECT_EQ(own.slo_class, SloClass::kMedium);
  EXPECT_TRUE(own.allows_class(SloClass::kLow));
  EXPECT_TRUE(own.allows_class(SloClass::kMedium));
  EXPECT_FALSE(own.allows_class(SloClass::kHigh));
  // Through the gateway: asking for the tenant's default is admitted, another class not.
  FakeClock fc;
  Gateway g(c, "", fc.clock());
  Principal who;
  who.config = c;
  who.key = &ci;
  who.tenant = &c->tenants.at("acme");
  auto r = g.admit(who, "m", SloClass::kMedium, 1, nullptr);
  ASSERT_TRUE(std::holds_alternative<std::shared_ptr<RequestLease>>(r));
  EXPECT_EQ(std::get<0>(r)->slo_class(), SloClass::kMedium);
  Principal s2{c, &solo, &c->tenants.at("solo")};
  auto refused = g.admit(s2, "m", SloClass::kHigh, 1, nullptr);
  ASSERT_TRUE(std::holds_alternative<Refusal>(refused));
  EXPECT_EQ(std::get<Refusal>(refused).kind, Refusal::Kind::kBadClass);
}

TEST(AuthConfig, ErrorsNameTheLine) {
  auto syntax = parse_auth_config("{\n  \"tenants\": {},\n  \"keys\": [\n    {\"tenant\": \"a\",,}\n  ]\n}\n", "f.json");
  ASSERT_FALSE(syntax.ok());
  EXPECT_NE(syntax.status().message().find("f.json:4:"), std::string::npos) << syntax.status().message();
  auto tenant = parse_auth_config("{\n  \"tenants\": {\"a\": {}},\n  \"keys\": [\n    {\"key_sha256\": \"" +
                                      std::string(64, 'b') + "\", \"tenant\": \"a\"},\n    {\"key_sha256\": \"" +
                                      std::string(64, 'c') + "\",\n     \"tenant\": \"zz\"}\n  ]\n}\n",
                                  "f.json");
  ASSERT_FALSE(tenant.ok());
  EXPECT_NE(tenant.status().message().find("f.json:5:"), std::string::npos) << tenant.status().message();
  EXPECT_NE(tenant.status().message().find("unknown tenant 'zz'"), std::string::npos);
  auto hash = parse_auth_config("{\"tenants\": {\"a\": {}},\n\"keys\": [{\"key_sha256\": \"abc\", \"tenant\": \"a\"}]}", "f.json");
  ASSERT_FALSE(hash.ok());
  EXPECT_NE(hash.status().message().find("f.json:2:"), std::string::npos) << hash.status().message();
  auto cls = parse_auth_config("{\"tenants\": {\n\"a\": {},\n\"b\": {\"slo_class\": \"urgent\"}},\n\"keys\": []}", "f.json");
  ASSERT_FALSE(cls.ok());
  EXPECT_NE(cls.status().message().find("f.json:3:"), std::string::npos) << cls.status().message();
}

}  // namespace
}  // namespace pdserve::gateway
