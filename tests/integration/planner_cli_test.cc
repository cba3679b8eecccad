// `pdserve planner` as a command: --kubernetes prints one `kubectl scale` per pool with
// the replica counts of the decision it logged, against a router /metrics page served
// by the test (counters that grow by 20 arrivals per scrape: a steady load); and bad
// input is a one-line error: an infeasible budget or a URL that is no pdserve server
// exit 2, a profile that does not parse exits 1 (a bad file, as `pdserve simulate`).
#include <gtest/gtest.h>

#include <algorithm>
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
#include "support/pdserve_bin.h"

namespace pdserve::testing {
namespace {

struct CmdRun {
  int rc = -1;
  std::string out;
};

CmdRun run(const std::string& args, const char* sub = "planner") {
  CmdRun r;
  const std::string cmd = testing::pdserve_bin() + " " + sub + " " + args + " 2>&1";
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
  EXPECT_EQ(prof.rc, 1);
  EXPECT_NE(prof.out.find("pdserve-profile-v1"), std::string::npos) << prof.out;
  // `pdserve simulate` says the same about the same file, with the same exit code.
  CmdRun sim = run("--profile " + dir_ + "/bad.json -m " + kStoriesModel + " --rate 1 --colocated 1", "simulate");
  EXPECT_EQ(sim.rc, prof.rc) << sim.out;
  EXPECT_EQ(sim.out, prof.out);

  CmdRun other = run("--router " + url() + "/other --profile " + profile_ + " --iterations 1");
  EXPECT_EQ(other.rc, 2);
  EXPECT_NE(other.out.find("pdserve"), std::string::npos) << other.out;
}

// A router that does not answer: no decision is made (or logged) on no data.
TEST_F(PlannerCli, UnreachableRouterIsAnError) {
  CmdRun r = run("--router http://127.0.0.1:" + std::to_string(free_port()) + " --profile " + profile_ + " --iterations 1");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("error: cannot read the router's metrics: "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("planner decision"), std::string::npos) << r.out;
}

// `pdserve simulate`'s usage errors are the parser's kind: one line naming the flag,
// "(see 'pdserve simulate --help')", exit 2.
TEST_F(PlannerCli, SimulateUsageErrorsAreOneLineWithExitCodeTwo) {
  const std::string base = "--profile " + profile_ + " -m " + kStoriesModel + " --rate 5 --max-requests 5 ";
  const struct {
    std::string args, expect;
  } cases[] = {
      {base, "error: no instances: give --colocated K, --prefill N --decode M, or --plan BUDGET"},
      {base + "--colocated 1 --decode 1", "error: --colocated excludes --prefill/--decode"},
      {base + "--plan 2", "error: --plan needs the SLO it plans for"},
      {base + "--plan 1 --min-prefill 1 --slo-ttft 100", "error: infeasible budget: --plan 1 cannot hold --min-prefill 1"},
      // An unknown flag is named, even when a required one is missing too.
      {"--bogus", "error: The following argument was not expected: --bogus"},
      {base + "--colocated abc", "error: --colocated: value abc is not a whole number"},
      {base + "--prefill 1.5 --decode 1", "error: --prefill: value 1.5 is not a whole number"},
  };
  for (const auto& c : cases) {
    CmdRun r = run(c.args, "simulate");
    EXPECT_EQ(r.rc, 2) << c.args << ": " << r.out;
    EXPECT_EQ(r.out.rfind(c.expect, 0), 0u) << c.args << ": " << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << c.args << ": " << r.out;
    EXPECT_NE(r.out.find("(see 'pdserve simulate --help')"), std::string::npos) << r.out;
  }
}

// `simulate --plan N` runs the MIP's plan: the same as simulating that fleet given by
// hand; `--replan-interval` re-plans inside the simulation, starting from the minimum
// and scaling up under a load above one instance's capacity, within the budget.
TEST_F(PlannerCli, SimulatePlanRunsTheMipsChoice) {
  const std::string base = "--profile " + profile_ + " -m " + kStoriesModel +
                           " --rate 40 --input-len 8 --output-len 16 --max-requests 400 --slo-ttft 1000 --slo-tpot 100 ";
  CmdRun planned = run(base + "--plan 6 --json " + dir_ + "/plan.json", "simulate");
  ASSERT_EQ(planned.rc, 0) << planned.out;
  EXPECT_NE(planned.out.find("Plan (GLPK MIP, budget 6): "), std::string::npos) << planned.out;
  auto j = nlohmann::json::parse(std::ifstream(dir_ + "/plan.json"));
  const int p = j["plan"]["prefill"], d = j["plan"]["decode"];
  ASSERT_GE(d, 2) << j["plan"].dump();  // 40 req/s: more than one instance's worth
  ASSERT_LE(p + d, 6);
  std::string fleet = p == 0 ? "--colocated " + std::to_string(d)
                             : "--prefill " + std::to_string(p) + " --decode " + std::to_string(d) +
                                   " --remote-prefill-threshold " +
                                   (j["plan"]["threshold"].is_string() ? std::string("1073741824")
                                                                       : std::to_string(static_cast<int>(j["plan"]["threshold"].get<double>())));
  CmdRun by_hand = run(base + fleet + " --json " + dir_ + "/hand.json", "simulate");
  ASSERT_EQ(by_hand.rc, 0) << by_hand.out;
  auto h = nlohmann::json::parse(std::ifstream(dir_ + "/hand.json"));
  EXPECT_EQ(j["summary"]["good_requests"], h["summary"]["good_requests"]);
  EXPECT_DOUBLE_EQ(j["summary"]["ttft_ms"]["p50"].get<double>(), h["summary"]["ttft_ms"]["p50"].get<double>());

  CmdRun el = run(base + "--plan 6 --replan-interval 1 --json " + dir_ + "/elastic.json", "simulate");
  ASSERT_EQ(el.rc, 0) << el.out;
  auto e = nlohmann::json::parse(std::ifstream(dir_ + "/elastic.json"));
  ASSERT_GE(e["intervals"].size(), 5u) << el.out;
  EXPECT_EQ(e["intervals"][0]["action"], "start");
  int most = 0;
  for (const auto& row : e["intervals"]) {
    const int n = row["prefill"].get<int>() + row["decode"].get<int>();
    EXPECT_LE(n, 6) << row.dump();
    most = std::max(most, n);
  }
  EXPECT_GE(most, 2) << el.out;
  EXPECT_EQ(e["summary"]["completed"], 400);
}

}  // namespace
}  // namespace pdserve::testing
