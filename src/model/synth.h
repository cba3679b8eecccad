// Random-weight GGUF models with the shapes of real ones (`pdserve synth`): benchmarks
// of a 1B-class model without downloading one. Weights ~ N(0, 0.02) (norm weights 1.0),
// rounded to f16 as a real checkpoint would be, then quantised with the reference
// quantisers exactly as `pdserve quantize` would (model/quantize.h: same per-tensor types).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace pdserve::model {

/// The hyper-parameters a synthetic model needs.
struct ShapeSpec {
  std::string name;           // general.name
  std::string arch = "llama"; // "llama" or "qwen2" (Q/K/V biases, NeoX RoPE)
  int n_embd = 0;
  int n_layer = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int n_ff = 0;
  int n_vocab = 0;            // the shape's vocabulary (replaced by the tokenizer's, see SynthOptions)
  int n_ctx = 2048;
  float rope_base = 10000.f;
  float rms_eps = 1e-5f;
  bool tied_embeddings = false;  // no output.weight: the head reuses token_embd
};

/// Built-in shapes: "tinyllama-1.1b", "llama-3.2-1b", "qwen2.5-0.5b". Error lists them.
Result<ShapeSpec> builtin_shape(const std::string& name);
std::vector<std::string> builtin_shape_names();

struct SynthOptions {
  std::string type = "F16";   // F16 or any model::parse_quantize_type name (Q8_0, Q4_0, Q4_K_M, …)
  std::string vocab_from;     // GGUF whose tokenizer.* keys are copied; empty = none (then n_vocab from the shape, no tokenizer)
  uint64_t seed = 1;
};

struct SynthReport {
  int n_vocab = 0;            // the vocabulary actually used
  bool vocab_changed = false; // the tokenizer's vocabulary differs from the shape's
  uint64_t file_bytes = 0;
  uint64_t weight_bytes = 0;  // bytes of 2-D tensors
};

/// Writes a random-weight model of `shape` to `out`. The same seed gives the same file
/// whatever the thread count.
Result<SynthReport> synth_model(const ShapeSpec& shape, const SynthOptions& opt, const std::string& out);

}  // namespace pdserve::model
