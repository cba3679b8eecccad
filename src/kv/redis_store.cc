#include "kv/redis_store.h"

#include <hiredis/hiredis.h>

#include <cstdlib>

#include "base/log.h"

namespace pdserve::kv {

namespace {

constexpr std::chrono::milliseconds kMinBackoff{100}, kMaxBackoff{2000};

std::string redis_key(const BlockKey& key) { return "pdserve:kv:" + pdserve::to_hex(key); }

bool parse_int(const std::string& s, int lo, int hi, int& out) {
  if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos) return false;
  out = std::atoi(s.c_str());
  return out >= lo && out <= hi;
}

}  // namespace

Result<RedisUrl> parse_redis_url(const std::string& url) {
  const std::string prefix = "redis://";
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("--kv-store '" + url + "': " + why + " (expected redis://HOST:PORT[/DB])");
  };
  if (url.rfind(prefix, 0) != 0) return bad("not a redis:// URL");
  std::string rest = url.substr(prefix.size());
  RedisUrl u;
  u.text = url;
  if (const size_t slash = rest.find('/'); slash != std::string::npos) {
    if (!parse_int(rest.substr(slash + 1), 0, 1 << 20, u.db)) return bad("the database must be a number");
    rest.resize(slash);
  }
  const size_t colon = rest.rfind(':');
  u.host = colon == std::string::npos ? rest : rest.substr(0, colon);
  if (u.host.empty() || u.host.find_first_of("@?#[]") != std::string::npos) return bad("missing or bad host");
  if (colon != std::string::npos && !parse_int(rest.substr(colon + 1), 1, 65535, u.port))
    return bad("the port must be in [1, 65535]");
  return u;
}

RedisKvStore::RedisKvStore(RedisUrl url, int timeout_ms, std::shared_ptr<RedisHealth> health)
    : url_(std::move(url)), timeout_ms_(timeout_ms), health_(std::move(health)) {}

RedisKvStore::~RedisKvStore() {
  if (ctx_) redisFree(ctx_);
}

Status RedisKvStore::fail(const std::string& what) {
  if (ctx_) redisFree(ctx_);
  ctx_ = nullptr;
  backoff_ = backoff_.count() == 0 ? kMinBackoff : std::min(kMaxBackoff, backoff_ * 2);
  retry_at_ = std::chrono::steady_clock::now() + backoff_;
  if (!health_->down.exchange(true))
    PDS_LOG_WARN("kv store {}: {}; computing without it until it is back (retrying with backoff)", url_.text, what);
  return Status::Unavailable("kv store " + url_.text + ": " + what);
}

Status RedisKvStore::connect() {
  if (ctx_) return Status::Ok();
  if (health_->down && std::chrono::steady_clock::now() < retry_at_) return Status::Unavailable("kv store " + url_.text + ": backing off");
  const timeval tv{timeout_ms_ / 1000, (timeout_ms_ % 1000) * 1000};
  ctx_ = redisConnectWithTimeout(url_.host.c_str(), url_.port, tv);
  if (!ctx_ || ctx_->err) return fail(ctx_ ? ctx_->errstr : "cannot allocate a connection");
  redisSetTimeout(ctx_, tv);
  if (url_.db != 0) {
    auto* r = static_cast<redisReply*>(redisCommand(ctx_, "SELECT %d", url_.db));
    const bool ok = r && r->type == REDIS_REPLY_STATUS;
    const std::string err = r && r->type == REDIS_REPLY_ERROR ? std::string(r->str, r->len) : std::string(ctx_->errstr);
    if (r) freeReplyObject(r);
    if (!ok) return fail("SELECT " + std::to_string(url_.db) + ": " + err);
  }
  backoff_ = std::chrono::milliseconds(0);
  if (health_->down.exchange(false)) PDS_LOG_INFO("kv store {}: reconnected", url_.text);
  return Status::Ok();
}

Status RedisKvStore::reconnect() {
  // A connection that broke since its last call (e.g. the server restarted): one fresh
  // attempt at once, before this counts as an outage.
  redisFree(ctx_);
  ctx_ = nullptr;
  retry_at_ = {};
  return connect();
}

Result<std::optional<std::string>> RedisKvStore::get(const BlockKey& key) {
  if (Status s = connect(); !s.ok()) return s;
  const std::string k = redis_key(key);
  auto* r = static_cast<redisReply*>(redisCommand(ctx_, "GET %b", k.data(), k.size()));
  if (!r && reconnect().ok()) r = static_cast<redisReply*>(redisCommand(ctx_, "GET %b", k.data(), k.size()));
  if (!r) return fail(std::string("GET: ") + (ctx_ ? ctx_->errstr : "no connection"));
  Result<std::optional<std::string>> out = std::optional<std::string>();
  if (r->type == REDIS_REPLY_STRING) out = std::optional<std::string>(std::string(r->str, r->len));
  else if (r->type == REDIS_REPLY_ERROR) out = Status::Internal("kv store " + url_.text + ": GET: " + std::string(r->str, r->len));
  freeReplyObject(r);
  return out;
}

Status RedisKvStore::put(const BlockKey& key, const std::string& value) {
  if (Status s = connect(); !s.ok()) return s;
  const std::string k = redis_key(key);
  auto* r = static_cast<redisReply*>(redisCommand(ctx_, "SET %b %b", k.data(), k.size(), value.data(), value.size()));
  if (!r && reconnect().ok())
    r = static_cast<redisReply*>(redisCommand(ctx_, "SET %b %b", k.data(), k.size(), value.data(), value.size()));
  if (!r) return fail(std::string("SET: ") + (ctx_ ? ctx_->errstr : "no connection"));
  Status out = Status::Ok();
  if (r->type == REDIS_REPLY_ERROR)  // e.g. OOM under maxmemory noeviction: the tier is full
    out = Status::ResourceExhausted("kv store " + url_.text + ": SET: " + std::string(r->str, r->len));
  freeReplyObject(r);
  return out;
}

}  // namespace pdserve::kv
