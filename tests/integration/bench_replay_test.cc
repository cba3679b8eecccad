// `pdserve bench` end to end: replays 20 requests of each production trace against
// `pdserve serve` on stories260K and checks the JSON report (counts, exact prompt lengths,
// percentile order, throughput consistent with token counts and wall time) and the plot.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "support/server_process.h"
#include "support/pdserve_bin.h"

namespace pdserve {
namespace {

using nlohmann::json;

struct BenchRun {
  int exit_code = -1;
  std::string out;  // stdout: the table
  double wall_s = 0;
};

BenchRun run(const std::string& args) {
  BenchRun r;
  const std::string cmd = testing::pdserve_bin() + " bench " + args + " 2>/dev/null";
  const auto t0 = std::chrono::steady_clock::now();
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), p)) > 0;) r.out.append(buf, n);
  const int st = ::pclose(p);
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str(), nullptr, false);
}

std::string temp_path(const char* suffix) {
  char tmpl[] = "/tmp/pdserve-bench-test-XXXXXX";
  const int fd = ::mkstemp(tmpl);
  ::close(fd);
  ::unlink(tmpl);
  return std::string(tmpl) + suffix;
}

class BenchReplay : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = std::make_unique<testing::ServerProcess>(); }
  static void TearDownTestSuite() { server_.reset(); }
  static std::unique_ptr<testing::ServerProcess> server_;

  // Common flags: stories260K has a 512-token context and vocab, so trace lengths are
  // scaled by 1/64 (a 512-token hash block becomes 8 tokens) and capped.
  static std::string common() {
    return "--url " + server_->base_url() +
           " --model stories260K --tokenizer ../shared/models/stories260K.gguf"
           " --length-scale 0.015625 --max-input 384 --max-output 32 --max-requests 20"
           " --slo-ttft 2000 --slo-tpot 200 --no-progress";
  }

  // Checks that hold for any successful 20-request replay.
  static void check_report(const json& r, const BenchRun& run) {
    ASSERT_FALSE(r.is_discarded());
    const json& s = r["summary"];
    EXPECT_EQ(s["requests"], 20);
    EXPECT_EQ(s["completed"], 20);
    EXPECT_EQ(s["failed"], 0);
    EXPECT_EQ(s["not_sent"], 0);
    ASSERT_EQ(r["requests"].size(), 20u);
    int64_t in_sum = 0, out_sum = 0;
    double max_e2e = 0;
    for (const json& q : r["requests"]) {
      ASSERT_TRUE(q["ok"].get<bool>()) << q.dump();
      // Prompts are exactly the synthesized length as the server counts them, and with
      // ignore_eos every request generates exactly max_tokens.
      EXPECT_EQ(q["usage_prompt_tokens"], q["input_tokens"]) << q.dump();
      EXPECT_EQ(q["usage_completion_tokens"], q["max_tokens"]) << q.dump();
      EXPECT_GE(q["chunks"].get<int>(), 1);
      EXPECT_LE(q["chunks"].get<int64_t>(), q["max_tokens"].get<int64_t>());
      EXPECT_GE(q["ttft_ms"].get<double>(), 0);
      EXPECT_GE(q["e2e_ms"].get<double>(), q["ttft_ms"].get<double>());
      EXPECT_GE(q["send_s"].get<double>(), q["arrival_s"].get<double>() - 1e-9);
      in_sum += q["input_tokens"].get<int64_t>();
      out_sum += q["max_tokens"].get<int64_t>();
      max_e2e = std::max(max_e2e, q["e2e_ms"].get<double>());
    }
    EXPECT_EQ(s["input_tokens"], in_sum);
    EXPECT_EQ(s["output_tokens"], out_sum);
    // Percentiles are non-decreasing within each metric.
    for (const char* m : {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"}) {
      const json& d = s[m];
      SCOPED_TRACE(m);
      ASSERT_GT(d["count"].get<int>(), 0);
      EXPECT_LE(d["min"].get<double>(), d["p50"].get<double>());
      EXPECT_LE(d["p50"].get<double>(), d["p90"].get<double>());
      EXPECT_LE(d["p90"].get<double>(), d["p99"].get<double>());
      EXPECT_LE(d["p99"].get<double>(), d["max"].get<double>());
      EXPECT_LE(d["min"].get<double>(), d["mean"].get<double>());
      EXPECT_LE(d["mean"].get<double>(), d["max"].get<double>());
    }
    EXPECT_EQ(s["ttft_ms"]["count"], 20);
    EXPECT_EQ(s["e2e_ms"]["count"], 20);
    // Throughput = tokens / duration; the duration fits inside the process's wall time and
    // covers the slowest request.
    const double dur = s["duration_s"].get<double>();
    EXPECT_GT(dur, 0);
    EXPECT_LE(dur, run.wall_s);
    EXPECT_GE(dur * 1000 + 1e-6, max_e2e);
    EXPECT_NEAR(s["request_throughput"].get<double>(), 20 / dur, 1e-9);
    EXPECT_NEAR(s["output_throughput"].get<double>(), out_sum / dur, 1e-6);
    EXPECT_NEAR(s["total_token_throughput"].get<double>(), (in_sum + out_sum) / dur, 1e-6);
    const double good = s["good_requests"].get<double>();
    EXPECT_LE(good, 20);
    EXPECT_NEAR(s["goodput"].get<double>(), good / dur, 1e-9);
    // The table carries the same counts.
    EXPECT_NE(run.out.find("Requests completed / failed"), std::string::npos) << run.out;
    EXPECT_NE(run.out.find("20 / 0"), std::string::npos) << run.out;
    EXPECT_NE(run.out.find("TTFT"), std::string::npos);
  }
};
std::unique_ptr<testing::ServerProcess> BenchReplay::server_;

TEST_F(BenchReplay, MooncakeTrace) {
  ASSERT_TRUE(server_->ready()) << server_->error();
  const std::string out = temp_path(".json"), png = temp_path(".png");
  // time x0.1: the first 20 requests arrive over 0.3 s instead of 3 s.
  BenchRun b = run(common() + " --trace mooncake ../shared/traces/mooncake_conversation_trace.jsonl --time-scale 0.1" +
                   " --json " + out + " --plot " + png);
  ASSERT_EQ(b.exit_code, 0) << b.out;
  const json r = read_json(out);
  check_report(r, b);
  EXPECT_EQ(r["config"]["block_tokens"], 8);
  EXPECT_NE(r["workload"].get<std::string>().find("512 -> 8 tokens"), std::string::npos);
  // All 20 start with the trace's shared block 0: an infinite cache reuses part of them.
  const double hit = r["summary"]["prefix_hit_ratio_ideal"].get<double>();
  EXPECT_GT(hit, 0.0);
  EXPECT_LT(hit, 1.0);
  EXPECT_NE(b.out.find("Ideal prefix hit ratio"), std::string::npos);
  // The plot is a PNG.
  std::ifstream in(png, std::ios::binary);
  char magic[8] = {};
  in.read(magic, 8);
  EXPECT_EQ(std::string(magic + 1, 3), "PNG");
  std::remove(out.c_str());
  std::remove(png.c_str());
}

TEST_F(BenchReplay, AzureTrace) {
  ASSERT_TRUE(server_->ready()) << server_->error();
  const std::string out = temp_path(".json");
  // time x0.05: the first 20 requests arrive over 0.65 s instead of 13 s.
  BenchRun b = run(common() + " --trace azure ../shared/traces/azure_llm_inference_2023_conv.csv --time-scale 0.05" +
                   " --json " + out);
  ASSERT_EQ(b.exit_code, 0) << b.out;
  const json r = read_json(out);
  check_report(r, b);
  EXPECT_TRUE(r["summary"]["prefix_hit_ratio_ideal"].is_null());
  // Arrivals follow the trace: request 1 came 4.31 s after request 0, scaled by 0.05.
  EXPECT_NEAR(r["requests"][1]["arrival_s"].get<double>(), 4.314579 * 0.05, 1e-6);
  EXPECT_GE(r["requests"][19]["send_s"].get<double>(), 13.025 * 0.05 - 1e-3);
  std::remove(out.c_str());
}

TEST_F(BenchReplay, SyntheticClosedLoop) {
  ASSERT_TRUE(server_->ready()) << server_->error();
  const std::string out = temp_path(".json");
  BenchRun b = run("--url " + server_->base_url() +
                   " --tokenizer ../shared/models/stories260K.gguf --concurrency 4 --max-requests 12"
                   " --input-len uniform:16:64 --output-len 8 --no-progress --json " + out);
  ASSERT_EQ(b.exit_code, 0) << b.out;
  const json r = read_json(out);
  ASSERT_FALSE(r.is_discarded());
  EXPECT_EQ(r["summary"]["completed"], 12);
  EXPECT_EQ(r["summary"]["output_tokens"], 12 * 8);
  EXPECT_TRUE(r["summary"]["goodput"].is_null());  // no SLO given
  // Never more than 4 in flight: the 5th request is sent only after one finished.
  std::vector<std::pair<double, double>> spans;
  for (const json& q : r["requests"])
    spans.emplace_back(q["send_s"].get<double>(), q["send_s"].get<double>() + q["e2e_ms"].get<double>() / 1000);
  for (const auto& [s, e] : spans) {
    int overlapping = 0;
    for (const auto& [s2, e2] : spans) overlapping += s2 <= s && e2 > s;
    EXPECT_LE(overlapping, 4);
  }
  std::remove(out.c_str());
}

TEST(BenchErrors, UnreachableServerCountsFailures) {
  const int port = testing::free_port();
  const std::string out = temp_path(".json");
  BenchRun b = run("--url http://127.0.0.1:" + std::to_string(port) +
                   " --tokenizer ../shared/models/stories260K.gguf --max-requests 3 --input-len 8 --output-len 4"
                   " --no-progress --json " + out);
  EXPECT_EQ(b.exit_code, 3) << b.out;  // nothing completed
  const json r = read_json(out);
  ASSERT_FALSE(r.is_discarded());
  EXPECT_EQ(r["summary"]["completed"], 0);
  EXPECT_EQ(r["summary"]["failed"], 3);
  EXPECT_NE(r["requests"][0]["error"].get<std::string>().find("transfer failed"), std::string::npos);
  std::remove(out.c_str());
  // A bad trace format is a usage error.
  EXPECT_EQ(run("--tokenizer ../shared/models/stories260K.gguf --trace sharegpt x.json").exit_code, 1);
}

}  // namespace
}  // namespace pdserve
