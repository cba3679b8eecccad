#include "disagg/router_engine.h"

#include <algorithm>
#include <filesystem>
#include <utility>

#include "base/log.h"
#include "disagg/proto_convert.h"
#include "gguf/gguf.h"
#include "model/model_config.h"
#include "tokenizer/tokenizer.h"

namespace pdserve::disagg {

// How often the watcher checks its timers (dead workers, accept timeouts); an abort
// wakes it at once.
constexpr auto kWatchInterval = std::chrono::milliseconds(20);

/// The choices of one request: the metrics record it once all of them have ended.
struct RouterEngine::Group {
  std::mutex mu;
  int remaining = 0;
  int prompt_tokens = 0;
  int64_t generated = 0;
  ChoiceOutcome first;  // choice 0's
  double ttft = -1, queue = -1;
  std::string slo_class;  // "high" | "medium" | "low" | "none"
  double ttft_target_s = 0, tpot_target_s = 0;
};

namespace {
const char* class_label(int slo_class) {
  static const char* names[] = {"high", "medium", "low"};
  return slo_class >= 0 && slo_class < 3 ? names[slo_class] : "none";
}
}  // namespace

Result<std::unique_ptr<RouterEngine>> RouterEngine::create(RouterConfig cfg) {
  if (cfg.decode.empty() && cfg.decode_long.empty() && cfg.discovery.kind == DiscoveryUrl::Kind::None)
    return Status::InvalidArgument("the router needs at least one decode worker (--decode or --discovery)");
  auto file = gguf::GgufFile::open(cfg.model_path);
  if (!file.ok()) return file.status();
  auto tok = tokenizer::Tokenizer::from_gguf(*file.value());
  if (!tok.ok()) return tok.status().annotate(cfg.model_path);
  cfg.weights_fingerprint = file.value()->tensors().empty() ? std::string() : gguf::weights_fingerprint(*file.value());
  int gguf_ctx = 0;
  if (auto mc = model::ModelConfig::from_gguf(*file.value()); mc.ok()) gguf_ctx = mc.value().n_ctx;
  auto policy = make_routing_policy(cfg.policy);
  if (!policy.ok()) return policy.status();

  const std::string configured_name = cfg.model_name;
  const std::string stem = std::filesystem::path(cfg.model_path).stem().string();
  const auto wait = cfg.startup_wait;
  auto router = std::make_unique<RouterEngine>(std::move(cfg), std::move(tok.value()), std::move(policy.value()));
  router->last_context_length_.store(gguf_ctx);
  if (router->cfg_.discovery.kind != DiscoveryUrl::Kind::None) {
    RouterEngine* r = router.get();
    router->peers_ = std::make_unique<PeerWatcher>(router->cfg_.discovery, "decode", [r](const std::vector<PeerInfo>& peers) {
      std::vector<std::string> addrs;
      for (const auto& p : peers) addrs.push_back(p.address);
      r->set_decode_peers(addrs);
    });
  }
  if (!router->wait_for_healthy_worker(wait))
    PDS_LOG_WARN("no healthy decode worker within {} ms; serving anyway: {}", wait.count(), router->not_ready_reason());
  std::string worker_name;
  for (WorkerClient* w : router->workers()) {
    const WorkerSnapshot s = w->snapshot();
    if (s.healthy && !s.model_name.empty()) {
      worker_name = s.model_name;
      break;
    }
  }
  router->model_name_ = !configured_name.empty() ? configured_name : !worker_name.empty() ? worker_name : stem;
  router->context_length();  // remember the workers' context length
  return router;
}

RouterEngine::RouterEngine(RouterConfig cfg, std::unique_ptr<tokenizer::Tokenizer> tok,
                           std::unique_ptr<RoutingPolicy> policy)
    : cfg_(std::move(cfg)), tok_(std::move(tok)), policy_(std::move(policy)), model_name_(cfg_.model_name) {
  for (const auto& a : cfg_.decode) workers_.push_back(std::make_unique<WorkerClient>(a, false, false, expected_model()));
  for (const auto& a : cfg_.decode_long) workers_.push_back(std::make_unique<WorkerClient>(a, true, false, expected_model()));
  configured_max_attempts_ = cfg_.limits.max_attempts;
  if (cfg_.limits.max_attempts <= 0) cfg_.limits.max_attempts = 2 * static_cast<int>(workers_.size()) + 2;
  std::vector<WorkerClient*> ws;
  for (auto& w : workers_) ws.push_back(w.get());
  health_ = std::make_unique<HealthChecker>(ws, cfg_.health_interval, cfg_.health_timeout);
  health_->start();
  watcher_ = std::thread([this] { watch_loop(); });
  PDS_LOG_INFO("router: {} decode worker(s), policy {}{}", workers_.size(), policy_->name(),
               cfg_.prefill.empty() ? std::string() : ", prefill workers (informational): " + std::to_string(cfg_.prefill.size()));
}

RouterEngine::~RouterEngine() { shutdown(); }

std::vector<WorkerClient*> RouterEngine::workers() const {
  std::lock_guard<std::mutex> lk(workers_mu_);
  std::vector<WorkerClient*> out;
  out.reserve(workers_.size());
  for (const auto& w : workers_) out.push_back(w.get());
  return out;
}

void RouterEngine::set_decode_peers(const std::vector<std::string>& addrs) {
  std::lock_guard<std::mutex> lk(workers_mu_);
  if (stopping_.load()) return;
  for (const auto& a : addrs) {
    auto it = std::find_if(workers_.begin(), workers_.end(), [&](const auto& w) { return w->address() == a; });
    if (it != workers_.end()) {
      if ((*it)->discovered()) (*it)->set_removed(false);
      continue;
    }
    workers_.push_back(std::make_unique<WorkerClient>(a, false, true, expected_model()));
    PDS_LOG_INFO("decode worker {} joined (discovery)", a);
    health_->add(workers_.back().get());
  }
  for (auto& w : workers_)
    if (w->discovered() && std::find(addrs.begin(), addrs.end(), w->address()) == addrs.end()) w->set_removed(true);
  if (configured_max_attempts_ <= 0) {
    int live = 0;
    for (auto& w : workers_) live += !w->removed();
    std::lock_guard<std::mutex> lk2(mu_);
    cfg_.limits.max_attempts = 2 * std::max(live, 1) + 2;
  }
}

std::string RouterEngine::not_ready_reason() const {
  std::string why;
  for (WorkerClient* w : workers()) {
    if (w->healthy()) return {};
    const WorkerSnapshot s = w->snapshot();
    if (w->removed() || s.last_error.empty()) continue;
    why += why.empty() ? " (" : "; ";
    why += s.last_error.rfind(s.address, 0) == 0 ? s.last_error : s.address + ": " + s.last_error;
  }
  return "no healthy decode worker" + (why.empty() ? std::string() : why + ")");
}

bool RouterEngine::wait_for_healthy_worker(std::chrono::milliseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    for (WorkerClient* w : workers())
      if (w->healthy()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::vector<WorkerClient*> RouterEngine::candidates(const std::vector<int32_t>& prompt,
                                                    const std::vector<WorkerClient*>& failed, int sampling_level) {
  const auto usable = [sampling_level](const WorkerClient* w) {
    return !w->removed() && !w->serves_other_model() && w->sampling_level() >= sampling_level;
  };
  std::vector<WorkerClient*> all;
  for (WorkerClient* w : workers())
    if (usable(w)) all.push_back(w);
  std::vector<WorkerView> views;
  views.reserve(all.size());
  for (WorkerClient* w : all) views.push_back(w->view());
  std::vector<WorkerClient*> out;
  for (int i : policy_->rank(prompt, views)) {
    WorkerClient* w = all[static_cast<size_t>(i)];
    if (std::find(failed.begin(), failed.end(), w) == failed.end()) out.push_back(w);
  }
  for (WorkerClient* w : failed)
    if (usable(w)) out.push_back(w);
  return out;
}

Result<std::shared_ptr<engine::RequestStream>> RouterEngine::submit(std::vector<int32_t> prompt,
                                                                    const engine::SamplingParams& params) {
  auto r = submit_group(std::move(prompt), params, engine::RequestOptions{});
  if (!r.ok()) return r.status();
  return r.value()[0];
}

Result<std::vector<std::shared_ptr<engine::RequestStream>>> RouterEngine::submit_group(
    std::vector<int32_t> prompt, const engine::SamplingParams& params, const engine::RequestOptions& opts) {
  if (stopping_.load()) return Status::Unavailable("the router is shutting down");
  if (prompt.empty()) return Status::InvalidArgument("the prompt is empty");
  if (opts.n < 1) return Status::InvalidArgument("n must be at least 1");
  const int32_t n_vocab = tok_->vocab().size();
  for (int32_t t : prompt)
    if (t < 0 || (n_vocab > 0 && t >= n_vocab))
      return Status::InvalidArgument("token id " + std::to_string(t) + " is outside the vocabulary (size " + std::to_string(n_vocab) + ")");
  const int ctx = context_length();
  if (ctx > 0 && static_cast<int64_t>(prompt.size()) >= ctx)
    return Status::InvalidArgument("the prompt has " + std::to_string(prompt.size()) + " tokens but the context length is " +
                                   std::to_string(ctx) + "; at most " + std::to_string(ctx - 1) +
                                   " prompt tokens leave room for generation");

  // Workers older than this router ignore sampling fields they do not know: a request that
  // uses them goes only to workers that apply them (candidates), and when every healthy
  // worker is older, it is refused with the reason.
  if (const int level = sampling_level(params); level > 0) {
    bool healthy = false, able = false;
    for (WorkerClient* w : workers())
      if (w->healthy() && !w->serves_other_model()) {
        healthy = true;
        able |= w->sampling_level() >= level;
      }
    if (healthy && !able)
      return Status::Unavailable("the decode workers run an older pdserve, which would ignore some of this request's "
                                 "sampling fields (penalties, logit_bias, min_p, stop_token_ids, min_tokens, "
                                 "include_stop_str_in_output); upgrade them, or leave those fields out");
  }
  const std::string id = "r" + std::to_string(next_id_++);
  auto group = std::make_shared<Group>();
  group->remaining = opts.n;
  group->prompt_tokens = static_cast<int>(prompt.size());
  group->slo_class = class_label(opts.slo_class);
  group->ttft_target_s = opts.ttft_target_s;
  group->tpot_target_s = opts.tpot_target_s;
  {
    std::lock_guard<std::mutex> lk(class_mu_);
    class_traffic_[group->slo_class].arrivals++;
  }
  std::vector<std::shared_ptr<RoutedChoice>> opened;
  std::vector<std::shared_ptr<engine::RequestStream>> streams;
  for (int k = 0; k < opts.n; ++k) {
    RoutedChoice::Request req;
    req.id = opts.n == 1 ? id : id + "-" + std::to_string(k);
    req.prompt = prompt;
    req.params = params.for_choice(k);
    req.priority = opts.priority;
    req.cache_salt = opts.cache_salt;
    req.slo_class = opts.slo_class;
    req.ttft_target_s = opts.ttft_target_s;
    req.tpot_target_s = opts.tpot_target_s;
    req.max_queue_s = opts.max_queue_s;
    auto stream = std::make_shared<engine::RequestStream>(req.id);
    stream->set_abort_event(watch_wake_);
    ChoiceLimits limits;
    {
      std::lock_guard<std::mutex> lk(mu_);
      limits = cfg_.limits;
    }
    auto choice = std::make_shared<RoutedChoice>(static_cast<ChoiceHost&>(*this), std::move(req), stream, limits,
                                                 [this, group, k](const ChoiceOutcome& o) { record(*group, k, o); });
    {
      std::lock_guard<std::mutex> lk(mu_);
      choices_.push_back(choice);  // watched (abort, dead worker) while it opens
    }
    if (Status s = choice->open(); !s.ok()) {
      for (auto& c : opened) c->abandon();
      return s;
    }
    opened.push_back(choice);
    streams.push_back(std::move(stream));
  }
  for (auto& c : opened) c->start();
  prompt_tokens_ += static_cast<int64_t>(prompt.size());
  return streams;
}

void RouterEngine::record(Group& g, int choice, const ChoiceOutcome& o) {
  generation_tokens_ += o.completion_tokens;
  std::lock_guard<std::mutex> lk(g.mu);
  g.generated += o.completion_tokens;
  if (o.ttft_s >= 0 && (g.ttft < 0 || o.ttft_s < g.ttft)) g.ttft = o.ttft_s;
  if (g.queue < 0 || o.queue_s < g.queue) g.queue = o.queue_s;
  if (choice == 0) g.first = o;
  if (--g.remaining > 0) return;
  // Like the engine: the request's reason and per-token time are those of choice 0.
  const ChoiceOutcome& f = g.first;
  const bool has_tpot = f.ttft_s >= 0 && f.completion_tokens > 1;
  const double tpot = has_tpot ? (f.e2e_s - f.ttft_s) / (f.completion_tokens - 1) : 0.0;
  metrics_.record_request(engine::finish_reason_name(f.finish), std::max(0.0, g.queue), std::max(0.0, g.ttft), tpot,
                          has_tpot, f.e2e_s, g.prompt_tokens, g.generated);
  std::lock_guard<std::mutex> ck(class_mu_);
  engine::ClassTraffic& t = class_traffic_[g.slo_class];
  t.finished++;
  t.prompt_tokens += g.prompt_tokens;
  t.generation_tokens += g.generated;
  const bool ttft_ok = g.ttft >= 0 && (g.ttft_target_s <= 0 || g.ttft <= g.ttft_target_s);
  const bool tpot_ok = !has_tpot || g.tpot_target_s <= 0 || tpot <= g.tpot_target_s;
  if (ttft_ok && tpot_ok) t.attained++;
}

int RouterEngine::context_length() const {
  int best = 0;
  for (WorkerClient* w : workers()) {
    const WorkerSnapshot s = w->snapshot();
    if (s.healthy && s.context_length > 0) best = best == 0 ? s.context_length : std::min(best, s.context_length);
  }
  if (best > 0) {
    last_context_length_.store(best);
    return best;
  }
  return last_context_length_.load();
}

engine::EngineStats RouterEngine::stats() const {
  engine::EngineStats st;
  for (WorkerClient* w : workers()) {
    const WorkerSnapshot s = w->snapshot();
    if (!s.healthy) continue;
    st.requests_running += s.load.requests_running();
    st.requests_waiting += s.load.requests_waiting();
    st.requests_awaiting_kv += s.load.requests_awaiting_kv();
    st.kv_blocks_total += s.load.kv_blocks_total();
    st.kv_blocks_used += s.load.kv_blocks_used();
    st.kv_blocks_cached += s.load.kv_blocks_cached();
    st.kv_blocks_free += s.load.kv_blocks_free();
  }
  st.prompt_tokens_total = prompt_tokens_.load();
  st.generation_tokens_total = generation_tokens_.load();
  return st;
}

engine::MetricsSnapshot RouterEngine::metrics() const {
  engine::MetricsSnapshot m;
  const engine::EngineStats s = stats();
  m.requests_running = s.requests_running;
  m.requests_waiting = s.requests_waiting;
  m.kv_blocks_total = s.kv_blocks_total;
  m.kv_blocks_used = s.kv_blocks_used;
  m.kv_blocks_cached = s.kv_blocks_cached;
  m.kv_blocks_free = s.kv_blocks_free;
  metrics_.fill(m);
  // Worker counters: the last value each worker reported (a worker that went away keeps
  // its last count, so the sums do not fall while it is down).
  for (WorkerClient* w : workers()) {
    const WorkerSnapshot ws = w->snapshot();
    if (!w->removed()) m.decode_workers[ws.address] = ws.healthy ? 1 : 0;
    m.prefix_cache_queries += ws.load.prefix_cache_queries();
    m.prefix_cache_hits += ws.load.prefix_cache_hits();
    m.preemptions += ws.load.preemptions();
  }
  std::lock_guard<std::mutex> lk(class_mu_);
  m.router_classes = class_traffic_;
  return m;
}

void RouterEngine::watch_loop() {
  std::unique_lock<std::mutex> lk(mu_);
  while (!watch_stop_) {
    std::vector<std::shared_ptr<RoutedChoice>> snapshot = choices_;
    lk.unlock();
    std::vector<std::shared_ptr<RoutedChoice>> finished;
    for (auto& c : snapshot) {
      if (c->done()) finished.push_back(c);
      else c->watch();
    }
    snapshot.clear();
    lk.lock();
    if (!finished.empty()) {
      std::erase_if(choices_, [&](const std::shared_ptr<RoutedChoice>& c) {
        return std::find(finished.begin(), finished.end(), c) != finished.end();
      });
      lk.unlock();
      for (auto& c : finished) c->join();
      finished.clear();  // the last reference may go here (joins nothing more)
      lk.lock();
    }
    lk.unlock();
    watch_wake_->wait_until(std::chrono::steady_clock::now() + kWatchInterval);
    lk.lock();
  }
}

void RouterEngine::shutdown() {
  if (stopping_.exchange(true)) return;
  if (peers_) peers_->stop();
  // The watcher cancels every call (stopping_ is set); each choice then ends with Abort.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (std::all_of(choices_.begin(), choices_.end(), [](const auto& c) { return c->done(); })) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    watch_stop_ = true;
  }
  watch_wake_->set();
  if (watcher_.joinable()) watcher_.join();
  std::vector<std::shared_ptr<RoutedChoice>> rest;
  {
    std::lock_guard<std::mutex> lk(mu_);
    rest.swap(choices_);
  }
  for (auto& c : rest) c->join();
  rest.clear();
  if (health_) health_->stop();
}

}  // namespace pdserve::disagg
