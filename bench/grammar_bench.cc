// Structured-output cost (issue #17): the allowed-token mask per decode step on real
// vocabularies (synth-llama-small: 32,000 SPM tokens; synth-qwen2-small: 50,257 BPE
// tokens), for one sequence and for 32 sequences at different points of the same
// schema, cold (a grammar seen for the first time: every state's mask is computed) and
// warm (the states are memoised, as for the next request with the same schema), plus
// masked vs unmasked sampling.
//   build/bench/grammar_bench [--benchmark_filter=...]   (run from the repo root)
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <stdexcept>

#include "engine/grammar_cache.h"
#include "engine/sampler.h"
#include "gguf/gguf.h"
#include "grammar/json_schema_to_gbnf.h"

using namespace pdserve;

namespace {

const char* kSchema = R"({"type":"object","properties":{
  "name":{"type":"string","maxLength":24},"age":{"type":"integer"},"email":{"type":"string"},
  "tags":{"type":"array","items":{"enum":["red","green","blue"]},"maxItems":4},
  "address":{"type":"object","properties":{"street":{"type":"string"},"zip":{"type":"string","pattern":"^[0-9]{5}$"}},
             "required":["street","zip"]},
  "active":{"type":"boolean"}},"required":["name","age","email","tags","address","active"]})";

struct Fixture {
  std::unique_ptr<tokenizer::Tokenizer> tok;
  std::string gbnf;
  int n_vocab = 0;
  /// Token paths through the grammar (random walks over allowed tokens), one per sequence.
  std::vector<std::vector<int32_t>> paths;
};

Fixture& fixture(const std::string& model) {
  static std::map<std::string, Fixture> cache;
  auto it = cache.find(model);
  if (it != cache.end()) return it->second;
  Fixture& f = cache[model];
  auto file = gguf::GgufFile::open(model);
  if (!file.ok()) throw std::runtime_error(file.error());
  auto t = tokenizer::Tokenizer::from_gguf(**file);
  if (!t.ok()) throw std::runtime_error(t.error());
  f.tok = std::move(*t);
  f.n_vocab = f.tok->vocab().size();
  f.gbnf = *grammar::json_schema_to_gbnf(nlohmann::json::parse(kSchema));
  engine::GrammarCache gc(*f.tok, f.n_vocab);
  auto m = *gc.get(f.gbnf);
  std::mt19937 rng(1);
  for (int s = 0; s < 32; ++s) {
    std::vector<int32_t> path;
    int32_t st = m->initial_state();
    for (int step = 0; step < 64; ++step) {
      const uint32_t* mask = m->mask(st);
      std::vector<int32_t> ok;
      for (int id = 0; id < f.n_vocab; ++id)
        if ((mask[id >> 5] >> (id & 31)) & 1 && !f.tok->is_eog(id)) ok.push_back(id);
      if (ok.empty()) break;
      const int32_t tok = ok[rng() % ok.size()];
      path.push_back(tok);
      st = m->advance_token(st, tok);
    }
    f.paths.push_back(std::move(path));
  }
  return f;
}

/// One "decode step" = for each of `batch` sequences: its mask, then advance by its
/// next token. Reported per step (all sequences).
void BM_MaskStep(benchmark::State& state, const std::string& model, bool cold) {
  Fixture& f = fixture(model);
  const int batch = static_cast<int>(state.range(0));
  engine::GrammarCache warm_cache(*f.tok, f.n_vocab);
  int64_t steps = 0;
  for (auto _ : state) {
    state.PauseTiming();
    engine::GrammarCache cold_cache(*f.tok, f.n_vocab);
    auto m = *(cold ? cold_cache : warm_cache).get(f.gbnf);
    std::vector<int32_t> st(batch, m->initial_state());
    state.ResumeTiming();
    const size_t len = f.paths[0].size();
    for (size_t step = 0; step < len; ++step) {
      for (int b = 0; b < batch; ++b) {
        const auto& path = f.paths[b % f.paths.size()];
        if (step >= path.size()) continue;
        benchmark::DoNotOptimize(m->mask(st[b]));
        st[b] = m->advance_token(st[b], path[step]);
      }
      ++steps;
    }
  }
  // Microseconds of CPU time per decode step (all `batch` sequences).
  state.counters["us_per_step"] = benchmark::Counter(static_cast<double>(steps) / 1e6, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["steps"] = static_cast<double>(f.paths[0].size());
}

/// Greedy and sampled selection over 50,257 / 32,000 logits with and without a mask
/// (a mask from the middle of a JSON string: most tokens allowed).
void BM_Sample(benchmark::State& state, const std::string& model, bool masked, float temperature) {
  Fixture& f = fixture(model);
  engine::GrammarCache gc(*f.tok, f.n_vocab);
  auto m = *gc.get(f.gbnf);
  int32_t st = m->initial_state();
  for (char c : std::string("{\"active\": true, \"address\": {\"street\": \"ab")) st = m->advance_byte(st, static_cast<uint8_t>(c));
  if (st < 0) throw std::runtime_error("the bench prefix does not match the schema");
  const uint32_t* mask = m->mask(st);
  std::vector<float> logits(f.n_vocab);
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  for (float& x : logits) x = nd(rng);
  engine::SamplingParams p;
  p.temperature = temperature;
  std::mt19937_64 srng(5);
  for (auto _ : state) benchmark::DoNotOptimize(engine::sample_token(logits.data(), f.n_vocab, p, srng, masked ? mask : nullptr));
}

/// The sampler's logits under penalties (engine::adjust_logits: logit_bias, the repetition
/// penalty over the whole sequence, presence / frequency over the output) for a sequence of
/// state.range(0) tokens, half prompt and half output, over a 50,257-id vocabulary. `mode`
/// 0: presence / frequency and the bias; 1: and the repetition penalty; 2: mode 0 counted
/// as before 56ee193 (a sort of the output per token).
void BM_AdjustLogits(benchmark::State& state, int mode) {
  const bool sorted = mode == 2;
  const int n_vocab = 50257;
  const size_t n = static_cast<size_t>(state.range(0));
  std::mt19937 rng(7);
  std::vector<float> logits(n_vocab), out(n_vocab);
  std::normal_distribution<float> nd;
  for (float& x : logits) x = nd(rng);
  std::vector<int32_t> tokens(n);
  std::uniform_int_distribution<int32_t> id(0, 8000);  // repeats, as text has
  for (auto& t : tokens) t = id(rng);
  engine::SamplingParams p;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.5f;
  if (mode == 1) p.repetition_penalty = 1.2f;
  for (int i = 0; i < 16; ++i) p.logit_bias.emplace_back(i * 97, 1.0f);
  for (auto _ : state) {
    if (!sorted) {
      engine::adjust_logits(logits.data(), n_vocab, p, tokens.data(), n, n / 2, out.data());
    } else {  // frequency / presence only, counted by sorting the output (the code of 167e6db)
      std::memcpy(out.data(), logits.data(), n_vocab * sizeof(float));
      for (const auto& [i, b] : p.logit_bias) out[i] += b;
      std::vector<int32_t> s(tokens.begin() + static_cast<std::ptrdiff_t>(n / 2), tokens.end());
      std::sort(s.begin(), s.end());
      for (size_t i = 0; i < s.size();) {
        size_t j = i;
        while (j < s.size() && s[j] == s[i]) ++j;
        out[s[i]] -= static_cast<float>(j - i) * p.frequency_penalty + p.presence_penalty;
        i = j;
      }
    }
    benchmark::DoNotOptimize(out.data());
  }
}

const std::string kLlama = "../shared/models/synth-llama-small-q8_0.gguf";
const std::string kQwen = "../shared/models/synth-qwen2-small-q8_0.gguf";

}  // namespace

BENCHMARK_CAPTURE(BM_MaskStep, llama32k_warm, kLlama, false)->Arg(1)->Arg(32)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_MaskStep, llama32k_cold, kLlama, true)->Arg(1)->Arg(32)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK_CAPTURE(BM_MaskStep, qwen50k_warm, kQwen, false)->Arg(1)->Arg(32)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_MaskStep, qwen50k_cold, kQwen, true)->Arg(1)->Arg(32)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK_CAPTURE(BM_Sample, qwen50k_greedy_unmasked, kQwen, false, 0.f);
BENCHMARK_CAPTURE(BM_Sample, qwen50k_greedy_masked, kQwen, true, 0.f);
BENCHMARK_CAPTURE(BM_Sample, qwen50k_t1_unmasked, kQwen, false, 1.f);
BENCHMARK_CAPTURE(BM_Sample, qwen50k_t1_masked, kQwen, true, 1.f);

BENCHMARK_CAPTURE(BM_AdjustLogits, openai, 0)->Arg(256)->Arg(4096)->Arg(16384)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_AdjustLogits, openai_and_repetition, 1)->Arg(256)->Arg(4096)->Arg(16384)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_AdjustLogits, openai_sorted_as_before, 2)->Arg(256)->Arg(4096)->Arg(16384)->Unit(benchmark::kMicrosecond);

BENCHMARK_MAIN();
