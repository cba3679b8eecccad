#include "disagg/worker_client.h"

#include <cctype>

#include "base/log.h"
#include "disagg/grpc_options.h"
#include "disagg/proto_convert.h"

namespace pdserve::disagg {

Result<std::vector<std::string>> parse_address_list(const std::string& list) {
  std::vector<std::string> out;
  std::string item;
  auto flush = [&]() -> Status {
    if (item.empty()) return Status::Ok();
    const size_t colon = item.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == item.size())
      return Status::InvalidArgument("'" + item + "' is not HOST:PORT");
    const std::string host = item.substr(0, colon), port = item.substr(colon + 1);
    const bool bracketed = host.size() > 2 && host.front() == '[' && host.back() == ']';  // [IPv6]
    if (host.find('/') != std::string::npos || (!bracketed && host.find_first_of(":[]") != std::string::npos))
      return Status::InvalidArgument("'" + item + "' is not HOST:PORT (an IPv6 host goes in brackets: [::1]:PORT)");
    for (char c : port)
      if (!std::isdigit(static_cast<unsigned char>(c))) return Status::InvalidArgument("'" + item + "' has no numeric port");
    if (port.size() > 5 || std::stoi(port) < 1 || std::stoi(port) > 65535)
      return Status::InvalidArgument("'" + item + "': the port must be 1 to 65535");
    out.push_back(item);
    item.clear();
    return Status::Ok();
  };
  for (char c : list) {  // items are separated by commas or white space
    if (c == ',' || std::isspace(static_cast<unsigned char>(c))) {
      if (Status s = flush(); !s.ok()) return s;
    } else {
      item += c;
    }
  }
  if (Status s = flush(); !s.ok()) return s;
  return out;
}

std::shared_ptr<grpc::Channel> make_worker_channel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);  // a (re)started worker is seen within ~0.5 s
  args.SetInt(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, -1);
  add_keepalive_args(args);  // a cut link fails its Generate streams (grpc_options.h)
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

std::string ExpectedModel::mismatch(const std::string& vocab, const std::string& weights) const {
  if (!vocab_fingerprint.empty() && !vocab.empty() && vocab != vocab_fingerprint)
    return "serves another vocabulary (" + vocab + ") than the router's model file (" + vocab_fingerprint +
           "): its token ids would be read as other text";
  if (!weights_fingerprint.empty() && !weights.empty() && weights != weights_fingerprint)
    return "serves other weights (" + weights + ") than the router's model file (" + weights_fingerprint +
           "; another quant of the same model counts): start the router with the workers' model file";
  return {};
}

WorkerClient::WorkerClient(std::string address, bool long_group, bool discovered, ExpectedModel expected)
    : address_(std::move(address)), long_group_(long_group), discovered_(discovered), expected_(std::move(expected)),
      channel_(make_worker_channel(address_)),
      stub_(DecodeService::NewStub(channel_)) {
  snap_.address = address_;
}

bool WorkerClient::check(std::chrono::milliseconds timeout) {
  HealthResponse health;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + timeout);
    grpc::Status st = stub_->Health(&ctx, HealthRequest(), &health);
    if (!st.ok()) {
      set_failure("Health: " + st.error_message(), true);
      return false;
    }
  }
  if (health.ok() && health.draining()) {
    if (!draining_.exchange(true)) PDS_LOG_INFO("decode worker {} is draining", address_);
    set_failure("draining", false);
    return false;
  }
  draining_.store(false);
  if (!health.ok() || health.role() != "decode") {
    set_failure(health.ok() ? "role is '" + health.role() + "', not 'decode'" : "worker reports not ok", true);
    return false;
  }
  if (std::string why = expected_.mismatch(health.vocab_fingerprint(), health.weights_fingerprint()); !why.empty()) {
    mark_other_model(why);
    return false;
  }
  LoadResponse load;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + timeout);
    grpc::Status st = stub_->Load(&ctx, LoadRequest(), &load);
    if (!st.ok()) {
      set_failure("Load: " + st.error_message(), true);
      return false;
    }
  }
  bool was_healthy;
  {
    std::lock_guard<std::mutex> lk(mu_);
    was_healthy = snap_.healthy;
    snap_.healthy = snap_.ever_healthy = true;
    snap_.consecutive_failures = 0;
    sampling_level_.store(disagg::sampling_level(health));
    snap_.model_name = health.model_name();
    snap_.context_length = health.context_length();
    snap_.load = load;
    snap_.last_error.clear();
    logged_mismatch_.clear();
    other_model_.store(false);
    routed_since_load_.store(0);
    failures_.store(0);
    healthy_.store(true);
  }
  if (!was_healthy) PDS_LOG_INFO("decode worker {} is healthy ({}, context {})", address_, health.model_name(), health.context_length());
  return true;
}

void WorkerClient::mark_failed(const std::string& why) { set_failure(why, false); }

void WorkerClient::mark_other_model(const std::string& why) {
  other_model_.store(true);
  bool first;
  {
    std::lock_guard<std::mutex> lk(mu_);
    first = why != logged_mismatch_;
    logged_mismatch_ = why;
  }
  if (first) PDS_LOG_ERROR("decode worker {} is not used: it {}", address_, why);
  set_failure(why, true);
}

void WorkerClient::set_failure(const std::string& why, bool count) {
  bool was_healthy;
  {
    std::lock_guard<std::mutex> lk(mu_);
    was_healthy = snap_.healthy;
    snap_.healthy = false;
    if (count) snap_.consecutive_failures = failures_.fetch_add(1) + 1;
    snap_.last_error = why;
    healthy_.store(false);
  }
  if (was_healthy) PDS_LOG_WARN("decode worker {} is unhealthy: {}", address_, why);
}

WorkerSnapshot WorkerClient::snapshot() const {
  std::lock_guard<std::mutex> lk(mu_);
  WorkerSnapshot s = snap_;
  s.healthy = s.healthy && !removed_.load();
  return s;
}

void WorkerClient::set_removed(bool removed) {
  if (removed_.exchange(removed) != removed)
    PDS_LOG_INFO("decode worker {} {}", address_, removed ? "left (discovery)" : "joined (discovery)");
}

WorkerView WorkerClient::view() const {
  std::lock_guard<std::mutex> lk(mu_);
  WorkerView v;
  v.address = address_;
  v.healthy = snap_.healthy && !removed_.load();
  v.long_group = long_group_;
  v.load = snap_.load.requests_running() + snap_.load.requests_waiting() + snap_.load.requests_awaiting_kv() +
           routed_since_load_.load();
  const int64_t total = snap_.load.kv_blocks_total();
  v.kv_usage = total > 0 ? static_cast<double>(snap_.load.kv_blocks_used()) / static_cast<double>(total) : 0.0;
  return v;
}

HealthChecker::HealthChecker(std::vector<WorkerClient*> workers, std::chrono::milliseconds interval,
                             std::chrono::milliseconds timeout)
    : workers_(std::move(workers)), interval_(interval), timeout_(timeout) {}

void HealthChecker::start() {
  std::lock_guard<std::mutex> lk(mu_);
  if (started_) return;
  started_ = true;
  stop_ = false;
  for (WorkerClient* w : workers_) threads_.emplace_back([this, w] { loop(w); });
}

void HealthChecker::add(WorkerClient* w) {
  std::lock_guard<std::mutex> lk(mu_);
  workers_.push_back(w);
  if (started_ && !stop_) threads_.emplace_back([this, w] { loop(w); });
}

void HealthChecker::stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
  threads_.clear();
  std::lock_guard<std::mutex> lk(mu_);
  started_ = false;
}

bool WorkerClient::channel_ready() const { return channel_->GetState(false) == GRPC_CHANNEL_READY; }

bool WorkerClient::wait_connected(std::chrono::milliseconds timeout) {
  return channel_->WaitForConnected(std::chrono::system_clock::now() + timeout);
}

void HealthChecker::loop(WorkerClient* w) {
  constexpr auto kSlice = std::chrono::milliseconds(100);
  while (true) {
    if (w->removed() && w->consecutive_failures() > 0) {  // gone and not answering: idle
      std::unique_lock<std::mutex> lk(mu_);
      if (cv_.wait_for(lk, interval_, [&] { return stop_; })) return;
      continue;
    }
    if (w->check(timeout_) || w->channel_ready()) {  // healthy, or reachable but refusing: poll
      std::unique_lock<std::mutex> lk(mu_);
      if (cv_.wait_for(lk, interval_, [&] { return stop_; })) return;
      continue;
    }
    // Not connected: until the next check, keep the connection attempt going (in slices,
    // so stop() is not held up), and check again as soon as the channel connects.
    const auto next = std::chrono::steady_clock::now() + interval_;
    while (std::chrono::steady_clock::now() < next) {
      {
        std::lock_guard<std::mutex> lk(mu_);
        if (stop_) return;
      }
      if (w->wait_connected(kSlice)) break;
    }
    std::lock_guard<std::mutex> lk(mu_);
    if (stop_) return;
  }
}

}  // namespace pdserve::disagg
