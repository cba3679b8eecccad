#include "disagg/prefill_client.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "base/clock.h"
#include "base/log.h"
#include "disagg/grpc_options.h"
#include "disagg/grpc_status.h"
#include "disagg/kv_codec.h"
#include "disagg/prefill_service.h"
#include "disagg/proto_convert.h"

namespace pdserve::disagg {

const char* prefill_call_failure_reason(StatusCode code) {
  switch (code) {
    case StatusCode::DeadlineExceeded: return "timeout";
    case StatusCode::FailedPrecondition: return "handshake";
    case StatusCode::InvalidArgument:
    case StatusCode::ResourceExhausted: return "rejected";
    case StatusCode::RateLimited: return "rate_limited";
    case StatusCode::Cancelled: return "cancelled";
    default: return "stream";
  }
}

bool retry_on_other_prefill_worker(StatusCode code) { return code != StatusCode::FailedPrecondition; }

struct GrpcKvSource::Attempt {
  bool ok = false;
  bool cancelled = false;
  Status error;        // why the attempt failed (Ok when it did not)
  std::string reason;  // failure label: checksum, decode, protocol, incomplete or prefill_call_failure_reason
  engine::TokenLogprob first;
};

GrpcKvSource::GrpcKvSource(KvSourceConfig cfg, std::shared_ptr<engine::TransferMetrics> metrics)
    : cfg_(std::move(cfg)), metrics_(std::move(metrics)) {
  for (const auto& a : cfg_.prefill_addrs) add_worker(a, false);
  for (Worker* w : live_workers()) check_health(*w);
  health_ = std::thread([this] { health_loop(); });
}

void GrpcKvSource::add_worker(const std::string& addr, bool discovered) {
  auto w = std::make_unique<Worker>();
  w->addr = addr;
  w->stub = PrefillService::NewStub(make_channel(addr));
  w->discovered = discovered;
  w->codec = cfg_.codec == "auto" ? (is_loopback_address(addr) ? "none" : "zstd") : cfg_.codec;
  std::lock_guard<std::mutex> lk(workers_mu_);
  workers_.push_back(std::move(w));
}

std::vector<GrpcKvSource::Worker*> GrpcKvSource::live_workers() {
  std::lock_guard<std::mutex> lk(workers_mu_);
  std::vector<Worker*> out;
  for (auto& w : workers_)
    if (!w->removed) out.push_back(w.get());
  return out;
}

void GrpcKvSource::set_peers(const std::vector<std::string>& addrs) {
  std::vector<std::string> added;
  {
    std::lock_guard<std::mutex> lk(workers_mu_);
    for (auto& w : workers_)
      if (w->discovered) {
        const bool listed = std::find(addrs.begin(), addrs.end(), w->addr) != addrs.end();
        if (w->removed.exchange(!listed) != !listed)
          PDS_LOG_INFO("prefill worker {} {}", w->addr, listed ? "joined again (discovery)" : "left (discovery)");
        if (!listed) w->healthy = false;
      }
    for (const auto& a : addrs)
      if (std::none_of(workers_.begin(), workers_.end(), [&](const auto& w) { return w->addr == a; })) added.push_back(a);
  }
  for (const auto& a : added) {
    add_worker(a, true);
    PDS_LOG_INFO("prefill worker {} joined (discovery)", a);
  }
  cv_.notify_all();  // check the new ones now
}

GrpcKvSource::~GrpcKvSource() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    for (auto& [id, ctx] : live_) ctx->TryCancel();
  }
  cv_.notify_all();
  if (health_.joinable()) health_.join();
  for (auto& t : threads_) t.thread.join();
}

void GrpcKvSource::check_health(Worker& w) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
  HealthRequest req;
  HealthResponse res;
  const bool answered = w.stub->Health(&ctx, req, &res).ok() && res.ok();
  const bool ok = answered && !res.draining() && !w.removed;
  if (answered) w.sampling_level = sampling_level(res);
  if (ok != w.healthy.load())
    PDS_LOG_INFO("prefill worker {} is {}", w.addr, ok ? "healthy" : answered ? "draining" : "unreachable");
  w.healthy = ok;
}

void GrpcKvSource::health_loop() {
  std::unique_lock<std::mutex> lk(mu_);
  while (!stop_) {
    cv_.wait_for(lk, std::chrono::milliseconds(500));
    if (stop_) break;
    lk.unlock();
    for (Worker* w : live_workers()) check_health(*w);
    lk.lock();
  }
}

bool GrpcKvSource::available(const engine::SamplingParams& params) {
  const int level = sampling_level(params);
  for (Worker* w : live_workers())
    if (w->healthy && w->sampling_level >= level) return true;
  return false;
}

void GrpcKvSource::cancel(int64_t seq_id) {
  std::lock_guard<std::mutex> lk(mu_);
  // Only a transfer that has not reported yet: a cancel() racing with the report (the
  // engine has not taken the result yet) must not leave an entry behind.
  auto c = cancelled_.find(seq_id);
  if (c == cancelled_.end()) return;
  c->second = true;
  if (auto it = live_.find(seq_id); it != live_.end()) it->second->TryCancel();
}

bool GrpcKvSource::is_cancelled(int64_t seq_id) const {
  auto c = cancelled_.find(seq_id);
  return c != cancelled_.end() && c->second;
}

size_t GrpcKvSource::transfers_tracked() const {
  std::lock_guard<std::mutex> lk(mu_);
  return cancelled_.size();
}

void GrpcKvSource::start(engine::RemotePrefillTask task, engine::KvBlockAccess& blocks,
                         std::function<void(engine::RemotePrefillResult)> done) {
  std::lock_guard<std::mutex> lk(mu_);
  for (auto it = threads_.begin(); it != threads_.end();) {
    if (it->finished->load()) {
      it->thread.join();
      it = threads_.erase(it);
    } else {
      ++it;
    }
  }
  cancelled_.emplace(task.seq_id, false);  // tracked until run() reports
  auto finished = std::make_shared<std::atomic<bool>>(false);
  threads_.push_back({std::thread([this, task = std::move(task), b = &blocks, done = std::move(done), finished]() mutable {
                        run(std::move(task), b, std::move(done));
                        finished->store(true);
                      }),
                      finished});
}

GrpcKvSource::Attempt GrpcKvSource::attempt(Worker& w, const engine::RemotePrefillTask& task,
                                            engine::KvBlockAccess& blocks) {
  Attempt out;
  const engine::KvLayout& layout = blocks.layout();
  const int total = static_cast<int>(task.block_ids.size());
  PrefillRequest req;
  req.set_request_id(std::to_string(task.seq_id));
  req.mutable_prompt_tokens()->Add(task.prompt.begin(), task.prompt.end());
  to_proto(task.params, req.mutable_params());
  req.set_num_cached_blocks(task.num_cached_blocks);
  *req.mutable_spec() = to_spec(layout);
  req.set_codec(w.codec);
  req.set_zstd_level(cfg_.zstd_level);
  req.set_cache_salt(task.cache_salt);

  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(static_cast<int64_t>(cfg_.transfer_timeout_s * 1000)));
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (is_cancelled(task.seq_id) || stop_) {
      out.cancelled = true;
      return out;
    }
    live_[task.seq_id] = &ctx;
  }
  // filled[layer][block]: written and verified
  std::vector<std::vector<char>> filled(layout.n_layers, std::vector<char>(total, 0));
  std::unique_ptr<grpc::ClientReader<PrefillResponse>> reader = w.stub->Prefill(&ctx, req);
  PrefillResponse res;
  bool got_first = false;
  int messages = 0;
  std::string k, v;
  while (reader->Read(&res)) {
    ++messages;
    if (res.has_block()) {
      const CacheBlock& b = res.block();
      if (Status range = check_block_range(b, layout.n_layers, task.num_cached_blocks, total); !range.ok()) {
        out.reason = "protocol";
        out.error = range;
        ctx.TryCancel();
        break;
      }
      Status s = decode_blocks(b, layout.block_bytes, k, v);
      if (!s.ok()) {
        out.reason = s.code() == StatusCode::DataLoss ? "checksum" : "decode";
        out.error = Status(s.code(), s.message() + " (layer " + std::to_string(b.layer()) + ", block " +
                                         std::to_string(b.first_block()) + ")");
        ctx.TryCancel();
        break;
      }
      for (int i = 0; i < b.block_count(); ++i) {
        blocks.write(b.layer(), task.block_ids[b.first_block() + i], k.data() + i * layout.block_bytes,
                     v.data() + i * layout.block_bytes);
        filled[b.layer()][b.first_block() + i] = 1;
      }
      if (metrics_) metrics_->add_bytes(b.codec(), static_cast<int64_t>(b.k().size() + b.v().size()));
    } else if (res.has_first()) {
      got_first = true;
      out.first = from_proto(res.first().token());
    }
  }
  const grpc::Status st = reader->Finish();
  {
    std::lock_guard<std::mutex> lk(mu_);
    live_.erase(task.seq_id);
    if (is_cancelled(task.seq_id)) out.cancelled = true;
  }
  if (!out.error.ok()) return out;
  if (!st.ok()) {
    out.error = from_grpc(st);
    out.reason = prefill_call_failure_reason(out.error.code());
    if (out.error.code() == StatusCode::DeadlineExceeded) {  // name the limit: a long cold prefill on a slow worker hits it
      char limit[64];
      std::snprintf(limit, sizeof limit, "%g s", cfg_.transfer_timeout_s);
      out.error = Status(out.error.code(), std::string("prefill and transfer not done within --kv-transfer-timeout ") + limit);
    }
    // No answer at all: the worker is down (until the health check sees it again).
    if (out.error.code() == StatusCode::Unavailable && messages == 0) w.healthy = false;
    return out;
  }
  // Success only when every block of every layer arrived and verified, then the token.
  for (int l = 0; l < layout.n_layers && got_first; ++l)
    for (int b = task.num_cached_blocks; b < total; ++b)
      if (!filled[l][b]) got_first = false;
  if (!got_first) {
    out.reason = "incomplete";
    out.error = Status::DataLoss("the stream ended before every block and the first token arrived");
    return out;
  }
  out.ok = true;
  return out;
}

void GrpcKvSource::run(engine::RemotePrefillTask task, engine::KvBlockAccess* blocks,
                       std::function<void(engine::RemotePrefillResult)> done) {
  engine::RemotePrefillResult result;
  result.seq_id = task.seq_id;
  const double t0 = now_seconds();
  std::string errors;
  const std::vector<Worker*> workers = live_workers();
  const size_t n = workers.size();
  const size_t start = rr_++;
  const int level = sampling_level(task.params);
  for (size_t i = 0; i < n; ++i) {
    Worker& w = *workers[(start + i) % n];
    if (!w.healthy || w.sampling_level < level) continue;  // an older worker would ignore some fields
    Attempt a = attempt(w, task, *blocks);
    if (a.ok) {
      result.ok = true;
      result.first = a.first;
      if (metrics_) metrics_->add_transfer_seconds(now_seconds() - t0);
      break;
    }
    if (a.cancelled) {
      errors = "cancelled";
      break;
    }
    if (metrics_) metrics_->add_failure(a.reason);
    PDS_LOG_WARN("KV transfer from {} failed ({}: {})", w.addr, a.reason, a.error.message());
    errors += (errors.empty() ? "" : "; ") + w.addr + ": " + a.reason + " (" + a.error.message() + ")";
    if (!retry_on_other_prefill_worker(a.error.code())) break;
  }
  if (!result.ok) result.error = errors.empty() ? "no healthy prefill worker" : errors;
  {
    std::lock_guard<std::mutex> lk(mu_);
    cancelled_.erase(task.seq_id);
  }
  done(std::move(result));
}

}  // namespace pdserve::disagg
