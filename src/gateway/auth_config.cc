#include "gateway/auth_config.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

namespace pdserve::gateway {
namespace {

using nlohmann::json;

/// Start offsets of the children (array elements or object members) of the top-level
/// member `name` of a JSON object text, in order. The text is valid JSON (parsed before).
std::vector<size_t> child_offsets(const std::string& text, const std::string& name) {
  std::vector<size_t> out;
  int depth = 0;
  bool in_string = false, target = false, want_child = false;
  size_t str_start = 0;
  std::string last_string;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
        last_string = text.substr(str_start + 1, i - str_start - 1);
      }
      continue;
    }
    if (std::isspace(static_cast<unsigned char>(c))) continue;
    if (target && want_child && depth == 2 && c != ']' && c != '}') {
      out.push_back(i);
      want_child = false;
    }
    switch (c) {
      case '"':
        in_string = true;
        str_start = i;
        break;
      case ':':
        if (depth == 1) target = last_string == name;
        break;
      case '{':
      case '[':
        ++depth;
        if (depth == 2 && target) want_child = true;
        break;
      case '}':
      case ']':
        if (depth == 2 && target) return out;
        --depth;
        break;
      case ',':
        if (depth == 2 && target) want_child = true;
        break;
      default:
        break;
    }
  }
  return out;
}

struct Ctx {
  const std::string& source;
  const std::string& text;
  Status error(int line, const std::string& what) const {
    return Status::InvalidArgument(source + ":" + std::to_string(line) + ": " + what);
  }
};

Status read_limits(const Ctx& c, int line, const json& j, Limits& out) {
  if (!j.is_object()) return c.error(line, "'limits' must be an object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!it.value().is_number() || it.value().get<double>() < 0)
      return c.error(line, "limit '" + it.key() + "' must be a number >= 0");
    const double v = it.value().get<double>();
    if (it.key() == "requests_per_minute") out.requests_per_minute = v;
    else if (it.key() == "tokens_per_minute") out.tokens_per_minute = v;
    else if (it.key() == "max_concurrent") out.max_concurrent = static_cast<int>(v);
    else return c.error(line, "unknown limit '" + it.key() + "' (requests_per_minute, tokens_per_minute, max_concurrent)");
  }
  return Status::Ok();
}

Status read_class(const Ctx& c, int line, const json& j, const char* field, SloClass& out) {
  if (!j.is_string()) return c.error(line, std::string("'") + field + "' must be a string");
  auto cls = parse_slo_class(j.get<std::string>());
  if (!cls) return c.error(line, std::string("'") + field + "': unknown SLO class '" + j.get<std::string>() + "' (high, medium, low)");
  out = *cls;
  return Status::Ok();
}

Status read_classes(const Ctx& c, int line, const json& j, std::vector<SloClass>& out) {
  if (!j.is_array()) return c.error(line, "'allowed_slo_classes' must be an array of class names");
  for (const auto& e : j) {
    SloClass cls;
    if (Status s = read_class(c, line, e, "allowed_slo_classes", cls); !s.ok()) return s;
    out.push_back(cls);
  }
  return Status::Ok();
}

Status read_models(const Ctx& c, int line, const json& j, std::vector<std::string>& out) {
  if (!j.is_array()) return c.error(line, "'models' must be an array of model ids");
  for (const auto& e : j) {
    if (!e.is_string()) return c.error(line, "'models' must be an array of model ids");
    out.push_back(e.get<std::string>());
  }
  return Status::Ok();
}

Status read_tenant(const Ctx& c, int line, const std::string& name, const json& j, TenantConfig& t) {
  if (!j.is_object()) return c.error(line, "tenant '" + name + "' must be an object");
  t.name = name;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    Status s;
    if (k == "slo_class") s = read_class(c, line, it.value(), "slo_class", t.slo_class);
    else if (k == "allowed_slo_classes") s = read_classes(c, line, it.value(), t.allowed_classes);
    else if (k == "limits") s = read_limits(c, line, it.value(), t.limits);
    else if (k == "models") s = read_models(c, line, it.value(), t.models);
    else if (k == "share_cache_group") {
      if (!it.value().is_string() || it.value().get<std::string>().empty())
        return c.error(line, "'share_cache_group' must be a non-empty string");
      t.cache_group = it.value().get<std::string>();
    } else {
      return c.error(line, "tenant '" + name + "': unknown field '" + k + "'");
    }
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

bool is_hex64(const std::string& s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char ch) { return std::isxdigit(static_cast<unsigned char>(ch)); });
}

Status read_key(const Ctx& c, int line, const json& j, const AuthConfig& cfg, KeyConfig& k) {
  if (!j.is_object()) return c.error(line, "each entry of 'keys' must be an object");
  bool have_class = false, have_models = false, have_hash = false;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& f = it.key();
    Status s;
    if (f == "key_sha256") {
      if (!it.value().is_string() || !is_hex64(it.value().get<std::string>()))
        return c.error(line, "'key_sha256' must be 64 hex digits (pdserve hash-key KEY prints it)");
      k.hash_hex = it.value().get<std::string>();
      std::transform(k.hash_hex.begin(), k.hash_hex.end(), k.hash_hex.begin(), [](unsigned char ch) { return std::tolower(ch); });
      for (size_t i = 0; i < 32; ++i) k.hash[i] = static_cast<uint8_t>(std::stoi(k.hash_hex.substr(2 * i, 2), nullptr, 16));
      have_hash = true;
    } else if (f == "tenant" || f == "name") {
      if (!it.value().is_string() || it.value().get<std::string>().empty()) return c.error(line, "'" + f + "' must be a non-empty string");
      (f == "tenant" ? k.tenant : k.name) = it.value().get<std::string>();
    } else if (f == "slo_class") {
      s = read_class(c, line, it.value(), "slo_class", k.slo_class);
      have_class = true;
    } else if (f == "allowed_slo_classes") {
      s = read_classes(c, line, it.value(), k.allowed_classes);
    } else if (f == "limits") {
      s = read_limits(c, line, it.value(), k.limits);
    } else if (f == "models") {
      s = read_models(c, line, it.value(), k.models);
      have_models = true;
    } else {
      return c.error(line, "key: unknown field '" + f + "'");
    }
    if (!s.ok()) return s;
  }
  if (!have_hash) return c.error(line, "key without 'key_sha256'");
  if (k.tenant.empty()) return c.error(line, "key without 'tenant'");
  auto t = cfg.tenants.find(k.tenant);
  if (t == cfg.tenants.end()) return c.error(line, "key of unknown tenant '" + k.tenant + "'");
  if (!have_class) k.slo_class = t->second.slo_class;
  if (!have_models) k.models = t->second.models;
  if (k.allowed_classes.empty()) k.allowed_classes = t->second.allowed_classes;
  // A key may always ask for its own class and its tenant's default class.
  k.allowed_classes.push_back(k.slo_class);
  k.allowed_classes.push_back(t->second.slo_class);
  if (k.name.empty()) k.name = k.hash_hex.substr(0, 8);
  k.line = line;
  return Status::Ok();
}

Status read_class_policies(const Ctx& c, int line, const json& j, AuthConfig& cfg) {
  if (!j.is_object()) return c.error(line, "'classes' must be an object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    auto cls = parse_slo_class(it.key());
    if (!cls) return c.error(line, "classes: unknown SLO class '" + it.key() + "' (high, medium, low)");
    if (!it.value().is_object()) return c.error(line, "classes." + it.key() + " must be an object");
    ClassPolicy& p = cfg.classes[static_cast<size_t>(*cls)];
    for (auto f = it.value().begin(); f != it.value().end(); ++f) {
      if (!f.value().is_number() || f.value().get<double>() < 0)
        return c.error(line, "classes." + it.key() + "." + f.key() + " must be a number >= 0");
      const double v = f.value().get<double>();
      if (f.key() == "ttft_ms") p.ttft_s = v / 1000;
      else if (f.key() == "tpot_ms") p.tpot_s = v / 1000;
      else if (f.key() == "max_queue") p.max_queue = static_cast<int>(v);
      else if (f.key() == "max_queue_ms") p.max_queue_s = v / 1000;
      else return c.error(line, "classes." + it.key() + ": unknown field '" + f.key() + "' (ttft_ms, tpot_ms, max_queue, max_queue_ms)");
    }
  }
  return Status::Ok();
}

}  // namespace

bool KeyConfig::allows_model(const std::string& m) const {
  return models.empty() || std::find(models.begin(), models.end(), m) != models.end();
}

bool KeyConfig::allows_class(SloClass c) const {
  return std::find(allowed_classes.begin(), allowed_classes.end(), c) != allowed_classes.end();
}

int line_of_offset(const std::string& text, size_t offset) {
  offset = std::min(offset, text.size());
  return 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(offset), '\n'));
}

std::string hash_api_key(const std::string& key) { return pdserve::to_hex(pdserve::sha256(key)); }

Result<std::shared_ptr<const AuthConfig>> parse_auth_config(const std::string& text, const std::string& source) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::parse_error& e) {
    // e.byte is the 1-based offset of the last byte read.
    const int line = line_of_offset(text, e.byte > 0 ? e.byte - 1 : 0);
    std::string what = e.what();
    if (auto p = what.find("]: "); p != std::string::npos) what = what.substr(p + 3);  // drop "[json.exception.parse_error.101] "
    return Status::InvalidArgument(source + ":" + std::to_string(line) + ": invalid JSON: " + what);
  }
  Ctx c{source, text};
  if (!root.is_object()) return c.error(1, "the auth file must be a JSON object");
  auto cfg = std::make_shared<AuthConfig>();
  auto line_of_member = [&](const std::string& name, size_t i) {
    auto offs = child_offsets(text, name);
    return i < offs.size() ? line_of_offset(text, offs[i]) : 1;
  };
  auto top_line = [&](const std::string& name) {
    const size_t p = text.find("\"" + name + "\"");
    return p == std::string::npos ? 1 : line_of_offset(text, p);
  };
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string& k = it.key();
    if (k != "classes" && k != "prefill_classes" && k != "tenants" && k != "keys")
      return c.error(top_line(k), "unknown field '" + k + "' (classes, prefill_classes, tenants, keys)");
  }
  if (root.contains("classes"))
    if (Status s = read_class_policies(c, top_line("classes"), root["classes"], *cfg); !s.ok()) return s;
  if (root.contains("prefill_classes")) {
    const json& p = root["prefill_classes"];
    const int line = top_line("prefill_classes");
    if (!p.is_object()) return c.error(line, "'prefill_classes' must be an object");
    for (auto it = p.begin(); it != p.end(); ++it) {
      if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0)
        return c.error(line, "prefill_classes." + it.key() + " must be an integer >= 0");
      if (it.key() == "medium_from") cfg->prefill.medium_from = it.value().get<int>();
      else if (it.key() == "large_from") cfg->prefill.large_from = it.value().get<int>();
      else return c.error(line, "prefill_classes: unknown field '" + it.key() + "' (medium_from, large_from)");
    }
  }
  if (!root.contains("tenants") || !root["tenants"].is_object()) return c.error(top_line("tenants"), "'tenants' must be an object of tenants");
  // nlohmann's object iterates in sorted key order: find each member's line by its name.
  std::map<std::string, int> tenant_lines;
  for (size_t off : child_offsets(text, "tenants")) {
    const size_t end = text.find('"', off + 1);
    if (text[off] == '"' && end != std::string::npos) tenant_lines.emplace(text.substr(off + 1, end - off - 1), line_of_offset(text, off));
  }
  for (auto it = root["tenants"].begin(); it != root["tenants"].end(); ++it) {
    TenantConfig t;
    const int line = tenant_lines.count(it.key()) ? tenant_lines[it.key()] : top_line("tenants");
    if (Status s = read_tenant(c, line, it.key(), it.value(), t); !s.ok()) return s;
    cfg->tenants[it.key()] = std::move(t);
  }
  if (!root.contains("keys") || !root["keys"].is_array()) return c.error(top_line("keys"), "'keys' must be an array of keys");
  std::set<std::string> seen;
  for (size_t i = 0; i < root["keys"].size(); ++i) {
    KeyConfig k;
    const int line = line_of_member("keys", i);
    if (Status s = read_key(c, line, root["keys"][i], *cfg, k); !s.ok()) return s;
    if (!seen.insert(k.hash_hex).second) return c.error(line, "duplicate key_sha256 " + k.hash_hex);
    cfg->keys.push_back(std::move(k));
  }
  return std::shared_ptr<const AuthConfig>(std::move(cfg));
}

Result<std::shared_ptr<const AuthConfig>> load_auth_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::InvalidArgument("cannot read auth file " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_auth_config(ss.str(), path);
}

}  // namespace pdserve::gateway
