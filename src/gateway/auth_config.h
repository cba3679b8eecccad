// The gateway's auth file (`--auth-file FILE`, JSON): API keys (stored as SHA-256 hex)
// mapped to tenants, SLO classes, rate limits, prefix-cache namespaces and allowed models,
// plus the SLO classes' targets and queue limits. Format:
//
//   {
//     "classes": {"high": {"ttft_ms": 300, "tpot_ms": 50, "max_queue": 64, "max_queue_ms": 2000},
//                 "medium": {...}, "low": {...}},                // optional; defaults: slo_class.h
//     "prefill_classes": {"medium_from": 256, "large_from": 2048}, // optional
//     "tenants": {
//       "acme": {"slo_class": "medium",                // default class of its keys
//                "allowed_slo_classes": ["high", "low"], // a request's `slo_class` may pick these
//                                                       // (and always its key's and its tenant's class)
//                "limits": {"requests_per_minute": 600, "tokens_per_minute": 100000, "max_concurrent": 16},
//                "models": ["stories260K"],            // absent ⇒ every model
//                "share_cache_group": "g1"}            // tenants naming one group share prefix-cache blocks
//     },
//     "keys": [{"key_sha256": "<64 hex>", "tenant": "acme", "name": "ci",   // name: for logs
//               "slo_class": "low", "allowed_slo_classes": [...], "limits": {...}, "models": [...]}]
//   }
//
// A key's own limits are a separate bucket from its tenant's (both apply). `pdserve
// hash-key KEY` prints the hash of a key.
#pragma once

#include <array>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/sha256.h"
#include "base/status.h"
#include "gateway/rate_limiter.h"
#include "gateway/slo_class.h"

namespace pdserve::gateway {

struct TenantConfig {
  std::string name;
  SloClass slo_class = SloClass::kMedium;
  std::vector<SloClass> allowed_classes;  // besides slo_class
  Limits limits;
  std::vector<std::string> models;        // empty ⇒ all
  std::string cache_group;                // "" ⇒ its own namespace
  /// The prefix-cache namespace of this tenant's requests.
  std::string cache_salt() const { return cache_group.empty() ? "tenant:" + name : "group:" + cache_group; }
};

struct KeyConfig {
  pdserve::Sha256Digest hash{};
  std::string hash_hex;
  std::string name;    // for logs and metrics ("" ⇒ the hash's first 8 hex digits)
  std::string tenant;
  SloClass slo_class = SloClass::kMedium;  // resolved: the key's, else the tenant's
  std::vector<SloClass> allowed_classes;   // resolved: the key's list, else the tenant's, plus
                                           // the key's slo_class and the tenant's slo_class
  Limits limits;
  std::vector<std::string> models;         // resolved: the key's, else the tenant's (empty ⇒ all)
  int line = 0;                            // where the key is in the file (1-based)
  bool allows_model(const std::string& m) const;
  bool allows_class(SloClass c) const;
};

struct AuthConfig {
  std::map<std::string, TenantConfig> tenants;
  std::vector<KeyConfig> keys;
  std::array<ClassPolicy, kNumSloClasses> classes = default_class_policies();
  PrefillThresholds prefill;
  const ClassPolicy& policy(SloClass c) const { return classes[static_cast<size_t>(c)]; }
};

/// Parses the JSON text of an auth file. Errors (InvalidArgument) name `source` and the
/// 1-based line: a JSON syntax error's (from nlohmann's byte offset), or the line of the
/// offending entry for a bad field (an unknown tenant or class, a hash that is not 64 hex
/// digits, a duplicate key, a negative limit).
Result<std::shared_ptr<const AuthConfig>> parse_auth_config(const std::string& text, const std::string& source);
/// Reads and parses `path`.
Result<std::shared_ptr<const AuthConfig>> load_auth_file(const std::string& path);

/// Lower-case hex SHA-256 of an API key (what the file stores).
std::string hash_api_key(const std::string& key);

/// 1-based line of byte `offset` in `text`.
int line_of_offset(const std::string& text, size_t offset);

}  // namespace pdserve::gateway
