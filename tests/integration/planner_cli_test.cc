// `pdserve planner` as a command: --kubernetes prints one `kubectl scale` per pool with
// the replica counts of the decision it logged, against a router /metrics page served
// by the test (counters that grow by 20 arrivals per scrape: a steady load); and bad
// input — an infeasible budget, a profile that does not parse, a URL that is no
// pdserve server — is a one-line error with exit code 2.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include <httplib.h>

#include "planner/profile.h"
#include "planner/profiler.h"
#include "support/ports.h"
#include "support/server_process.h"

namespace pdserve::testing {
namespace {

struct CmdRun {
  int rc = -1;
  std::string out;
};

CmdRun run(const std::string& args) {
  CmdRun r;
  const std::string cmd = std::string(PDSERVE_BIN) + " planner " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = ::pclose(p);
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

class PlannerCli : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/pdserve-planner-cli-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    planner::Profile p;
    engine::EngineConfig ec;
    ec.model_path = kStoriesModel;
    p.model = planner::describe_model(ec);
    p.machine = {1, "test"};
    for (int q : {1, 64, 512}) p.prefill.push_back({q, 0, 0.001 * q});
    for (int b : {1, 8, 64})
      for (int ctx : {16, 512}) p.decode.push_back({b, ctx, 0.010 + 0.012 * b});
    p.transfer = {{1000, 0.0001}, {1000000, 0.01}};
    p.kv_bytes_per_token = 640;
    profile_ = dir_ + "/profile.json";
    std::ofstream(profile_) << planner::profile_to_json(p);
    srv_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      const int k = ++scrapes_;
      std::ostringstream o;
      o << "pdserve_router_class_requests_total{model_name=\"m\",slo_class=\"low\"} " << 20 * k << "\n"
        << "pdserve_router_class_finished_total{model_name=\"m\",slo_class=\"low\"} " << 20 * k << "\n"
        << "pdserve_router_class_prompt_tokens_total{model_name=\"m\",slo_class=\"low\"} " << 20 * k * 8 << "\n"
        << "pdserve_router_class_generation_tokens_total{model_name=\"m\",slo_class=\"low\"} " << 20 * k * 16 << "\n"
        << "pdserve_router_class_slo_attained_total{model_name=\"m\",slo_class=\"low\"} " << 20 * k << "\n";
      res.set_content(o.str(), "text/plain");
    });
    srv_.Get("/other/metrics", [](const httplib::Request&, httplib::Response& res) { res.set_content("up 1\n", "text/plain"); });
    port_ = srv_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { srv_.listen_after_bind(); });
  }
  void TearDown() override {
    srv_.stop();
    if (thread_.joinable()) thread_.join();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  std::string dir_, profile_;
  httplib::Server srv_;
  std::thread thread_;
  int port_ = 0;
  std::atomic<int> scrapes_{0};
};

TEST_F(PlannerCli, KubernetesPrintsTheLoggedPlanAsKubectlScale) {
  const std::string log = dir_ + "/decisions.jsonl";
  CmdRun r = run("--router " + url() + " --profile " + profile_ + " --model " + kStoriesModel +
              " --kubernetes --namespace ns1 --budget 6 --interval 0.2 --iterations 3 --decision-log " + log);
  ASSERT_EQ(r.rc, 0) << r.out;
  std::ifstream in(log);
  std::string line, last;
  int lines = 0;
  while (std::getline(in, line)) {
    last = line;
    ++lines;
  }
  ASSERT_EQ(lines, 3) << r.out;
  auto j = nlohmann::json::parse(last);
  const int p = j["plan"]["prefill"], d = j["plan"]["decode"];
  EXPECT_GE(d, 2) << last;  // ~100 req/s of 16 tokens: more than one decode instance's 5 req/s
  EXPECT_LE(p + d, 6);
  EXPECT_GT(j["objective_goodput"].get<double>(), 0);
  EXPECT_TRUE(j.contains("inputs") && j["inputs"]["classes"].size() == 1) << last;
  EXPECT_NE(r.out.find("kubectl scale deployment/pdserve-prefill --replicas=" + std::to_string(p) + " --namespace ns1"),
            std::string::npos) << r.out;
  EXPECT_NE(r.out.find("kubectl scale deployment/pdserve-decode --replicas=" + std::to_string(d) + " --namespace ns1"),
            std::string::npos) << r.out;
}

TEST_F(PlannerCli, DryRunPrintsNoCommands) {
  CmdRun r = run("--router " + url() + " --profile " + profile_ + " --interval 0.1 --iterations 2");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.out.find("kubectl"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("planner decision"), std::string::npos) << r.out;
}

TEST_F(PlannerCli, BadInputIsAOneLineError) {
  CmdRun budget = run("--router " + url() + " --profile " + profile_ + " --budget 1 --min-prefill 1 --iterations 1");
  EXPECT_EQ(budget.rc, 2);
  EXPECT_NE(budget.out.find("infeasible budget"), std::string::npos) << budget.out;

  std::ofstream(dir_ + "/bad.json") << "{\"format\": \"something-else\"}";
  CmdRun prof = run("--router " + url() + " --profile " + dir_ + "/bad.json --iterations 1");
  EXPECT_EQ(prof.rc, 2);
  EXPECT_NE(prof.out.find("pdserve-profile-v1"), std::string::npos) << prof.out;

  CmdRun other = run("--router " + url() + "/other --profile " + profile_ + " --iterations 1");
  EXPECT_EQ(other.rc, 2);
  EXPECT_NE(other.out.find("pdserve"), std::string::npos) << other.out;
}

}  // namespace
}  // namespace pdserve::testing
