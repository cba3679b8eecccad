// CacheSaltGate (--max-cache-salts): distinct salts of unfinished requests are counted
// exactly, a new one past the cap is refused (RateLimited naming the flag) while held ones
// and the default "" are admitted, and dropping holds frees their salts.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "engine/cache_salt_gate.h"

namespace pdserve::engine {
namespace {

TEST(CacheSaltGate, ANewSaltPastTheCapIsRefusedUntilAHeldOneIsReleased) {
  CacheSaltGate g(2);
  auto a1 = g.acquire("a"), b = g.acquire("b");
  ASSERT_TRUE(a1.ok() && b.ok());
  EXPECT_EQ(g.held(), 2u);
  auto c = g.acquire("c");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::RateLimited);
  EXPECT_NE(c.status().message().find("--max-cache-salts 2"), std::string::npos) << c.status().message();
  // A salt already held, and the default namespace, are not new.
  auto a2 = g.acquire("a");
  ASSERT_TRUE(a2.ok());
  auto none = g.acquire("");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none.value(), nullptr);
  EXPECT_EQ(g.held(), 2u);
  // "a" stays held while one of its two requests is unfinished.
  a1.value().reset();
  EXPECT_FALSE(g.acquire("c").ok());
  a2.value().reset();
  EXPECT_EQ(g.held(), 1u);
  auto c2 = g.acquire("c");
  ASSERT_TRUE(c2.ok());
  EXPECT_EQ(g.held(), 2u);
  b.value().reset();
  c2.value().reset();
  EXPECT_EQ(g.held(), 0u);
}

TEST(CacheSaltGate, NoCapAdmitsEverySaltAndHoldsMayOutliveTheGate) {
  std::shared_ptr<CacheSaltGate::Hold> late;
  {
    CacheSaltGate off(0);
    for (int i = 0; i < 1000; ++i) ASSERT_TRUE(off.acquire("s" + std::to_string(i)).ok());
    CacheSaltGate g(1);
    late = g.acquire("x").value();
    ASSERT_NE(late, nullptr);
  }
  late.reset();  // the gate is gone; releasing must not touch freed memory (ASan)
}

TEST(CacheSaltGate, ConcurrentRequestsNeverHoldMoreThanTheCap) {
  CacheSaltGate g(8);
  std::vector<std::thread> ts;
  std::atomic<size_t> most{0};
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        auto h = g.acquire("t" + std::to_string(t) + "-" + std::to_string(i % 5));
        const size_t now = g.held();
        size_t m = most.load();
        while (now > m && !most.compare_exchange_weak(m, now)) {
        }
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_LE(most.load(), 8u);
  EXPECT_GT(most.load(), 0u);
  EXPECT_EQ(g.held(), 0u);
}

}  // namespace
}  // namespace pdserve::engine
