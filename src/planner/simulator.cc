#include "planner/simulator.h"

#include <algorithm>
#include <memory>
#include <queue>
#include <stdexcept>
#include <unordered_map>

#include "kv/kv_cache_manager.h"
#include "engine/sequence.h"

namespace pdserve::planner {

double step_seconds(const Profile& p, int decodes, double mean_context, const std::vector<std::pair<int, int>>& chunks) {
  double total = 0;
  int parts = 0;
  const int ctx = static_cast<int>(mean_context + 0.5);
  if (decodes > 0) {
    total += p.decode_step_seconds(decodes, ctx);
    ++parts;
  }
  for (const auto& [n, before] : chunks) {
    total += p.prefill_seconds(n, before);
    ++parts;
  }
  if (parts > 1) {
    // The fixed cost of a forward pass (weights streamed once, the step's bookkeeping):
    // the decode curve's intercept at batch 0, at most a one-sequence step.
    const double d1 = p.decode_step_seconds(1, ctx), d2 = p.decode_step_seconds(2, ctx);
    const double fixed = std::clamp(2 * d1 - d2, 0.0, d1);
    total = std::max(total - (parts - 1) * fixed, 0.0);
  }
  return total;
}

std::vector<int32_t> synth_prompt(int64_t request_index, int64_t input_len, const std::vector<int64_t>& hash_ids,
                                  int64_t block_tokens, int n_vocab, int32_t bos) {
  std::vector<int32_t> out(static_cast<size_t>(std::max<int64_t>(input_len, 1)));
  const uint64_t range = static_cast<uint64_t>(std::max(1, n_vocab - 3));
  for (int64_t j = 0; j < static_cast<int64_t>(out.size()); ++j) {
    if (j == 0) {
      out[0] = bos;
      continue;
    }
    const int64_t b = block_tokens > 0 ? j / block_tokens : -1;
    uint64_t key[2];
    if (b >= 0 && b < static_cast<int64_t>(hash_ids.size())) {
      key[0] = static_cast<uint64_t>(hash_ids[b]) * 2;  // even: a shared block
      key[1] = static_cast<uint64_t>(j - b * block_tokens);
    } else {
      key[0] = static_cast<uint64_t>(request_index) * 2 + 1;  // odd: this request's own tokens
      key[1] = static_cast<uint64_t>(j);
    }
    out[j] = static_cast<int32_t>(3 + disagg::hash_bytes(key, sizeof(key)) % range);
  }
  return out;
}

namespace {

enum class Role { kColocated, kPrefill, kDecode };
const char* role_name(Role r) { return r == Role::kColocated ? "colocated" : r == Role::kPrefill ? "prefill" : "decode"; }

struct Instance {
  Role role;
  std::string id;        // its router address ("sim-decode-3")
  bool active = true;    // routed to (false: draining after an elastic scale-down)
  std::unique_ptr<kv::KvCacheManager> kv;
  std::unique_ptr<engine::Scheduler> sched;
  bool busy = false;     // a step is in flight (or a step start is queued)
  std::vector<engine::ScheduledSeq> plan;
  double step_start = 0;
  SimInstanceStats stats;
};

enum class EventKind { kArrival, kStepStart, kStepEnd, kKvArrived, kReplan };

struct Event {
  double t;
  uint64_t order;  // FIFO among equal times
  EventKind kind;
  int instance;    // step events, kKvArrived: the decode instance
  int64_t request;  // kArrival, kKvArrived
  bool operator>(const Event& o) const { return t != o.t ? t > o.t : order > o.order; }
};

class Simulation {
 public:
  Simulation(const Profile& p, const SimConfig& cfg, const std::vector<SimRequest>& reqs, const tokenizer::Tokenizer& tok)
      : p_(p), cfg_(cfg), reqs_(reqs), tok_(tok) {}

  SimResult run() {
    validate();
    auto policy = disagg::make_routing_policy(cfg_.routing);
    if (!policy.ok()) throw std::invalid_argument(policy.error());
    policy_ = std::move(policy.value());
    threshold_ = cfg_.remote_prefill_threshold;
    res_.records.resize(reqs_.size());
    if (elastic()) {
      if (!reqs_.empty()) push(reqs_[0].arrival_s, EventKind::kReplan, -1, 0);  // before the first arrival
    } else {
      build();
    }
    // A request reaches the engine the profile's frontend time after the client sent it
    // (HTTP, tokenisation; the SSE way back is in the same figure): its record keeps the
    // send time, so TTFT and E2E include it as `pdserve bench` sees them.
    for (size_t i = 0; i < reqs_.size(); ++i)
      push(reqs_[i].arrival_s + p_.frontend_seconds, EventKind::kArrival, -1, static_cast<int64_t>(i));
    while (!events_.empty()) {
      Event e = events_.top();
      events_.pop();
      ++res_.events;
      now_ = e.t;
      switch (e.kind) {
        case EventKind::kArrival: arrive(e.request); break;
        case EventKind::kStepStart: step_start(e.instance); break;
        case EventKind::kStepEnd: step_end(e.instance); break;
        case EventKind::kKvArrived: kv_arrived(e.instance, e.request); break;
        case EventKind::kReplan: replan(static_cast<int>(e.request)); break;
      }
    }
    for (Instance& in : inst_) {
      in.stats.preemptions = in.sched->num_preemptions();
      in.stats.prefix_queries = in.sched->prefix_queries();
      in.stats.prefix_hits = in.sched->prefix_hits();
      res_.instances.push_back(in.stats);
    }
    return std::move(res_);
  }

 private:
  bool elastic() const { return static_cast<bool>(cfg_.replan); }

  void validate() {
    if (elastic()) {
      if (!(cfg_.replan_interval_s > 0)) throw std::invalid_argument("the re-plan interval must be > 0 s");
    } else if (cfg_.colocated < 0 || cfg_.prefill < 0 || cfg_.decode < 0) throw std::invalid_argument("instance counts must be >= 0");
    else if (cfg_.colocated > 0 && (cfg_.prefill > 0 || cfg_.decode > 0))
      throw std::invalid_argument("--colocated excludes --prefill/--decode");
    else if (cfg_.colocated == 0 && cfg_.decode == 0)
      throw std::invalid_argument(cfg_.prefill > 0 ? "disaggregated serving needs --decode >= 1"
                                                   : "no instances: give --colocated K or --prefill N --decode M");
    n_ctx_ = cfg_.instance.ctx_size > 0 ? cfg_.instance.ctx_size : p_.model.n_ctx;
    if (n_ctx_ <= 0) throw std::invalid_argument("the context length is unknown: the profile has no model.n_ctx; give --ctx-size");
    if (cfg_.instance.block_size < 1) throw std::invalid_argument("--block-size must be >= 1");
    const int bs = cfg_.instance.block_size;
    const int64_t blocks_per_ctx = (n_ctx_ + bs - 1) / bs;
    blocks_ = cfg_.instance.num_kv_blocks;
    if (blocks_ <= 0) {  // as engine::Engine::create derives it
      const double per_block = std::max(1.0, p_.kv_bytes_per_token * bs);
      blocks_ = std::max(blocks_per_ctx, std::min<int64_t>(blocks_per_ctx * cfg_.instance.max_seqs,
                                                           static_cast<int64_t>((512ll << 20) / per_block)));
    }
    for (size_t i = 0; i < reqs_.size(); ++i) {
      const int n = static_cast<int>(reqs_[i].prompt.size());
      if (n < 1 || n >= n_ctx_)
        throw std::invalid_argument("request " + std::to_string(i) + " has a prompt of " + std::to_string(n) +
                                    " tokens; the context length is " + std::to_string(n_ctx_) + " (cap it with --max-input)");
      const int max_len = std::min<int64_t>(n_ctx_, int64_t{n} + std::max(1, reqs_[i].max_tokens));
      if ((max_len + bs - 1) / bs > blocks_)
        throw std::invalid_argument("request " + std::to_string(i) + " needs " + std::to_string(max_len) +
                                    " tokens of KV but an instance's pool holds " + std::to_string(blocks_ * bs));
      if (i > 0 && reqs_[i].arrival_s < reqs_[i - 1].arrival_s)
        throw std::invalid_argument("requests must be sorted by arrival");
    }
  }

  void add_instance(Role r) {
    Instance in;
    in.role = r;
    kv::KvCacheShape shape;  // a stub storage: one float per token (nothing is computed)
    shape.n_layers = 1;
    shape.n_kv_heads = 1;
    shape.head_dim = 1;
    shape.block_size = cfg_.instance.block_size;
    shape.num_blocks = static_cast<int32_t>(blocks_);
    shape.dtype = kernels::KvDtype::F32;
    in.kv = std::make_unique<kv::KvCacheManager>(shape, cfg_.instance.prefix_cache, kv::EvictionPolicy::kLru);
    engine::SchedulerConfig sc;
    sc.max_batched_tokens = cfg_.instance.max_batched_tokens;
    sc.max_seqs = cfg_.instance.max_seqs;
    sc.long_prefill_threshold = cfg_.instance.long_prefill_threshold;
    sc.policy = cfg_.instance.policy;
    in.sched = std::make_unique<engine::Scheduler>(sc, *in.kv);
    in.stats.role = role_name(r);
    in.id = std::string("sim-") + role_name(r) + "-" + std::to_string(inst_.size());
    if (elastic() && r == Role::kDecode) install_decider(*in.sched);
    inst_.push_back(std::move(in));
  }

  // The decode side's choice (engine::EngineImpl::wants_remote_prefill).
  void install_decider(engine::Scheduler& sched) {
    sched.set_remote_prefill_decider([this](engine::Sequence& s) {
      if (s.remote_tried) return false;
      const bool resumed = static_cast<int>(s.tokens.size()) != s.role_prompt_len;
      const int uncached = static_cast<int>(s.tokens.size()) - s.num_computed;
      const bool remote = !resumed && !prefill_ids_.empty() && uncached > threshold_;
      if (!remote) s.remote_tried = true;
      return remote;
    });
  }

  // The routed-to instances: front (decode / colocated, the router's view) and prefill.
  void index_active() {
    front_ids_.clear();
    prefill_ids_.clear();
    for (size_t i = 0; i < inst_.size(); ++i) {
      if (!inst_[i].active) continue;
      if (inst_[i].role == Role::kPrefill) prefill_ids_.push_back(static_cast<int>(i));
      else front_ids_.push_back(static_cast<int>(i));
    }
    views_.assign(front_ids_.size(), disagg::WorkerView{});
    for (size_t k = 0; k < front_ids_.size(); ++k) {
      views_[k].address = elastic() ? inst_[front_ids_[k]].id
                                    : std::string("sim-") + role_name(inst_[front_ids_[k]].role) + "-" + std::to_string(k);
      views_[k].healthy = true;
    }
  }

  // An interval boundary of the elastic fleet: ask the hook, then drain / add instances.
  void replan(int index) {
    SimInterval iv;
    iv.index = index;
    iv.time_s = now_;
    iv.records = &res_.records;
    for (const Instance& in : inst_) {
      iv.prefix_queries += in.sched->prefix_queries();
      iv.prefix_hits += in.sched->prefix_hits();
      if (in.active)
        iv.active.push_back({in.id, in.role == Role::kPrefill ? InstanceState::Role::Prefill : InstanceState::Role::Decode,
                             static_cast<double>(in.kv->usage().cached)});
    }
    const SimFleet f = cfg_.replan(iv);
    if (f.decode < 1 || f.prefill < 0) throw std::invalid_argument("the elastic fleet needs >= 1 decode and >= 0 prefill instances");
    for (Role r : {Role::kDecode, Role::kPrefill}) {  // as build(): decode instances first
      const int want = r == Role::kPrefill ? f.prefill : f.decode;
      int kept = 0;
      for (Instance& in : inst_) {
        if (!in.active || in.role != r) continue;
        const bool keep = kept < want && std::find(f.keep.begin(), f.keep.end(), in.id) != f.keep.end();
        if (keep) ++kept;
        else in.active = false;  // drains: finishes what it holds
      }
      for (; kept < want; ++kept) add_instance(r);
    }
    threshold_ = f.remote_prefill_threshold;
    index_active();
    if (finished_ < static_cast<int64_t>(reqs_.size())) push(now_ + cfg_.replan_interval_s, EventKind::kReplan, -1, index + 1);
  }

  void build() {
    for (int i = 0; i < cfg_.colocated; ++i) add_instance(Role::kColocated);
    for (int i = 0; i < cfg_.decode; ++i) add_instance(Role::kDecode);
    for (int i = 0; i < cfg_.prefill; ++i) add_instance(Role::kPrefill);
    index_active();
    if (!prefill_ids_.empty())
      for (int d : front_ids_) install_decider(*inst_[d].sched);
  }

  void push(double t, EventKind k, int instance, int64_t request) { events_.push({t, order_++, k, instance, request}); }

  std::unique_ptr<engine::Sequence> make_seq(int64_t r, int max_len) {
    engine::SamplingParams sp;
    sp.max_tokens = max_len - static_cast<int>(reqs_[r].prompt.size());
    auto s = std::make_unique<engine::Sequence>(r, reqs_[r].prompt, sp, nullptr, tok_, 0, max_len);
    s->arrival_time = now_;
    s->role_prompt_len = s->prompt_len;
    return s;
  }

  int max_len(int64_t r) const {
    return static_cast<int>(std::min<int64_t>(n_ctx_, int64_t(reqs_[r].prompt.size()) + std::max(1, reqs_[r].max_tokens)));
  }

  void kick(int i) {
    if (inst_[i].busy) return;
    inst_[i].busy = true;
    push(now_, EventKind::kStepStart, i, -1);
  }

  void arrive(int64_t r) {
    loadgen::RequestRecord& rec = res_.records[r];
    rec.arrival_s = rec.send_s = reqs_[r].arrival_s;
    rec.usage_prompt_tokens = static_cast<int64_t>(reqs_[r].prompt.size());
    rec.http_status = 200;
    // The router: rank the front instances (decode / colocated) by the real policy.
    for (size_t k = 0; k < front_ids_.size(); ++k) {
      const Instance& in = inst_[front_ids_[k]];
      views_[k].load = static_cast<int64_t>(in.sched->num_running() + in.sched->num_waiting() + in.sched->num_awaiting());
      const kv::KvUsage u = in.kv->usage();
      views_[k].kv_usage = u.total ? static_cast<double>(u.used) / u.total : 0;
    }
    const std::vector<int> order = policy_->rank(reqs_[r].prompt, views_);
    const int i = front_ids_[order.at(0)];
    inst_[i].stats.requests++;
    inst_[i].sched->add(make_seq(r, max_len(r)));
    kick(i);
  }

  void step_start(int i) {
    Instance& in = inst_[i];
    in.plan = in.sched->schedule();
    for (engine::Sequence* s : in.sched->take_started_remote()) start_remote(i, *s);
    if (in.plan.empty()) {
      in.busy = false;
      return;
    }
    int decodes = 0;
    double ctx = 0;
    int tokens = 0;
    chunks_.clear();
    for (const engine::ScheduledSeq& p : in.plan) {
      tokens += p.n_tokens;
      const engine::Sequence& s = *p.seq;
      if (p.n_tokens == 1 && s.num_computed >= s.prompt_len) {
        ++decodes;
        ctx += s.num_computed + 1;
      } else {
        chunks_.push_back({p.n_tokens, s.num_computed});
      }
    }
    const double dt = step_seconds(p_, decodes, decodes ? ctx / decodes : 0, chunks_);
    in.sched->observe_step(tokens, dt);
    in.step_start = now_;
    in.stats.steps++;
    in.stats.busy_s += dt;
    push(now_ + dt, EventKind::kStepEnd, i, -1);
  }

  void start_remote(int decode_instance, engine::Sequence& s) {
    // Prefill instances in turn (disagg::GrpcKvSource's round robin).
    const int pi = prefill_ids_[rr_++ % prefill_ids_.size()];
    const int64_t r = s.id;
    remote_[r] = {decode_instance, s.num_computed};
    res_.remote_prefills++;
    inst_[pi].stats.requests++;
    inst_[pi].sched->add(make_seq(r, static_cast<int>(s.tokens.size()) + 1));  // prefill + first token
    kick(pi);
  }

  void emit_token(int64_t r) {
    loadgen::RequestRecord& rec = res_.records[r];
    if (rec.first_token_s < 0) rec.first_token_s = now_;
    rec.chunk_s.push_back(now_);
  }

  void complete(int64_t r, int generated) {
    loadgen::RequestRecord& rec = res_.records[r];
    rec.end_s = now_;
    ++finished_;
    rec.usage_completion_tokens = generated;
    rec.done_marker = true;
    rec.ok = generated > 0;
  }

  void step_end(int i) {
    Instance& in = inst_[i];
    std::vector<engine::ScheduledSeq> plan = std::move(in.plan);
    in.plan.clear();
    for (const engine::ScheduledSeq& p : plan) {
      engine::Sequence& s = *p.seq;
      s.num_computed += p.n_tokens;
      in.sched->on_computed(s);
      if (!p.needs_logits) continue;
      const int64_t r = s.id;
      if (in.role == Role::kPrefill) {  // the prompt is done: its KV goes to the decode instance
        const auto [d, cached] = remote_.at(r);
        const double bytes = (static_cast<double>(s.prompt_len) - cached) * p_.kv_bytes_per_token;
        res_.kv_bytes_transferred += bytes;
        in.sched->finish(&s);
        push(now_ + p_.transfer_seconds(static_cast<std::size_t>(bytes)), EventKind::kKvArrived, d, r);
        continue;
      }
      if (s.num_generated() == 0) res_.local_prefills++;
      s.tokens.push_back(placeholder(s));
      emit_token(r);
      if (static_cast<int>(s.tokens.size()) >= s.max_len) {
        complete(r, s.num_generated());
        in.sched->finish(&s);
      }
    }
    in.busy = false;
    kick(i);
  }

  void kv_arrived(int d, int64_t r) {
    Instance& in = inst_[d];
    engine::Sequence* s = in.sched->find_awaiting(r, 0);
    if (!s) throw std::logic_error("simulator: no sequence awaits the KV of request " + std::to_string(r));
    remote_.erase(r);
    in.sched->remote_done(*s, true);
    s->tokens.push_back(placeholder(*s));  // the prefill instance's first token
    emit_token(r);
    if (static_cast<int>(s->tokens.size()) >= s->max_len) {
      complete(r, s->num_generated());
      in.sched->finish(s);
    }
    kick(d);
  }

  int32_t placeholder(const engine::Sequence& s) const { return 3 + s.num_generated() % 7; }

  const Profile& p_;
  const SimConfig& cfg_;
  const std::vector<SimRequest>& reqs_;
  const tokenizer::Tokenizer& tok_;
  std::unique_ptr<disagg::RoutingPolicy> policy_;
  int n_ctx_ = 0;
  int threshold_ = 0;     // the decode side's remote-prefill threshold in force
  int64_t finished_ = 0;  // requests completed
  int64_t blocks_ = 0;
  std::vector<Instance> inst_;
  std::vector<int> front_ids_, prefill_ids_;
  std::vector<disagg::WorkerView> views_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  uint64_t order_ = 0;
  double now_ = 0;
  size_t rr_ = 0;
  std::unordered_map<int64_t, std::pair<int, int>> remote_;  // request → (decode instance, its cached tokens)
  std::vector<std::pair<int, int>> chunks_;
  SimResult res_;
};

}  // namespace

SimResult simulate(const Profile& profile, const SimConfig& cfg, const std::vector<SimRequest>& requests,
                   const tokenizer::Tokenizer& tok) {
  Simulation sim(profile, cfg, requests, tok);
  return sim.run();
}

}  // namespace pdserve::planner
