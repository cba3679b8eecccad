// `pdserve planner`: the control loop of issue #15 — observe the router, forecast,
// solve the MIP, log the decision, act (dry run, local supervisor or kubectl), and
// expose the plan and predicted vs observed SLO attainment on --metrics-port.
#include <signal.h>

#include <httplib.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "base/log.h"
#include "base/prometheus_format.h"
#include "cli/commands.h"
#include "cli/planner_command.h"
#include "disagg/discovery_url.h"
#include "gateway/slo_class.h"
#include "planner/mip_goodput.h"
#include "planner/plan_controller.h"
#include "planner/plan_observer.h"
#include "planner/plan_profile_cost.h"
#include "planner/profile.h"
#include "planner/profiler.h"
#include "planner/supervisor.h"

namespace pdserve::cli {

void add_planner_command(CLI::App& app, PlannerArgs& a) {
  CLI::App* cmd = app.add_subcommand("planner", "size and scale the prefill/decode pools from the router's load (GLPK MIP)");
  cmd->add_option("--router", a.router, "the router's base URL, http://HOST:PORT (its /metrics is read)")->required();
  cmd->add_option("--profile", a.profile, "cost profile JSON (pdserve profile)")->required();
  cmd->add_option("--model,-m", a.model, "GGUF the supervised workers serve (--supervise)");
  cmd->add_option("--interval", a.interval_s, "seconds between decisions")->default_val(10)->check(kFinite & CLI::Range(0.05, 86400.0));
  cmd->add_option("--budget", a.budget, "instances (prefill + decode) at most")->default_val(4)->check(CLI::NonNegativeNumber);
  cmd->add_option("--min-prefill", a.min_prefill, "prefill instances at least")->default_val(0)->check(CLI::NonNegativeNumber);
  cmd->add_option("--min-decode", a.min_decode, "decode instances at least")->default_val(1)->check(CLI::PositiveNumber);
  cmd->add_option("--headroom", a.headroom, "plan for the forecast rate x (1 + headroom)")->default_val(0.2)->check(kFinite & CLI::Range(0.0, 10.0));
  cmd->add_option("--scale-down-after", a.scale_down_after, "intervals a smaller plan must suffice before scaling down")
      ->default_val(3)->check(CLI::PositiveNumber);
  cmd->add_option("--window", a.window, "intervals of the rate forecast (least-squares line)")->default_val(5)->check(CLI::PositiveNumber);
  cmd->add_option("--metrics-port", a.metrics_port, "HTTP port of the planner's /metrics (0: none)")->default_val(0)->check(CLI::Range(0, 65535));
  cmd->add_option("--metrics-host", a.metrics_host, "address of --metrics-port")->default_val("127.0.0.1");
  auto* dry = cmd->add_flag("--dry-run", a.dry_run, "only log the decisions (the default)");
  auto* sup = cmd->add_flag("--supervise", a.supervise, "start and stop local prefill/decode workers (needs --model, --discovery)");
  auto* k8s = cmd->add_flag("--kubernetes", a.kubernetes, "print kubectl scale commands for deploy/k8s (run them with --apply)");
  dry->excludes(sup)->excludes(k8s);
  sup->excludes(k8s);
  cmd->add_flag("--apply", a.apply, "--kubernetes: run the kubectl commands")->needs(k8s);
  cmd->add_option("--namespace", a.namespace_, "--kubernetes: the namespace of the deployments");
  cmd->add_option("--kubectl", a.kubectl, "--kubernetes: the kubectl binary")->default_val("kubectl");
  cmd->add_option("--discovery", a.discovery, "--supervise: etcd://HOST:PORT[/PREFIX] the workers register at (the router's --discovery)");
  cmd->add_option("--worker-args", a.worker_args, "--supervise: extra flags of every worker, space-separated (e.g. \"--threads 1\")");
  cmd->add_option("--log-dir", a.log_dir, "--supervise: directory of the worker logs (default: a temp dir)");
  cmd->add_option("--drain-timeout", a.drain_timeout, "--supervise: the workers' --drain-timeout (s)")->default_val(30)->check(CLI::NonNegativeNumber);
  cmd->add_option("--slo-ttft", a.slo_ttft, "TTFT target (s) of requests without an SLO class")->default_val(1.0)->check(kFinite & CLI::PositiveNumber);
  cmd->add_option("--slo-tpot", a.slo_tpot, "TPOT target (s) of requests without an SLO class")->default_val(0.1)->check(kFinite & CLI::PositiveNumber);
  cmd->add_option("--chunk-tokens", a.chunk_tokens, "prefill tokens per step of an instance (its --max-batched-tokens)")
      ->default_val(2048)->check(CLI::PositiveNumber);
  cmd->add_option("--max-seqs", a.max_seqs, "decode batch bound of an instance (its --max-seqs)")->default_val(64)->check(CLI::PositiveNumber);
  cmd->add_option("--iterations", a.iterations, "stop after N decisions (0: run until SIGINT/SIGTERM)")->default_val(0)->check(CLI::NonNegativeNumber);
  cmd->add_option("--decision-log", a.decision_log, "also append every decision as one JSON line to this file");
}

namespace {

using planner::InstanceState;
using planner::PlanDecision;
using planner::PlanResult;

// What /metrics shows; guarded by mu.
struct PlannerState {
  std::mutex mu;
  PlanResult plan;
  bool has_plan = false;
  double predicted = -1, observed = -1, demand = 0, goodput = 0;
  std::map<std::string, double> forecast;
  std::map<std::string, int64_t> actions;
  int running_prefill = 0, running_decode = 0;
  int64_t errors = 0;

  std::string text() {
    std::lock_guard<std::mutex> lk(mu);
    std::ostringstream o;
    auto num = [](double v) { return prometheus_number(v); };
    auto g = [&](const char* name, const char* help, double v) {
      o << "# HELP " << name << " " << help << "\n# TYPE " << name << " gauge\n" << name << " " << num(v) << "\n";
    };
    if (has_plan) {
      g("pdserve_planner_prefill_instances", "Prefill instances of the plan in force.", plan.prefill);
      g("pdserve_planner_decode_instances", "Decode instances of the plan in force.", plan.decode);
      g("pdserve_planner_remote_prefill_threshold", "Conditional-disaggregation threshold of the plan (uncached tokens; +Inf: never remote).",
        plan.threshold);
      g("pdserve_planner_objective_goodput", "The MIP's objective for the plan: requests/s within SLO (forecast load + headroom).", goodput);
    }
    g("pdserve_planner_demand_forecast", "Forecast arrivals/s, all classes.", demand);
    g("pdserve_planner_predicted_slo_attainment", "The plan's predicted share of requests within SLO at the forecast load (-1: none yet).",
      predicted);
    g("pdserve_planner_observed_slo_attainment", "Share of the router's requests finished within SLO in the last interval (-1: none).", observed);
    g("pdserve_planner_running_prefill", "Supervised prefill workers running (not draining).", running_prefill);
    g("pdserve_planner_running_decode", "Supervised decode workers running (not draining).", running_decode);
    o << "# HELP pdserve_planner_class_rate_forecast Forecast arrivals/s by SLO class.\n# TYPE pdserve_planner_class_rate_forecast gauge\n";
    for (const auto& [c, v] : forecast) o << "pdserve_planner_class_rate_forecast{slo_class=\"" << prometheus_label_escape(c) << "\"} " << num(v) << "\n";
    o << "# HELP pdserve_planner_decisions_total Decisions by action.\n# TYPE pdserve_planner_decisions_total counter\n";
    for (const auto& [k, v] : actions) o << "pdserve_planner_decisions_total{action=\"" << k << "\"} " << v << "\n";
    o << "# HELP pdserve_planner_errors_total Intervals without a decision (router unreachable, solver error).\n"
         "# TYPE pdserve_planner_errors_total counter\npdserve_planner_errors_total "
      << errors << "\n";
    return o.str();
  }
};

std::vector<std::string> split_words(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

nlohmann::json plan_json(const PlanResult& p, const std::vector<planner::ClassDemand>& classes) {
  nlohmann::json j = {{"prefill", p.prefill}, {"decode", p.decode}, {"goodput", p.total_goodput}, {"demand", p.demand}};
  j["threshold"] = std::isinf(p.threshold) ? nlohmann::json("inf") : nlohmann::json(p.threshold);
  nlohmann::json pools = nlohmann::json::object();
  for (size_t i = 0; i < classes.size() && i < p.pools.size(); ++i)
    pools[classes[i].name] = {{"pool", planner::pool_choice_name(p.pools[i])}, {"goodput", p.goodput[i]}};
  j["classes"] = pools;
  j["keep"] = p.keep;
  if (!p.notes.empty()) j["notes"] = p.notes;
  return j;
}

// The instances of a plan as an InstanceState list (dry run / kubernetes: nothing to scrape).
std::vector<InstanceState> plan_instances(const PlanResult& p) {
  std::vector<InstanceState> v;
  for (int i = 0; i < p.prefill; ++i) v.push_back({"prefill-" + std::to_string(i), InstanceState::Role::Prefill, 0});
  for (int i = 0; i < p.decode; ++i) v.push_back({"decode-" + std::to_string(i), InstanceState::Role::Decode, 0});
  return v;
}

}  // namespace

int run_planner(const PlannerArgs& a) {
  planner::Profile profile;
  try {
    profile = planner::load_profile(a.profile);
    if (!a.model.empty()) {  // the workers' model (default engine settings) must be the profile's
      engine::EngineConfig ec;
      ec.model_path = a.model;
      planner::check_profile_matches(profile, planner::describe_model(ec));
    }
  } catch (const std::exception& e) {  // a bad file, not a bad flag: exit 1, as `pdserve simulate`
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  if (a.router.rfind("http://", 0) != 0) {
    std::fprintf(stderr, "error: --router must be http://HOST:PORT, got '%s'\n", a.router.c_str());
    return 2;
  }
  if (a.supervise) {
    if (a.model.empty()) {
      std::fprintf(stderr, "error: --supervise needs --model (the GGUF the workers serve)\n");
      return 2;
    }
    auto d = disagg::parse_discovery_url(a.discovery);
    if (!d.ok() || d.value().kind != disagg::DiscoveryUrl::Kind::Etcd) {
      std::fprintf(stderr, "error: --supervise needs --discovery etcd://HOST:PORT[/PREFIX] (the router's)%s%s\n", d.ok() ? "" : ": ",
                   d.ok() ? "" : d.error().c_str());
      return 2;
    }
  }
  if (a.min_prefill + a.min_decode > a.budget) {
    std::fprintf(stderr, "error: infeasible budget: --budget %d cannot hold --min-prefill %d + --min-decode %d instances\n", a.budget,
                 a.min_prefill, a.min_decode);
    return 2;
  }
  std::unique_ptr<std::ofstream> decision_log;
  if (!a.decision_log.empty()) {
    decision_log = std::make_unique<std::ofstream>(a.decision_log, std::ios::app);
    if (!*decision_log) {
      std::fprintf(stderr, "error: cannot open --decision-log %s\n", a.decision_log.c_str());
      return 2;
    }
  }

  // SIGINT/SIGTERM end the loop (sigtimedwait below); the workers unblock them again.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  PlannerState state;
  std::unique_ptr<httplib::Server> http;
  std::thread http_thread;
  if (a.metrics_port > 0) {
    http = std::make_unique<httplib::Server>();
    http->Get("/metrics", [&](const httplib::Request&, httplib::Response& res) { res.set_content(state.text(), "text/plain; version=0.0.4"); });
    http->Get("/health", [](const httplib::Request&, httplib::Response& res) { res.set_content("{\"status\":\"ok\"}", "application/json"); });
    if (!http->bind_to_port(a.metrics_host, a.metrics_port)) {
      std::fprintf(stderr, "error: cannot listen on %s:%d\n", a.metrics_host.c_str(), a.metrics_port);
      return 1;
    }
    http_thread = std::thread([&] { http->listen_after_bind(); });
  }

  std::unique_ptr<planner::Supervisor> sup;
  if (a.supervise) {
    planner::SupervisorConfig sc;
    sc.model = a.model;
    sc.discovery = a.discovery;
    sc.worker_args = split_words(a.worker_args);
    sc.log_dir = a.log_dir;
    sc.drain_timeout_s = a.drain_timeout;
    sup = std::make_unique<planner::Supervisor>(sc);
  }
  const char* mode = a.supervise ? "supervise" : a.kubernetes ? "kubernetes" : "dry-run";
  PDS_LOG_INFO("planner: {} mode, router {}, profile {}, budget {}, interval {} s", mode, a.router, a.profile, a.budget, a.interval_s);

  planner::ProfileCostModel cost(profile);
  planner::PlanController ctl(planner::ControllerConfig{a.headroom, a.scale_down_after, 1e-6});
  planner::Observer observer(a.window);
  const auto policies = gateway::default_class_policies();
  std::vector<InstanceState> last_plan_instances;
  int rc = 0;
  for (int iter = 0; a.iterations == 0 || iter < a.iterations; ++iter) {
    if (iter > 0) {
      timespec ts{static_cast<time_t>(a.interval_s), static_cast<long>((a.interval_s - std::floor(a.interval_s)) * 1e9)};
      if (sigtimedwait(&set, nullptr, &ts) > 0) break;
    }
    const double t = now_s();
    auto page = planner::http_get(a.router + "/metrics");
    planner::Observation obs;
    if (page.ok()) {
      auto sample = planner::parse_router_sample(page.value(), t);
      if (!sample.ok()) {
        std::fprintf(stderr, "error: %s: %s\n", a.router.c_str(), sample.error().c_str());
        rc = 2;
        break;
      }
      obs = observer.add(sample.value());
    } else if (iter == 0 && !sup) {  // nothing observed: no decision to log or print on no data
      std::fprintf(stderr, "error: cannot read the router's metrics: %s\n", page.error().c_str());
      rc = 1;
      break;
    } else {
      PDS_LOG_WARN("planner: {}", page.error());
      std::lock_guard<std::mutex> lk(state.mu);
      state.errors++;
      // Keep the plan in force. --supervise at start: the router opens its port once a
      // worker registers, so start the minimum fleet (the plan for no load).
      if (iter > 0) continue;
    }
    planner::PlanInput in;
    in.cost = &cost;
    in.shape.chunk_tokens = a.chunk_tokens;
    in.shape.max_seqs = a.max_seqs;
    in.budget = a.budget;
    in.min_prefill = a.min_prefill;
    in.min_decode = a.min_decode;
    for (const auto& [name, co] : obs.classes) {
      planner::ClassDemand d;
      d.name = name;
      d.rate = co.forecast;
      d.input_tokens = co.input_tokens;
      d.output_tokens = co.output_tokens;
      d.cached_fraction = obs.cached_fraction;
      auto cls = gateway::parse_slo_class(name);
      d.ttft_slo_s = cls ? policies[static_cast<int>(*cls)].ttft_s : a.slo_ttft;
      d.tpot_slo_s = cls ? policies[static_cast<int>(*cls)].tpot_s : a.slo_tpot;
      in.classes.push_back(d);
    }
    in.current = sup ? sup->instances() : last_plan_instances;
    auto dec = ctl.step(in);
    if (!dec.ok()) {
      PDS_LOG_ERROR("planner: {}", dec.error());
      std::lock_guard<std::mutex> lk(state.mu);
      state.errors++;
      continue;
    }
    const PlanDecision& d = dec.value();
    // Predicted attainment of the plan at the forecast load itself (no headroom).
    planner::PlanInput at = in;
    at.fixed_prefill = d.plan.prefill;
    at.fixed_decode = d.plan.decode;
    auto pred = planner::solve_plan(at);
    const double predicted = pred.ok() ? pred.value().attainment() : -1;

    std::vector<std::string> actions;
    if (sup) {
      actions = sup->apply(d.plan);
    } else if (a.kubernetes) {
      for (auto [dep, n] : {std::pair{"pdserve-prefill", d.plan.prefill}, std::pair{"pdserve-decode", d.plan.decode}}) {
        std::string cmdline = a.kubectl + " scale deployment/" + dep + " --replicas=" + std::to_string(n);
        if (!a.namespace_.empty()) cmdline += " --namespace " + a.namespace_;
        std::printf("%s\n", cmdline.c_str());
        std::fflush(stdout);
        if (a.apply) {
          const int st = std::system(cmdline.c_str());
          actions.push_back(cmdline + " (exit " + std::to_string(st) + ")");
        } else {
          actions.push_back(cmdline + " (printed)");
        }
      }
    }
    last_plan_instances = plan_instances(d.plan);

    nlohmann::json j;
    j["interval"] = iter;
    j["action"] = planner::action_name(d.action);
    j["reason"] = d.reason;
    nlohmann::json inputs = nlohmann::json::array();
    for (const auto& c : in.classes) {
      const auto& co = obs.classes[c.name];
      inputs.push_back({{"class", c.name}, {"observed_rate", co.rate}, {"forecast_rate", c.rate}, {"input_tokens", c.input_tokens},
                        {"output_tokens", c.output_tokens}, {"cached_fraction", c.cached_fraction}, {"ttft_slo_s", c.ttft_slo_s},
                        {"tpot_slo_s", c.tpot_slo_s}});
    }
    j["inputs"] = {{"classes", inputs}, {"budget", a.budget}, {"headroom", a.headroom}, {"current", in.current.size()}};
    j["objective_goodput"] = d.plan.total_goodput;
    j["plan"] = plan_json(d.plan, in.classes);
    j["optimum"] = plan_json(d.optimum, in.classes);
    j["predicted_attainment"] = predicted;
    j["observed_attainment"] = obs.attainment;
    j["actions"] = actions;
    const std::string line = j.dump();
    PDS_LOG_INFO("planner decision: {}", line);
    if (decision_log) {
      *decision_log << line << "\n";
      decision_log->flush();
    }
    {
      std::lock_guard<std::mutex> lk(state.mu);
      state.plan = d.plan;
      state.has_plan = true;
      state.predicted = predicted;
      state.observed = obs.attainment;
      state.goodput = d.plan.total_goodput;
      state.demand = 0;
      state.forecast.clear();
      for (const auto& c : in.classes) {
        state.demand += c.rate;
        state.forecast[c.name] = c.rate;
      }
      state.actions[planner::action_name(d.action)]++;
      if (sup) {
        state.running_prefill = state.running_decode = 0;
        for (const auto& w : sup->workers())
          if (!w.draining) (w.role == InstanceState::Role::Prefill ? state.running_prefill : state.running_decode)++;
      }
    }
  }
  PDS_LOG_INFO("planner: stopping");
  if (sup) sup->stop_all();
  if (http) {
    http->stop();
    http_thread.join();
  }
  return rc;
}

}  // namespace pdserve::cli
