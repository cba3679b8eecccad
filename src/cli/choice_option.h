// Enum-valued flags: the value names are parsed once, here at the CLI edge, and the
// engine, router and policies only ever see the enum.
#pragma once

#include <CLI/CLI.hpp>

#include <utility>
#include <vector>
#include <string>

#include "disagg/routing_policy.h"
#include "engine/scheduler.h"
#include "engine/spec_config.h"
#include "kv/kv_cache.h"
#include "kv/eviction_policy.h"
#include "kv/token_eviction.h"

namespace pdserve::cli {

/// An enum flag's values: (name, value) pairs in the order --help lists them.
template <typename E>
using Choices = std::vector<std::pair<std::string, E>>;

/// Adds option `flag` storing one of the enum values named in `choices` into `out`,
/// defaulting to `default_name`. Names match in any case; --help lists them, and another
/// value is refused with "FLAG: VALUE not in {name,...}".
template <typename E>
CLI::Option* add_choice_option(CLI::App& cmd, const std::string& flag, E& out, const Choices<E>& choices,
                               const std::string& help, const std::string& default_name) {
  // CLI11 runs transforms last-added first: the name check (which also folds the case),
  // then the mapping to the enum's value.
  return cmd.add_option(flag, out, help)
      ->transform(CLI::Transformer(choices).description(""))
      ->transform(CLI::IsMember(choices, CLI::ignore_case))
      ->default_val(default_name);
}

/// --kv-dtype values.
inline Choices<kernels::KvDtype> kv_dtype_choices() {
  Choices<kernels::KvDtype> m;
  for (kernels::KvDtype d : {kernels::KvDtype::F16, kernels::KvDtype::F32, kernels::KvDtype::BF16, kernels::KvDtype::Q8_0,
                             kernels::KvDtype::Q4_0})
    m.emplace_back(kv::kv_dtype_name(d), d);
  return m;
}

/// --eviction values.
inline Choices<kv::EvictionPolicy> eviction_choices() {
  return {{"lru", kv::EvictionPolicy::kLru}, {"lfu", kv::EvictionPolicy::kLfu}};
}

/// --kv-evict values.
inline Choices<kv::TokenEvictionPolicy> kv_evict_choices() {
  return {{"h2o", kv::TokenEvictionPolicy::kH2o}, {"streaming", kv::TokenEvictionPolicy::kStreaming}};
}

/// --scheduling-policy values.
inline Choices<engine::SchedulingPolicy> scheduling_choices() {
  return {{"fcfs", engine::SchedulingPolicy::kFcfs}, {"priority", engine::SchedulingPolicy::kPriority}};
}

/// --speculative values.
inline Choices<engine::SpecMethod> spec_choices() {
  Choices<engine::SpecMethod> m;
  for (engine::SpecMethod x : {engine::SpecMethod::kOff, engine::SpecMethod::kNgram, engine::SpecMethod::kLayerSkip,
                               engine::SpecMethod::kDraft})
    m.emplace_back(engine::spec_method_name(x), x);
  return m;
}

/// The router's --policy values.
inline Choices<disagg::RoutingPolicyKind> routing_choices() {
  Choices<disagg::RoutingPolicyKind> m;
  for (disagg::RoutingPolicyKind k : disagg::kRoutingPolicyKinds) m.emplace_back(disagg::name(k), k);
  return m;
}

}  // namespace pdserve::cli
