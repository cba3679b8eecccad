// `pdserve synth`: a random-weight GGUF with the shape of a real model (model/synth.h).
#include <cstdio>

#include "base/clock.h"
#include "cli/commands.h"
#include "model/synth.h"

namespace pdserve::cli {

void add_synth_command(CLI::App& app, SynthArgs& a) {
  CLI::App* cmd = app.add_subcommand("synth", "write a random-weight GGUF shaped like a real model (benchmarks)");
  cmd->add_option("--shape", a.shape, "tinyllama-1.1b | llama-3.2-1b | qwen2.5-0.5b | qwen3-0.6b | qwen3-30b-a3b (8 experts, 2 per token) | "
                  "mixtral-8x7b | phi-3.5-mini | gemma-2-2b | gemma-3-1b")
      ->required()
      ->check(CLI::IsMember(model::builtin_shape_names()));
  cmd->add_option("--type", a.type, "F16 | Q8_0 | Q4_0 | Q4_K_M (or any `quantize` type)")->default_val("F16");
  cmd->add_option("--vocab-from", a.vocab_from, "GGUF whose tokenizer.* keys are copied (its vocab size sets n_vocab)")
      ->required();
  cmd->add_option("-o,--output", a.output, "output GGUF file")->required();
  cmd->add_option("--seed", a.seed, "random seed")->default_val(1);
  cmd->add_option("--layers", a.layers, "scale the shape down to N blocks (default: the shape's)")->check(CLI::PositiveNumber);
  cmd->add_option("--sliding-window", a.sliding_window,
                  "scale the sliding window of a shape that has one (gemma-2-2b, gemma-3-1b) down to N tokens")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--ff", a.ff,
                  "scale the FFN width down to N rows (a mixture-of-experts shape: each expert's; default: the shape's)")
      ->check(CLI::PositiveNumber);
}

int run_synth(const SynthArgs& a) {
  auto shape = model::builtin_shape(a.shape);
  if (!shape.ok()) {
    std::fprintf(stderr, "error: %s\n", shape.error().c_str());
    return 1;
  }
  if (a.layers > 0) shape.value().n_layer = a.layers;
  if (a.sliding_window > 0) {
    if (shape.value().arch != "gemma2" && shape.value().arch != "gemma3") {
      std::fprintf(stderr, "error: --sliding-window: shape '%s' has no sliding-window layers (see 'pdserve synth --help')\n",
                   a.shape.c_str());
      return 2;
    }
    shape.value().sliding_window = a.sliding_window;
  }
  if (a.ff > 0) {
    if (shape.value().arch == "qwen3moe") shape.value().n_ff_exp = a.ff;
    else shape.value().n_ff = a.ff;
  }
  model::SynthOptions opt;
  opt.type = a.type;
  opt.vocab_from = a.vocab_from;
  opt.seed = a.seed;
  const double t0 = now_seconds();
  auto rep = model::synth_model(shape.value(), opt, a.output);
  if (!rep.ok()) {
    std::fprintf(stderr, "error: %s\n", rep.error().c_str());
    return 1;
  }
  const auto& r = rep.value();
  if (r.vocab_changed)
    std::printf("note: n_vocab is %d (the tokenizer of %s), not the shape's %d\n", r.n_vocab, a.vocab_from.c_str(),
                shape.value().n_vocab);
  std::printf("wrote %s: %s %s, n_vocab %d, %.1f MiB (weights %.1f MiB) in %.1f s\n", a.output.c_str(), a.shape.c_str(),
              a.type.c_str(), r.n_vocab, r.file_bytes / 1048576.0, r.weight_bytes / 1048576.0, now_seconds() - t0);
  return 0;
}

}  // namespace pdserve::cli
