// `pdserve router`: the OpenAI HTTP API in front of decode workers (no inference here):
// tokenizes with the model's vocabulary, routes each choice to a decode worker by the
// chosen policy and streams its output back, resuming on another worker if one dies.
#include <cstdio>

#include "base/log.h"
#include "cli/choice_option.h"
#include "cli/commands.h"
#include "disagg/discovery_url.h"
#include "disagg/router_engine.h"
#include "disagg/worker_client.h"
#include "server/http_server.h"

namespace pdserve::cli {

void add_router_command(CLI::App& app, RouterArgs& a) {
  CLI::App* cmd = app.add_subcommand("router", "route OpenAI API requests to decode workers (PD disaggregation)");
  cmd->add_option("--model,-m", a.model, "GGUF file of the served model (its vocabulary is loaded; decode workers of another vocabulary or, unless the file has no tensors, other weights are not used)")->required();
  cmd->add_option("--model-name", a.model_name, "model id for /v1/models (default: the workers' name)");
  add_http_options(*cmd, a.http);
  cmd->add_option("--decode", a.decode, "decode workers HOST:PORT[,HOST:PORT...] (gRPC; or --discovery)");
  cmd->add_option("--discovery", a.discovery, "find decode workers: etcd://HOST:PORT[/PREFIX] or dns://NAME:PORT");
  add_grpc_tuning_options(*cmd, a.grpc);
  cmd->add_option("--decode-long", a.decode_long, "decode workers for long prompts (policy length)");
  cmd->add_option("--prefill", a.prefill, "prefill workers (informational: decode workers own their prefill list)");
  add_choice_option(*cmd, "--policy", a.policy, routing_choices(), "routing policy", "least_load");
  cmd->add_option("--long-prompt-threshold", a.long_prompt_threshold, "policy length: prompts longer than this many tokens go to --decode-long")
      ->default_val(1024)->check(CLI::NonNegativeNumber);
  cmd->add_option("--prefix-blocks", a.prefix_blocks, "policy prefix_affinity: prompt blocks hashed for the key")->default_val(2)->check(CLI::PositiveNumber);
  cmd->add_option("--block-size", a.block_size, "policy prefix_affinity: tokens per block")->default_val(16)->check(CLI::PositiveNumber);
  cmd->add_option("--health-interval-ms", a.health_interval_ms, "how often each worker's Health and Load are polled")->default_val(500)->check(CLI::PositiveNumber);
  cmd->add_option("--max-attempts", a.max_attempts, "Generate calls per choice before giving up (0: 2 x workers + 2)")->default_val(0)->check(CLI::NonNegativeNumber);
}

int run_router(const RouterArgs& a) {
  if (int rc = check_auth_file(a.http)) return rc;  // before the vocabulary loads
  disagg::RouterConfig cfg;
  cfg.model_path = a.model;
  cfg.model_name = a.model_name;
  for (auto [flag, list, out] : {std::tuple{"--decode", &a.decode, &cfg.decode},
                                 std::tuple{"--decode-long", &a.decode_long, &cfg.decode_long},
                                 std::tuple{"--prefill", &a.prefill, &cfg.prefill}}) {
    for (const auto& item : *list) {
      auto parsed = disagg::parse_address_list(item);
      if (!parsed.ok()) {
        std::fprintf(stderr, "error: %s: %s\n", flag, parsed.error().c_str());
        return 2;
      }
      out->insert(out->end(), parsed.value().begin(), parsed.value().end());
    }
  }
  auto disc = disagg::parse_discovery_url(a.discovery);
  if (!disc.ok()) {
    std::fprintf(stderr, "error: %s\n", disc.error().c_str());
    return 2;
  }
  if (disc.value().kind == disagg::DiscoveryUrl::Kind::None && cfg.decode.empty() && cfg.decode_long.empty()) {
    std::fprintf(stderr, "error: the router needs --decode or --discovery\n");
    return 2;
  }
  cfg.discovery = disc.value();
  disagg::set_grpc_tuning(a.grpc);
  cfg.policy.kind = a.policy;
  cfg.policy.long_prompt_threshold = a.long_prompt_threshold;
  cfg.policy.prefix_blocks = a.prefix_blocks;
  cfg.policy.block_size = a.block_size;
  cfg.health_interval = std::chrono::milliseconds(a.health_interval_ms);
  cfg.limits.max_attempts = a.max_attempts;
  if (a.policy == disagg::RoutingPolicyKind::kLength && cfg.decode_long.empty())
    PDS_LOG_WARN("policy length without --decode-long: every prompt goes to --decode");
  auto router = disagg::RouterEngine::create(std::move(cfg));
  if (!router.ok()) {
    std::fprintf(stderr, "error: %s\n", router.error().c_str());
    return 1;
  }
  return serve_http(*router.value(), a.http);
}

}  // namespace pdserve::cli
