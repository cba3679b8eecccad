// Speculative decoding throughput (issue #18): `batch` greedy requests with distinct
// prompts decoded together through the engine, plainly and with each proposer; prints one
// Markdown table row per (batch, proposer): decode tokens/s (median of the repeats), the
// ratio to plain decoding, the acceptance rate (accepted / proposed tokens), the tokens
// emitted per verification, the share of decode rows run for rejected draft tokens, and
// whether every output equals plain decoding's. The log (stderr) also has each run's
// process CPU time per decode token, which time slices lost to other processes do not
// inflate. Proposer "plain" runs plain decoding once
// more as if it were a proposer: its ratio to off is the run-to-run noise.
//
//   build/bench/spec_bench MODEL story|copy [--batches 1,8,32] [--tokens N] [--repeats R]
//       [--proposers off,plain,ngram,layerskip:L,draft:FILE] [--spec-k K] [--no-spec-adaptive]
//       [--threads T] [--label NAME] [--warmup N]
//
//   story: a story opening to continue (stories260K's training domain).
//   copy:  a passage and the request to repeat it (an input-copying task; prompt lookup's
//          case).
// Decode tokens/s counts the tokens emitted after every request has its first token, over
// the time from then to the last one's end (prefill, which speculation does not change,
// stays out). Runs are interleaved (off, p1, ..., pn, then pn, ..., p1, off, ...) with a
// fresh engine each, so drift in the machine's load and the place in the order hit all
// proposers alike. Before the timed batch
// each engine serves one untimed request of --warmup tokens (default 64; 0: none) with
// another prompt, as a running server has: the speculative cost model (spec_cost.h) is
// then fitted, and plain decoding gets the same warm-up. Exit status 1 when some
// output differs from plain decoding's.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "base/auto_reset_event.h"
#include "base/log.h"
#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

using namespace pdserve;

namespace {

using Clock = std::chrono::steady_clock;

/// CPU seconds this process has used (all threads, user + system).
double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

struct Run {
  double decode_tps = 0;   // tokens after all first tokens / that window
  double cpu_per_token = 0;  // process CPU seconds in that window / its tokens
  double e2e_tps = 0;      // all tokens / submit-to-end
  std::vector<std::vector<int32_t>> outputs;
  engine::MetricsSnapshot metrics;
};

/// Prompt i of `kind` (distinct for i < 32).
std::string prompt_text(const std::string& kind, int i) {
  static const char* names[] = {"Lily", "Tom", "Sue", "Ben", "Mia", "Max", "Anna", "Sam"};
  static const char* things[] = {"ball", "kite", "box", "cat"};
  static const char* colors[] = {"red", "blue", "green", "yellow"};
  const std::string name = names[i % 8], thing = things[(i / 8) % 4], color = colors[(i / 8 + i) % 4];
  if (kind == "copy")
    return "Repeat the story. Story: " + name + " had a big " + color + " " + thing + ". " + name +
           " liked to play with the " + thing + " in the park. One day the " + thing +
           " went over the fence. " + name + " was sad. Then a kind lady gave the " + thing + " back. " + name +
           " said thank you and smiled. Repeat: " + name + " had a big " + color + " " + thing + ".";
  return "Once upon a time, there was a little girl named " + name + ". She had a " + color + " " + thing +
         " and she loved to";
}

Run run(const engine::EngineConfig& cfg, const std::string& kind, int batch, int max_tokens, int warmup) {
  auto e = engine::Engine::create(cfg);
  if (!e.ok()) {
    std::fprintf(stderr, "error: %s\n", e.error().c_str());
    std::exit(2);
  }
  const auto& tok = e.value()->tokenizer();
  engine::SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < batch; ++i) prompts.push_back(tok.encode(prompt_text(kind, i), tok.vocab().add_bos, false));
  if (warmup > 0) {  // an engine that has served before: its cost model is fitted
    engine::SamplingParams w = p;
    w.max_tokens = warmup;
    auto s = e.value()->submit(tok.encode(prompt_text(kind, 1000), tok.vocab().add_bos, false), w);
    engine::StreamDelta d;
    while (s.ok()) {
      if (!s.value()->next(d, std::chrono::milliseconds(1000))) continue;
      if (d.finish != engine::FinishReason::None) break;
    }
  }
  const engine::MetricsSnapshot before = e.value()->metrics();  // the warm-up's drafts stay out
  auto ev = std::make_shared<AutoResetEvent>();
  Run r;
  r.outputs.resize(batch);
  std::vector<std::shared_ptr<engine::RequestStream>> streams;
  std::vector<bool> done(batch, false);
  const auto t0 = Clock::now();
  for (int i = 0; i < batch; ++i) {
    auto s = e.value()->submit(prompts[i], p);
    if (!s.ok()) {
      std::fprintf(stderr, "error: %s\n", s.error().c_str());
      std::exit(2);
    }
    s.value()->set_push_event(ev);
    streams.push_back(s.value());
  }
  int n_done = 0, n_started = 0;
  int64_t after_start = 0;  // tokens emitted once every request had its first token
  Clock::time_point t_started{};
  double cpu_started = 0;
  while (n_done < batch) {
    ev->wait_until(Clock::now() + std::chrono::milliseconds(5));
    engine::StreamDelta d;
    for (int i = 0; i < batch; ++i) {
      while (!done[i] && streams[i]->next(d, std::chrono::milliseconds(0))) {
        if (n_started == batch) after_start += static_cast<int64_t>(d.tokens.size());
        const bool first = r.outputs[i].empty() && !d.tokens.empty();
        r.outputs[i].insert(r.outputs[i].end(), d.tokens.begin(), d.tokens.end());
        if (first && ++n_started == batch) t_started = Clock::now(), cpu_started = process_cpu_seconds();
        if (d.finish != engine::FinishReason::None) done[i] = true, ++n_done;
      }
    }
  }
  const auto t1 = Clock::now();
  r.cpu_per_token = (process_cpu_seconds() - cpu_started) / std::max<int64_t>(1, after_start);
  int64_t total = 0;
  for (const auto& o : r.outputs) total += static_cast<int64_t>(o.size());
  r.e2e_tps = total / std::chrono::duration<double>(t1 - t0).count();
  r.decode_tps = after_start / std::max(1e-9, std::chrono::duration<double>(t1 - t_started).count());
  r.metrics = e.value()->metrics();
  r.metrics.spec_drafts -= before.spec_drafts;
  r.metrics.spec_draft_tokens -= before.spec_draft_tokens;
  r.metrics.spec_accepted_tokens -= before.spec_accepted_tokens;
  return r;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, sep);)
    if (!x.empty()) out.push_back(x);
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// `cfg` with proposer spec "off", "plain" (off again, as a control of the noise), "ngram",
/// "layerskip:L" or "draft:FILE".
engine::EngineConfig with_proposer(engine::EngineConfig cfg, const std::string& spec) {
  const auto colon = spec.find(':');
  const std::string m = spec.substr(0, colon), arg = colon == std::string::npos ? "" : spec.substr(colon + 1);
  if (m == "off" || m == "plain") cfg.spec.method = engine::SpecMethod::kOff;
  else if (m == "ngram") cfg.spec.method = engine::SpecMethod::kNgram;
  else if (m == "layerskip") cfg.spec.method = engine::SpecMethod::kLayerSkip, cfg.spec.draft_layers = std::atoi(arg.c_str());
  else if (m == "draft") cfg.spec.method = engine::SpecMethod::kDraft, cfg.spec.draft_model = arg;
  else {
    std::fprintf(stderr, "error: --proposers: unknown proposer '%s' (off, ngram, layerskip:L, draft:FILE)\n", spec.c_str());
    std::exit(2);
  }
  return cfg;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: %s MODEL story|copy [--batches 1,8,32] [--tokens N] [--repeats R] "
                 "[--proposers off,ngram,layerskip:L,draft:FILE] [--spec-k K] [--no-spec-adaptive] [--threads T] "
                 "[--label NAME] [--warmup N]\n",
                 argv[0]);
    return 2;
  }
  set_log_level("warn");  // logs to stderr; the table is stdout
  engine::EngineConfig cfg;
  cfg.model_path = argv[1];
  const std::string kind = argv[2];
  if (kind != "story" && kind != "copy") {
    std::fprintf(stderr, "error: task must be story or copy; got '%s'\n", kind.c_str());
    return 2;
  }
  std::vector<int> batches = {1, 8, 32};
  int tokens = 128, repeats = 3, warmup = 64;
  std::vector<std::string> proposers = {"ngram"};
  std::string label = cfg.model_path.substr(cfg.model_path.find_last_of('/') + 1);
  for (int i = 3; i < argc; ++i) {
    const std::string f = argv[i];
    if (f == "--no-spec-adaptive") {
      cfg.spec.adaptive = false;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "error: %s needs a value\n", f.c_str());
      return 2;
    }
    const std::string v = argv[++i];
    if (f == "--batches") {
      batches.clear();
      for (const auto& b : split(v, ',')) batches.push_back(std::atoi(b.c_str()));
    } else if (f == "--tokens") tokens = std::atoi(v.c_str());
    else if (f == "--warmup") warmup = std::max(0, std::atoi(v.c_str()));
    else if (f == "--repeats") repeats = std::max(1, std::atoi(v.c_str()));
    else if (f == "--proposers") proposers = split(v, ',');
    else if (f == "--spec-k") cfg.spec.k = std::atoi(v.c_str());
    else if (f == "--threads") cfg.threads = std::atoi(v.c_str());
    else if (f == "--label") label = v;
    else {
      std::fprintf(stderr, "error: unknown flag %s\n", f.c_str());
      return 2;
    }
  }
  proposers.erase(std::remove(proposers.begin(), proposers.end(), "off"), proposers.end());
  bool all_identical = true;
  std::printf(
      "| model | task | batch | proposer | decode tok/s | vs off | acceptance | tokens / verification | rows thrown "
      "away | outputs |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  for (const int batch : batches) {
    std::vector<double> off_tps;
    std::vector<std::vector<double>> tps(proposers.size());
    std::vector<engine::MetricsSnapshot> last(proposers.size());
    std::vector<bool> same(proposers.size(), true);
    std::vector<int64_t> emitted(proposers.size(), 0);
    for (int rep = 0; rep < repeats; ++rep) {
      // Even repeats run off first, odd ones last (and the proposers in reverse), so that
      // a place in the order (a warm cache, the load of the moment) favours no one.
      const bool off_last = rep % 2 == 1;
      std::vector<Run> runs(proposers.size());
      Run base;
      if (!off_last) base = run(cfg, kind, batch, tokens, warmup);
      for (size_t n = 0; n < proposers.size(); ++n) {
        const size_t j = off_last ? proposers.size() - 1 - n : n;
        runs[j] = run(with_proposer(cfg, proposers[j]), kind, batch, tokens, warmup);
      }
      if (off_last) base = run(cfg, kind, batch, tokens, warmup);
      off_tps.push_back(base.decode_tps);
      for (size_t j = 0; j < proposers.size(); ++j) {
        const Run& s = runs[j];
        tps[j].push_back(s.decode_tps);
        last[j] = s.metrics;
        emitted[j] = 0;
        for (const auto& o : s.outputs) emitted[j] += static_cast<int64_t>(o.size());
        same[j] = same[j] && s.outputs == base.outputs;
        std::fprintf(stderr, "# batch %d rep %d: off %.1f, %s %.1f tok/s (e2e %.1f / %.1f; CPU us/token %.1f / %.1f)\n",
                     batch, rep, base.decode_tps, proposers[j].c_str(), s.decode_tps, base.e2e_tps, s.e2e_tps,
                     1e6 * base.cpu_per_token, 1e6 * s.cpu_per_token);
      }
    }
    const double off = median(off_tps);
    std::printf("| %s | %s | %d | off | %.1f | 1.00 | | | | |\n", label.c_str(), kind.c_str(), batch, off);
    for (size_t j = 0; j < proposers.size(); ++j) {
      const auto& m = last[j];
      const double t = median(tps[j]);
      std::string name = proposers[j];
      if (name.rfind("draft:", 0) == 0) name = "draft " + name.substr(name.find_last_of('/') + 1);
      if (name == "plain") name = "off again (control)";
      // Rows run for the outputs ≈ one per emitted token + one per rejected draft token.
      const int64_t rejected = m.spec_draft_tokens - m.spec_accepted_tokens;
      std::printf("| %s | %s | %d | %s | %.1f | %.2f | %.1f %% (%lld / %lld) | %.2f | %.2f %% | %s |\n", label.c_str(),
                  kind.c_str(), batch, name.c_str(), t, t / off,
                  m.spec_draft_tokens ? 100.0 * m.spec_accepted_tokens / m.spec_draft_tokens : 0.0,
                  static_cast<long long>(m.spec_accepted_tokens), static_cast<long long>(m.spec_draft_tokens),
                  m.spec_drafts ? 1.0 + static_cast<double>(m.spec_accepted_tokens) / m.spec_drafts : 0.0,
                  100.0 * rejected / std::max<int64_t>(1, emitted[j] + rejected), same[j] ? "identical" : "DIFFER");
      all_identical = all_identical && same[j];
    }
    std::fflush(stdout);
  }
  return all_identical ? 0 : 1;
}
