// server::prometheus_text's KV store section: one series per tier for every counter, the
// byte counters per direction, the latency histogram per (tier, op), gauges only for
// tiers that know their size, and nothing at all without a tier.
#include <gtest/gtest.h>

#include <string>

#include "engine/metrics.h"
#include "server/metrics_text.h"
#include "support/prometheus.h"

namespace pdserve {
namespace {

TEST(ServerKvStoreMetrics, SeriesPerTierAndOp) {
  engine::MetricsSnapshot m;
  EXPECT_EQ(server::prometheus_text(m, "m").find("pdserve_kv_store"), std::string::npos);
  for (const char* tier : {"disk", "redis"}) {
    engine::KvStoreTierMetrics t;
    t.tier = tier;
    t.hits = tier[0] == 'd' ? 3 : 5;
    t.misses = 7;
    t.writes = 11;
    t.errors = tier[0] == 'd' ? 0 : 2;
    t.bytes_read = 100;
    t.bytes_written = 200;
    t.up = tier[0] == 'd';
    if (tier[0] == 'd') t.blocks = 4, t.bytes = 4096;
    t.get_seconds = engine::Histogram({0.001, 0.01});
    t.get_seconds.observe(0.005);
    t.put_seconds = engine::Histogram({0.001, 0.01});
    m.kv_store.push_back(t);
  }
  auto s = testing::samples_by_key(testing::parse_prometheus_text(server::prometheus_text(m, "m")), "model_name");
  EXPECT_EQ(s["pdserve_kv_store_hits_total{tier=\"disk\"}"], 3);
  EXPECT_EQ(s["pdserve_kv_store_hits_total{tier=\"redis\"}"], 5);
  EXPECT_EQ(s["pdserve_kv_store_errors_total{tier=\"redis\"}"], 2);
  EXPECT_EQ(s["pdserve_kv_store_misses_total{tier=\"disk\"}"], 7);
  EXPECT_EQ(s["pdserve_kv_store_writes_total{tier=\"redis\"}"], 11);
  EXPECT_EQ(s["pdserve_kv_store_bytes_total{tier=\"redis\",direction=\"read\"}"], 100);
  EXPECT_EQ(s["pdserve_kv_store_bytes_total{tier=\"disk\",direction=\"write\"}"], 200);
  EXPECT_EQ(s["pdserve_kv_store_up{tier=\"disk\"}"], 1);
  EXPECT_EQ(s["pdserve_kv_store_up{tier=\"redis\"}"], 0);
  EXPECT_EQ(s["pdserve_kv_store_blocks{tier=\"disk\"}"], 4);
  EXPECT_EQ(s["pdserve_kv_store_held_bytes{tier=\"disk\"}"], 4096);
  EXPECT_EQ(s.count("pdserve_kv_store_blocks{tier=\"redis\"}"), 0u);
  EXPECT_EQ(s["pdserve_kv_store_latency_seconds_bucket{tier=\"disk\",op=\"get\",le=\"0.01\"}"], 1);
  EXPECT_EQ(s["pdserve_kv_store_latency_seconds_bucket{tier=\"disk\",op=\"get\",le=\"0.001\"}"], 0);
  EXPECT_EQ(s["pdserve_kv_store_latency_seconds_count{tier=\"redis\",op=\"put\"}"], 0);
  EXPECT_EQ(s["pdserve_kv_store_latency_seconds_count{tier=\"disk\",op=\"get\"}"], 1);
}

}  // namespace
}  // namespace pdserve
