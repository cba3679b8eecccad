// Speculative decoding throughput (issue #18): `batch` copies of a prompt decoded
// together through the engine, with a proposer and without; reports generated tokens/s,
// the acceptance rate and whether the outputs equal plain decoding's.
//
//   build/bench/spec_bench MODEL PROMPT_KIND BATCH TOKENS [--speculative M] [--spec-k K]
//                          [--draft-layers L] [--draft-model F] [--threads T]
//   PROMPT_KIND: story (a story opening to continue) or copy (a passage and the request
//   to repeat it, an input-copying task).
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

using namespace pdserve;

namespace {

struct Run {
  double seconds = 0;
  int64_t tokens = 0;
  std::vector<std::vector<int32_t>> outputs;
  engine::MetricsSnapshot metrics;
};

Run run(engine::EngineConfig cfg, const std::string& text, int batch, int max_tokens) {
  auto e = engine::Engine::create(cfg);
  if (!e.ok()) {
    std::fprintf(stderr, "error: %s\n", e.error().c_str());
    std::exit(1);
  }
  const auto& tok = e.value()->tokenizer();
  const auto prompt = tok.encode(text, tok.vocab().add_bos, false);
  engine::SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  Run r;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::shared_ptr<engine::RequestStream>> streams;
  for (int i = 0; i < batch; ++i) streams.push_back(e.value()->submit(prompt, p).value());
  for (auto& s : streams) {
    std::vector<int32_t> out;
    engine::StreamDelta d;
    while (true) {
      if (!s->next(d, std::chrono::milliseconds(1000))) continue;
      out.insert(out.end(), d.tokens.begin(), d.tokens.end());
      if (d.finish != engine::FinishReason::None) break;
    }
    r.tokens += static_cast<int64_t>(out.size());
    r.outputs.push_back(std::move(out));
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.metrics = e.value()->metrics();
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s MODEL story|copy BATCH TOKENS [--speculative M] [--spec-k K] [--draft-layers L] [--draft-model F] [--threads T]\n", argv[0]);
    return 2;
  }
  engine::EngineConfig cfg;
  cfg.model_path = argv[1];
  const std::string kind = argv[2];
  const int batch = std::atoi(argv[3]), tokens = std::atoi(argv[4]);
  engine::EngineConfig on = cfg;
  for (int i = 5; i + 1 < argc; i += 2) {
    const std::string f = argv[i], v = argv[i + 1];
    if (f == "--speculative") on.spec.method = v == "ngram" ? engine::SpecMethod::kNgram : v == "layerskip" ? engine::SpecMethod::kLayerSkip : v == "draft" ? engine::SpecMethod::kDraft : engine::SpecMethod::kOff;
    else if (f == "--spec-k") on.spec.k = std::atoi(v.c_str());
    else if (f == "--draft-layers") on.spec.draft_layers = std::atoi(v.c_str());
    else if (f == "--draft-model") on.spec.draft_model = v;
    else if (f == "--threads") cfg.threads = on.threads = std::atoi(v.c_str());
  }
  const std::string story = "Once upon a time, there was a little girl named Lily. She loved to play outside";
  const std::string copy =
      "Repeat the story. Story: Tom had a big red ball. He liked to throw it to his dog Max. One day the ball "
      "went over the fence. Max barked and Tom was sad. Then a kind lady gave the ball back. Repeat: Tom had a big red ball.";
  const std::string& text = kind == "copy" ? copy : story;
  const Run base = run(cfg, text, batch, tokens);
  const Run spec = run(on, text, batch, tokens);
  const auto& m = spec.metrics;
  std::printf("%s %s batch=%d tokens=%d: off %.1f tok/s, %s %.1f tok/s (%.2fx), acceptance %.1f%% (%lld/%lld drafted), outputs %s\n",
              argv[1], kind.c_str(), batch, tokens, base.tokens / base.seconds, engine::spec_method_name(on.spec.method),
              spec.tokens / spec.seconds, (spec.tokens / spec.seconds) / (base.tokens / base.seconds),
              m.spec_draft_tokens ? 100.0 * m.spec_accepted_tokens / m.spec_draft_tokens : 0.0,
              static_cast<long long>(m.spec_accepted_tokens), static_cast<long long>(m.spec_draft_tokens),
              base.outputs == spec.outputs ? "identical" : "DIFFER");
  return base.outputs == spec.outputs ? 0 : 1;
}
