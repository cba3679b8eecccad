#include "planner/profiler.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <stdexcept>
#include <thread>

#include "base/auto_reset_event.h"
#include "base/clock.h"
#include "disagg/kv_codec.h"
#include "gguf/gguf.h"
#include "kernels/parallel.h"
#include "kv/kv_cache.h"
#include "model/model_config.h"
#include "planner/profile_frontend.h"

namespace pdserve::planner {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  if (v.empty()) return 0;
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) {
      auto c = line.find(':');
      if (c != std::string::npos) return line.substr(line.find_first_not_of(' ', c + 1));
    }
  return "unknown";
}

std::string basename_of(const std::string& path) {
  auto s = path.find_last_of('/');
  return s == std::string::npos ? path : path.substr(s + 1);
}

/// Runs one request to its end; returns the times (now_seconds) the engine pushed the deltas
/// carrying tokens (not when this thread saw them: a step can be shorter than a wake-up).
struct Run {
  std::shared_ptr<engine::RequestStream> stream;
  std::vector<double> token_times;
  int cached_tokens = 0;
  bool done = false;
  std::string error;
};

/// Polls every run until all have finished (waking on pushes).
void drain(std::vector<Run>& runs, AutoResetEvent& ev) {
  const double deadline = now_seconds() + 300;
  size_t open = runs.size();
  while (open > 0) {
    ev.wait_until(std::chrono::steady_clock::now() + std::chrono::milliseconds(2));
    const double t = now_seconds();
    if (t > deadline) throw std::runtime_error("profile: a measurement request did not finish within 300 s");
    for (Run& r : runs) {
      if (r.done) continue;
      engine::StreamDelta d;
      while (r.stream->next(d, std::chrono::milliseconds(0))) {
        if (!d.tokens.empty())
          for (size_t k = 0; k < d.tokens.size(); ++k) r.token_times.push_back(d.pushed_at);
        r.cached_tokens = d.cached_tokens;
        if (d.finish != engine::FinishReason::None) {
          if (d.finish == engine::FinishReason::Error || d.finish == engine::FinishReason::Abort)
            r.error = d.error.empty() ? "aborted" : d.error;
          r.done = true;
          --open;
          break;
        }
      }
    }
  }
  for (Run& r : runs)
    if (!r.error.empty()) throw std::runtime_error("profile: a measurement request failed: " + r.error);
}

class Prober {
 public:
  Prober(engine::Engine& e, int n_vocab, uint64_t seed) : e_(e), rng_(seed), tok_(3, n_vocab - 1) {}

  std::vector<int32_t> random_tokens(int n) {
    std::vector<int32_t> v(n);
    for (auto& t : v) t = tok_(rng_);
    return v;
  }

  /// Submits `prompts` together (greedy, ignore_eos, max_tokens each) and waits for all.
  std::vector<Run> run(const std::vector<std::vector<int32_t>>& prompts, int max_tokens) {
    engine::SamplingParams sp;
    sp.temperature = 0;
    sp.max_tokens = max_tokens;
    sp.ignore_eos = true;
    auto ev = std::make_shared<AutoResetEvent>();
    std::vector<Run> runs(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
      auto s = e_.submit(prompts[i], sp);
      if (!s.ok()) throw std::runtime_error("profile: submit failed: " + s.error());
      runs[i].stream = s.value();
      runs[i].stream->set_push_event(ev);
    }
    drain(runs, *ev);
    return runs;
  }

 private:
  engine::Engine& e_;
  std::mt19937_64 rng_;
  std::uniform_int_distribution<int32_t> tok_;
};

/// A connected loopback TCP pair (client, server).
std::pair<int, int> loopback_pair() {
  int ls = ::socket(AF_INET, SOCK_STREAM, 0);
  if (ls < 0) throw std::runtime_error("profile: socket() failed");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  if (::bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(ls, 1) != 0 ||
      ::getsockname(ls, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(ls);
    throw std::runtime_error("profile: cannot listen on loopback");
  }
  int c = ::socket(AF_INET, SOCK_STREAM, 0);
  if (c < 0 || ::connect(c, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(ls);
    throw std::runtime_error("profile: cannot connect on loopback");
  }
  int s = ::accept(ls, nullptr, nullptr);
  ::close(ls);
  if (s < 0) throw std::runtime_error("profile: accept() failed");
  int one = 1;
  ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return {c, s};
}

bool write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

bool read_all(int fd, char* p, size_t n) {
  while (n > 0) {
    ssize_t k = ::recv(fd, p, n, 0);
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

/// Seconds to move `bytes` of KV (whole blocks of `block_bytes` per layer, K and V) as
/// described at the top of profiler.h.
double time_transfer(size_t bytes, size_t block_bytes, int n_layers) {
  const size_t per_layer = std::max<size_t>(1, bytes / (2 * static_cast<size_t>(n_layers)));
  const size_t nblocks = std::max<size_t>(1, per_layer / block_bytes);
  std::vector<uint8_t> k(nblocks * block_bytes), v(nblocks * block_bytes);
  std::mt19937 rng(7);
  for (auto& x : k) x = static_cast<uint8_t>(rng());
  for (auto& x : v) x = static_cast<uint8_t>(rng());
  std::vector<const uint8_t*> kp, vp;
  for (size_t b = 0; b < nblocks; ++b) {
    kp.push_back(k.data() + b * block_bytes);
    vp.push_back(v.data() + b * block_bytes);
  }
  auto [c, s] = loopback_pair();
  bool ok = true;
  std::string err;
  const double t0 = now_seconds();
  std::thread rx([&, s = s] {
    std::string buf, kk, vv;
    for (int l = 0; l < n_layers; ++l) {
      uint64_t n = 0;
      if (!read_all(s, reinterpret_cast<char*>(&n), sizeof(n))) { ok = false; return; }
      buf.resize(n);
      if (!read_all(s, buf.data(), n)) { ok = false; return; }
      disagg::CacheBlock m;
      if (!m.ParseFromString(buf)) { ok = false; err = "parse"; return; }
      Status st = disagg::decode_blocks(m, block_bytes, kk, vv);
      if (!st.ok()) { ok = false; err = st.message(); return; }
    }
  });
  for (int l = 0; l < n_layers && ok; ++l) {
    disagg::CacheBlock m = disagg::encode_blocks("profile", l, 0, kp, vp, block_bytes, "none", 1);
    std::string wire = m.SerializeAsString();
    uint64_t n = wire.size();
    if (!write_all(c, reinterpret_cast<const char*>(&n), sizeof(n)) || !write_all(c, wire.data(), wire.size())) ok = false;
  }
  rx.join();
  const double dt = now_seconds() - t0;
  ::close(c);
  ::close(s);
  if (!ok) throw std::runtime_error("profile: loopback KV transfer failed" + (err.empty() ? "" : ": " + err));
  return dt;
}

}  // namespace

ProfileModel describe_model(const engine::EngineConfig& cfg) {
  auto f = gguf::GgufFile::open(cfg.model_path);
  if (!f.ok()) throw std::runtime_error(f.error());
  auto mc = model::ModelConfig::from_gguf(*f.value());
  if (!mc.ok()) throw std::runtime_error(cfg.model_path + ": " + mc.error());
  const model::ModelConfig& c = mc.value();
  ProfileModel m;
  m.file = basename_of(cfg.model_path);
  m.architecture = c.arch;
  m.n_layer = c.n_layer;
  m.n_embd = c.n_embd;
  m.n_head = c.n_head;
  m.n_head_kv = c.n_head_kv;
  m.head_dim = c.head_dim;
  m.n_vocab = c.n_vocab;
  std::map<std::string, uint64_t> bytes;  // weight bytes per type (2-D tensors)
  for (const auto& t : f.value()->tensors())
    if (t.dims.size() >= 2) bytes[gguf::type_name(t.type)] += t.nbytes;
  uint64_t best = 0;
  for (auto& [name, b] : bytes)
    if (b > best) {
      best = b;
      m.weight_type = name;
    }
  std::transform(m.weight_type.begin(), m.weight_type.end(), m.weight_type.begin(), ::tolower);
  m.kv_dtype = kv::kv_dtype_name(cfg.kv_dtype);
  m.block_size = cfg.block_size;
  m.n_ctx = cfg.ctx_size > 0 ? cfg.ctx_size : c.n_ctx;
  return m;
}

Profile measure_profile(const ProfileOptions& o) {
  Profile p;
  p.model = describe_model(o.engine);
  p.machine.threads = o.engine.threads > 0 ? o.engine.threads : kernels::available_cpus();  // the engine's default
  p.machine.cpu = cpu_model();
  auto created = engine::Engine::create(o.engine);
  if (!created.ok()) throw std::runtime_error(created.error());
  engine::Engine& e = *created.value();
  const engine::EngineStats st = e.stats();
  const int n_ctx = e.context_length();
  p.model.n_ctx = n_ctx;
  const int bs = o.engine.block_size;
  p.kv_bytes_per_token = static_cast<double>(st.kv_block_bytes) / bs;
  const int64_t pool_tokens = st.kv_blocks_total * bs;
  const int budget = o.engine.max_batched_tokens;
  const int reps = std::max(1, o.repeats);
  auto note = [&](const std::string& s) {
    if (o.progress) o.progress(s);
  };
  p.machine.idle_gap_seconds = std::max(0.0, o.idle_gap_seconds);
  auto idle = [&] {  // the engine has nothing to run meanwhile (its loop waits on its event)
    if (p.machine.idle_gap_seconds > 0) std::this_thread::sleep_for(std::chrono::duration<double>(p.machine.idle_gap_seconds));
  };
  Prober pr(e, p.model.n_vocab, 1);
  pr.run({pr.random_tokens(8)}, 2);  // warm-up: every weight page touched

  for (int cached0 : o.cached) {
    const int cached = cached0 / bs * bs;
    for (int c : o.chunks) {
      if (c < 1 || c > budget || cached + c >= n_ctx || cached + c + 2 > pool_tokens) continue;
      std::vector<double> ts;
      for (int r = 0; r < reps; ++r) {
        std::vector<int32_t> prefix = pr.random_tokens(cached);
        if (cached > 0) {
          std::vector<int32_t> warm = prefix;
          warm.push_back(pr.random_tokens(1)[0]);
          pr.run({warm}, 1);  // its `cached` tokens (whole blocks) are now in the prefix cache
        }
        std::vector<int32_t> prompt = prefix;
        std::vector<int32_t> tail = pr.random_tokens(c);
        prompt.insert(prompt.end(), tail.begin(), tail.end());
        idle();
        const double t0 = now_seconds();
        std::vector<Run> runs = pr.run({prompt}, 1);
        if (runs[0].token_times.empty()) throw std::runtime_error("profile: a prefill produced no token");
        if (runs[0].cached_tokens != cached)
          throw std::runtime_error("profile: expected a prefix-cache hit of " + std::to_string(cached) + " tokens, got " +
                                   std::to_string(runs[0].cached_tokens) + " (is the prefix cache off?)");
        ts.push_back(runs[0].token_times[0] - t0);
      }
      p.prefill.push_back({c, cached, median(ts)});
      note("prefill chunk " + std::to_string(c) + " after " + std::to_string(cached) + " cached: " +
           std::to_string(p.prefill.back().seconds * 1e3) + " ms");
    }
  }

  const int steps = std::max(2, o.decode_steps);
  for (int n : o.contexts) {
    for (int b : o.batches) {
      const int len = n + steps + 2;
      if (b < 1 || b > o.engine.max_seqs || len >= n_ctx || int64_t(b) * ((len + bs - 1) / bs) > st.kv_blocks_total) continue;
      std::vector<double> ts;
      // A sample with too few tokens while all b decode is dropped (below) and measured
      // again, up to three tries per repeat, so that a loaded machine still yields the point.
      for (int tries = 0; static_cast<int>(ts.size()) < reps && tries < 3 * reps; ++tries) {
        // The b prompts share their leading whole blocks, which a first run puts in the
        // prefix cache, so that the b prefills stay short; decode reads every sequence's
        // context as if it were its own.
        const int shared = (n - 1) / bs * bs;
        std::vector<int32_t> prefix = pr.random_tokens(shared);
        if (shared > 0) {
          std::vector<int32_t> warm = prefix;
          warm.push_back(pr.random_tokens(1)[0]);
          pr.run({warm}, 1);
        }
        std::vector<std::vector<int32_t>> prompts;
        for (int i = 0; i < b; ++i) {
          prompts.push_back(prefix);
          std::vector<int32_t> tail = pr.random_tokens(n - shared);
          prompts.back().insert(prompts.back().end(), tail.begin(), tail.end());
        }
        idle();
        std::vector<Run> runs = pr.run(prompts, steps + 2);
        double all_started = 0, first_end = 1e300;
        for (const Run& x : runs) {
          if (x.token_times.empty()) throw std::runtime_error("profile: a decode produced no token");
          all_started = std::max(all_started, x.token_times.front());
          first_end = std::min(first_end, x.token_times.back());
        }
        std::vector<double> in_window;  // stream 0's token times while all b decode
        for (double t : runs[0].token_times)
          if (t >= all_started && t <= first_end) in_window.push_back(t);
        // The times are the engine's pushes, so a consumer that lagged does not merge steps.
        if (in_window.size() >= 3 && in_window.back() > in_window.front())
          ts.push_back((in_window.back() - in_window.front()) / double(in_window.size() - 1));
      }
      if (ts.empty()) continue;
      p.decode.push_back({b, n + steps / 2, median(ts)});
      note("decode batch " + std::to_string(b) + " at context " + std::to_string(n + steps / 2) + ": " +
           std::to_string(p.decode.back().step_seconds * 1e3) + " ms/step");
    }
  }

  if (o.frontend_requests > 0) {
    p.frontend_seconds = measure_frontend_seconds(e, o.frontend_prompt_tokens, o.frontend_requests);
    note("frontend (HTTP, tokenisation, SSE, client) per request: " + std::to_string(p.frontend_seconds * 1e3) + " ms");
  }

  const engine::KvLayout layout = e.kv_layout();
  e.shutdown();
  for (size_t bytes : o.transfer_bytes) {
    std::vector<double> ts;
    const size_t block_bytes = layout.block_bytes > 0 ? layout.block_bytes : 4096;
    const int layers = std::max(1, layout.n_layers);
    const size_t nblocks = std::max<size_t>(1, bytes / (2 * layers) / block_bytes);
    const size_t actual = nblocks * block_bytes * 2 * layers;
    for (int r = 0; r < reps; ++r) ts.push_back(time_transfer(actual, block_bytes, layers));
    p.transfer.push_back({actual, median(ts)});
    note("transfer " + std::to_string(actual) + " bytes: " + std::to_string(p.transfer.back().seconds * 1e3) + " ms");
  }
  if (p.prefill.empty() || p.decode.empty())
    throw std::runtime_error("profile: no prefill or decode point fits the context (" + std::to_string(n_ctx) +
                             " tokens) and the KV pool; lower --chunks/--contexts");
  return p;
}

}  // namespace pdserve::planner
