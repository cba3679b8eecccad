// The issue-#19 architectures against the reference engine (llama.cpp build 11669, haswell
// backend — zen4 for the mixture-of-experts ones; tests/data/README.md "Architecture
// references"): `llama` with Llama 3 RoPE scaling (rope_freqs.weight), `qwen3` (per-head
// Q/K RMSNorm), `phi3` (fused QKV and gate/up, long-RoPE factors and attention factor),
// `gemma2`, `gemma3`, `qwen3moe` and `llama` with experts (Mixtral). Each file is made here by
// model::synth_model (= `pdserve synth`, same seed as the reference's) from a built-in
// shape scaled down in layers and vocabulary (see the README), then compared with
// tests/data/arch-*.json: teacher-forced log-probs of the reference's top-5 within `tol` at
// every step, our argmax = the reference's token wherever its top-1/top-2 gap is >= 0.05,
// and free-running greedy decoding equal up to the first near-tie. Controls show each
// feature is needed: without it the same reference is missed.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>

#include <unistd.h>

#include "gguf/gguf.h"
#include "model/model.h"
#include "model/synth.h"
#include "support/reference_check.h"

namespace pdserve {
namespace {

const char* const kSpmVocab = "../shared/tokenizer/ggml-vocab-llama-spm.gguf";
const char* const kPhi3Vocab = "../shared/tokenizer/ggml-vocab-phi-3.gguf";

/// A synth file of `shape` cut to `layers` blocks, in the temp dir (per process: ctest runs
/// tests of one binary concurrently); removed with the object.
class SynthFile {
 public:
  SynthFile(const std::string& shape, int layers, const std::string& type, const std::string& vocab,
            void (*edit)(model::ShapeSpec&) = nullptr, const std::string& tag = "") {
    path_ = (std::filesystem::temp_directory_path() /
             ("pdserve-test-arch-" + shape + "-" + type + tag + "-" + std::to_string(getpid()) + ".gguf")).string();
    auto s = model::builtin_shape(shape);
    EXPECT_TRUE(s.ok()) << s.error();
    if (!s.ok()) return;
    model::ShapeSpec spec = s.value();
    spec.n_layer = layers;
    if (edit) edit(spec);
    model::SynthOptions opt;
    opt.type = type;
    opt.vocab_from = vocab;
    opt.seed = 1;
    auto r = model::synth_model(spec, opt, path_);
    EXPECT_TRUE(r.ok()) << r.error();
  }
  ~SynthFile() { std::filesystem::remove(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::unique_ptr<model::Model> load(const std::string& path, int n_ctx) {
  auto m = model::Model::load(path);
  EXPECT_TRUE(m.ok()) << m.error();
  if (!m.ok()) return nullptr;
  m.value()->set_context_length(n_ctx);  // as the reference ran (-c)
  return std::move(m.value());
}

/// The strict rule: every teacher-forced step within `tol`, argmax equal off near-ties,
/// free-running greedy equal up to the first near-tie.
void expect_matches(model::Model& m, const std::string& model_path, const std::string& ref_path, double tol) {
  const auto cases = testing::load_reference_for(model_path, ref_path);
  ASSERT_EQ(cases.size(), 4u) << ref_path;
  const std::string name = std::filesystem::path(ref_path).filename().string();
  for (const auto& c : cases) {
    const auto steps = testing::teacher_forced_steps(m, c);
    double max_err = 0;
    for (size_t i = 0; i < steps.size(); ++i) {
      max_err = std::max(max_err, steps[i].err);
      EXPECT_LE(steps[i].err, tol) << name << " prompt '" << c.prompt << "' step " << i;
      if (!steps[i].near_tie) {
        EXPECT_TRUE(steps[i].argmax_ok) << name << " prompt '" << c.prompt << "' step " << i;
      }
    }
    const size_t n_check = testing::steps_before_near_tie(steps, c.tokens.size());
    EXPECT_EQ(testing::greedy_steps_equal(m, c, n_check), n_check) << name << " free-running, prompt '" << c.prompt << "'";
    std::printf("[ %s ] '%s': max |logprob err| %.4f over %zu steps, greedy equal for %zu/%zu\n", name.c_str(),
                c.prompt.c_str(), max_err, steps.size(), n_check, c.tokens.size());
  }
}

/// The largest teacher-forced error over all cases (for the controls).
double max_error(model::Model& m, const std::string& model_path, const std::string& ref_path) {
  double e = 0;
  for (const auto& c : testing::load_reference_for(model_path, ref_path))
    for (const auto& s : testing::teacher_forced_steps(m, c)) e = std::max(e, s.err);
  return e;
}

// --- llama with Llama 3 RoPE scaling (llama-3.2-1b: rope_freqs.weight, factor 32) ---

TEST(ModelArchReference, Llama3F16) {
  SynthFile f("llama-3.2-1b", 2, "F16", kSpmVocab);
  auto m = load(f.path(), 2048);
  ASSERT_TRUE(m);
  ASSERT_TRUE(m->config().arch == "llama");
  expect_matches(*m, f.path(), "tests/data/arch-llama3-f16.json", 0.02);
  // Control: the same weights without rope_freqs.weight miss the reference.
  SynthFile plain("llama-3.2-1b", 2, "F16", kSpmVocab, [](model::ShapeSpec& s) { s.llama3_factor = 0; }, "-plain");
  auto p = load(plain.path(), 2048);
  ASSERT_TRUE(p);
  // At these short positions the factors (which slow the low-frequency pairs) move the
  // log-probs by ~0.01, several times our error with them (~0.002).
  const double ours = max_error(*m, f.path(), "tests/data/arch-llama3-f16.json");
  const double e = max_error(*p, plain.path(), "tests/data/arch-llama3-f16.json");
  std::printf("control: without rope_freqs, max |logprob err| %.4f (with: %.4f)\n", e, ours);
  EXPECT_GT(e, 3 * ours);
}

// Q8_0: the 0.02 does not hold against these haswell references, and the cause is
// the reference's backend, not our kernels: measured max 0.0289 here (Qwen3 0.0207, Phi3
// 0.0258), hence 0.035. The difference is the Q·K dot of its flash attention over the f16
// cache, ggml_vec_dot_f16, whose haswell build sums four 8-lane FMA accumulators over
// 32-value chunks and folds them with hadd, where the AVX-512 build we reproduce
// (kernels/attention.cc dot_f16_q; ../shared/reference's zen4 references) uses four 16-lane
// ones over 64-value chunks. Measured 2026-12-02: with dot_f16_q switched to the haswell
// order (an experiment, not kept), this file matches its reference to print precision
// (0.0000) at every step of all four prompts. The Q8_0 integer dots themselves agree: on
// ../shared/models/synth-llama-small-q8_0.gguf (head_dim 32, no 64-value chunk in either
// order) a haswell reference equals the AVX-512 one and our log-probs match both to 0.0000.
// The scores differ in their last bits only; a Q8_0 activation rounding that flips on them
// moves these random-weight models' log-probs by 0.01-0.03.
TEST(ModelArchReference, Llama3Q8_0) {
  SynthFile f("llama-3.2-1b", 2, "Q8_0", kSpmVocab);
  auto m = load(f.path(), 2048);
  ASSERT_TRUE(m);
  expect_matches(*m, f.path(), "tests/data/arch-llama3-q8_0.json", 0.035);
}

// Measured max 0.0449 (issue tolerance 0.08).
TEST(ModelArchReference, Llama3Q4_K_M) {
  SynthFile f("llama-3.2-1b", 2, "Q4_K_M", kSpmVocab);
  auto m = load(f.path(), 2048);
  ASSERT_TRUE(m);
  expect_matches(*m, f.path(), "tests/data/arch-llama3-q4_k_m.json", 0.08);
}

// --- qwen3 (qwen3-0.6b: head_dim 128 over n_embd 1024, per-head Q/K RMSNorm, NeoX RoPE 1e6) ---

TEST(ModelArchReference, Qwen3F16) {
  SynthFile f("qwen3-0.6b", 2, "F16", kSpmVocab);
  auto m = load(f.path(), 2048);
  ASSERT_TRUE(m);
  ASSERT_EQ(m->config().head_dim, 128);
  ASSERT_TRUE(m->config().qk_norm);
  expect_matches(*m, f.path(), "tests/data/arch-qwen3-f16.json", 0.02);
}

// Measured max 0.0207: above 0.02 for the reason given at Llama3Q8_0 (0.035 as there).
TEST(ModelArchReference, Qwen3Q8_0) {
  SynthFile f("qwen3-0.6b", 2, "Q8_0", kSpmVocab);
  auto m = load(f.path(), 2048);
  ASSERT_TRUE(m);
  expect_matches(*m, f.path(), "tests/data/arch-qwen3-q8_0.json", 0.035);
}

// Measured max 0.0266 (0.08).
TEST(ModelArchReference, Qwen3Q4_K_M) {
  SynthFile f("qwen3-0.6b", 2, "Q4_K_M", kSpmVocab);
  auto m = load(f.path(), 2048);
  ASSERT_TRUE(m);
  expect_matches(*m, f.path(), "tests/data/arch-qwen3-q4_k_m.json", 0.08);
}

// --- phi3 (phi-3.5-mini: fused attn_qkv and ffn_up, long-RoPE, attention factor 1.19) ---

// At -c 2048 (<= the original 4096) the reference uses rope_factors_short; at -c 8192 the
// long ones. The attention factor applies to both.
TEST(ModelArchReference, Phi3F16ShortAndLongFactors) {
  SynthFile f("phi-3.5-mini", 1, "F16", kPhi3Vocab);
  auto m = load(f.path(), 2048);
  ASSERT_TRUE(m);
  ASSERT_EQ(m->config().arch, "phi3");
  expect_matches(*m, f.path(), "tests/data/arch-phi3-f16.json", 0.02);
  m->set_context_length(8192);
  expect_matches(*m, f.path(), "tests/data/arch-phi3-f16-ctx8192.json", 0.02);
  // Control: the short factors at -c 8192 miss the reference's long-factor run.
  m->set_context_length(2048);
  const double e = max_error(*m, f.path(), "tests/data/arch-phi3-f16-ctx8192.json");
  std::printf("control: short factors against the -c 8192 reference, max |logprob err| %.4f\n", e);
  EXPECT_GT(e, 0.1);
}

// Measured max 0.0258: above 0.02 for the reason given at Llama3Q8_0 (0.035 as there).
TEST(ModelArchReference, Phi3Q8_0) {
  SynthFile f("phi-3.5-mini", 1, "Q8_0", kPhi3Vocab);
  auto m = load(f.path(), 2048);
  ASSERT_TRUE(m);
  expect_matches(*m, f.path(), "tests/data/arch-phi3-q8_0.json", 0.035);
}

// Measured max 0.0503 (0.08).
TEST(ModelArchReference, Phi3Q4_K_M) {
  SynthFile f("phi-3.5-mini", 1, "Q4_K_M", kPhi3Vocab);
  auto m = load(f.path(), 2048);
  ASSERT_TRUE(m);
  expect_matches(*m, f.path(), "tests/data/arch-phi3-q4_k_m.json", 0.08);
}

// --- gemma2 (gemma-2-2b: embeddings × sqrt(2304), GeGLU, post-attention / post-FFN norms,
// attention soft cap 50 and final soft cap 30, head_dim 256 over 2304, every even layer a
// sliding-window layer). The window is scaled down from 4096 to 8 tokens (`pdserve synth
// --sliding-window 8`), so that within these 20-30-token runs layer 0 attends to its last
// 8 keys only and layer 1 to all of them. ---

TEST(ModelArchReference, Gemma2F16) {
  SynthFile f("gemma-2-2b", 2, "F16", kSpmVocab, [](model::ShapeSpec& s) { s.sliding_window = 8; });
  auto m = load(f.path(), 2048);
  ASSERT_TRUE(m);
  ASSERT_EQ(m->config().arch, "gemma2");
  ASSERT_TRUE(m->config().is_swa_layer(0));
  ASSERT_FALSE(m->config().is_swa_layer(1));
  expect_matches(*m, f.path(), "tests/data/arch-gemma2-f16.json", 0.02);
  // Control: the same weights with the real window (4096: nothing falls out of it here)
  // miss the reference, so the window is what the reference ran with and what we apply.
  SynthFile wide("gemma-2-2b", 2, "F16", kSpmVocab, [](model::ShapeSpec& s) { s.sliding_window = 4096; }, "-wide");
  auto w = load(wide.path(), 2048);
  ASSERT_TRUE(w);
  const double ours = max_error(*m, f.path(), "tests/data/arch-gemma2-f16.json");
  const double e = max_error(*w, wide.path(), "tests/data/arch-gemma2-f16.json");
  std::printf("control: without the window, max |logprob err| %.4f (with: %.4f)\n", e, ours);
  EXPECT_GT(e, 0.1);
}

// The 0.02: measured max 0.0005 (2026-12-02; see Gemma3Q8_0 for why not 0.035).
TEST(ModelArchReference, Gemma2Q8_0) {
  SynthFile f("gemma-2-2b", 2, "Q8_0", kSpmVocab, [](model::ShapeSpec& s) { s.sliding_window = 8; });
  auto m = load(f.path(), 2048);
  ASSERT_TRUE(m);
  expect_matches(*m, f.path(), "tests/data/arch-gemma2-q8_0.json", 0.02);
}

// Measured max 0.0409 (0.08).
TEST(ModelArchReference, Gemma2Q4_K_M) {
  SynthFile f("gemma-2-2b", 2, "Q4_K_M", kSpmVocab, [](model::ShapeSpec& s) { s.sliding_window = 8; });
  auto m = load(f.path(), 2048);
  ASSERT_TRUE(m);
  expect_matches(*m, f.path(), "tests/data/arch-gemma2-q4_k_m.json", 0.08);
}

// --- gemma3 (gemma-3-1b: gemma2's embedding scale, GeGLU and post-norms, plus qwen3-style
// per-head Q/K RMSNorms, no soft caps, head_dim 256 over 1152, one KV head, five local layers
// to one global, RoPE base 10000 on the local layers and 1e6 on the global ones). 7 of its 26
// blocks: layers 0-4 and 6 local, layer 5 global; the window scaled down from 512 to 8
// tokens (`pdserve synth --sliding-window 8`), so that it matters within these runs. ---

TEST(ModelArchReference, Gemma3F16) {
  SynthFile f("gemma-3-1b", 7, "F16", kSpmVocab, [](model::ShapeSpec& s) { s.sliding_window = 8; });
  auto m = load(f.path(), 2048);
  ASSERT_TRUE(m);
  const model::ModelConfig& c = m->config();
  ASSERT_EQ(c.arch, "gemma3");
  ASSERT_TRUE(c.qk_norm && c.post_norms && c.embd_scale && c.geglu);
  ASSERT_EQ(c.attn_softcap, 0.f);
  ASSERT_EQ(c.final_softcap, 0.f);
  for (int l = 0; l < 7; ++l) ASSERT_EQ(c.is_swa_layer(l), l != 5) << "layer " << l;
  ASSERT_EQ(c.rope_base_of(0), 10000.f);
  ASSERT_EQ(c.rope_base_of(5), 1000000.f);
  expect_matches(*m, f.path(), "tests/data/arch-gemma3-f16.json", 0.02);
  const double ours = max_error(*m, f.path(), "tests/data/arch-gemma3-f16.json");
  // Controls: the same weights with the real window (512: nothing falls out of it here), or
  // with the global RoPE base on the local layers too, miss the reference.
  SynthFile wide("gemma-3-1b", 7, "F16", kSpmVocab, [](model::ShapeSpec& s) { s.sliding_window = 512; }, "-wide");
  auto w = load(wide.path(), 2048);
  ASSERT_TRUE(w);
  const double e_wide = max_error(*w, wide.path(), "tests/data/arch-gemma3-f16.json");
  SynthFile one_base("gemma-3-1b", 7, "F16", kSpmVocab,
                     [](model::ShapeSpec& s) { s.sliding_window = 8; s.rope_base_swa = s.rope_base; }, "-onebase");
  auto b = load(one_base.path(), 2048);
  ASSERT_TRUE(b);
  ASSERT_EQ(b->config().rope_base_of(0), 1000000.f);
  const double e_base = max_error(*b, one_base.path(), "tests/data/arch-gemma3-f16.json");
  std::printf("controls: without the window, max |logprob err| %.4f; one RoPE base, %.4f (ours: %.4f)\n", e_wide, e_base, ours);
  EXPECT_GT(e_wide, 0.1);
  EXPECT_GT(e_base, 3 * ours);
}

// The 0.02: measured max 0.0000 at print precision on all four prompts (2026-12-02),
// so the haswell f16 Q·K order that costs llama/qwen3/phi3 up to 0.029 (see Llama3Q8_0)
// flips no Q8_0 activation rounding here.
TEST(ModelArchReference, Gemma3Q8_0) {
  SynthFile f("gemma-3-1b", 7, "Q8_0", kSpmVocab, [](model::ShapeSpec& s) { s.sliding_window = 8; });
  auto m = load(f.path(), 2048);
  ASSERT_TRUE(m);
  expect_matches(*m, f.path(), "tests/data/arch-gemma3-q8_0.json", 0.02);
}

// Measured max 0.0277 (0.08).
TEST(ModelArchReference, Gemma3Q4_K_M) {
  SynthFile f("gemma-3-1b", 7, "Q4_K_M", kSpmVocab, [](model::ShapeSpec& s) { s.sliding_window = 8; });
  auto m = load(f.path(), 2048);
  ASSERT_TRUE(m);
  expect_matches(*m, f.path(), "tests/data/arch-gemma3-q4_k_m.json", 0.08);
}

// --- qwen3moe (qwen3-30b-a3b: qwen3's attention — 32 heads, 4 KV heads, head_dim 128 over
// 2048, per-head Q/K norms — and a mixture-of-experts FFN: router ffn_gate_inp (F32), softmax
// over the experts, top-k, weights renormalised, SwiGLU experts of 768 rows). Scaled down to
// 2 blocks and 8 experts, 2 per token (the real model: 48, 128, 8); the reference was made on
// the zen4 (AVX-512) backend (tests/data/README.md). ---

TEST(ModelArchReference, Qwen3MoeF16) {
  SynthFile f("qwen3-30b-a3b", 2, "F16", kSpmVocab);
  auto m = load(f.path(), 2048);
  ASSERT_TRUE(m);
  const model::ModelConfig& c = m->config();
  ASSERT_EQ(c.arch, "qwen3moe");
  ASSERT_TRUE(c.qk_norm);
  ASSERT_EQ(c.n_expert, 8);
  ASSERT_EQ(c.n_expert_used, 2);
  ASSERT_EQ(c.n_ff_exp, 768);
  expect_matches(*m, f.path(), "tests/data/arch-qwen3moe-f16.json", 0.02);
  // Control: the same weights routed to 1 expert per token instead of 2 miss the reference.
  SynthFile top1("qwen3-30b-a3b", 2, "F16", kSpmVocab, [](model::ShapeSpec& s) { s.n_expert_used = 1; }, "-top1");
  auto t1 = load(top1.path(), 2048);
  ASSERT_TRUE(t1);
  const double ours = max_error(*m, f.path(), "tests/data/arch-qwen3moe-f16.json");
  const double e = max_error(*t1, top1.path(), "tests/data/arch-qwen3moe-f16.json");
  std::printf("control: top-1 routing, max |logprob err| %.4f (top-2: %.4f)\n", e, ours);
  EXPECT_GT(e, 0.1);
}

// Quantised MoE files: measured max 0.0000 at print precision (2026-12-02, zen4 references),
// so these tests hold 0.005 rather than the 0.02 / 0.08 — tight enough that the
// router in the tinyBLAS order for prompt tokens (Mixtral: 0.0196 / 0.0144, see moe.h) fails.
constexpr double kMoeQuantTol = 0.005;

TEST(ModelArchReference, Qwen3MoeQ8_0) {
  SynthFile f("qwen3-30b-a3b", 2, "Q8_0", kSpmVocab);
  auto m = load(f.path(), 2048);
  ASSERT_TRUE(m);
  expect_matches(*m, f.path(), "tests/data/arch-qwen3moe-q8_0.json", kMoeQuantTol);
}

TEST(ModelArchReference, Qwen3MoeQ4_K_M) {
  SynthFile f("qwen3-30b-a3b", 2, "Q4_K_M", kSpmVocab);
  auto m = load(f.path(), 2048);
  ASSERT_TRUE(m);
  expect_matches(*m, f.path(), "tests/data/arch-qwen3moe-q4_k_m.json", kMoeQuantTol);
}

// --- Mixtral (mixtral-8x7b: `llama` blocks — 32 heads, 8 KV heads over 4096, adjacent-pair
// RoPE 1e6 — whose FFN is 8 SwiGLU experts, 2 per token, through the same router as qwen3moe;
// llama.cpp: llm_build_llama with llama.expert_count). 2 of its 32 blocks, the experts scaled
// from 14336 rows down to 512 (`pdserve synth --ff 512`); zen4 references. ---

void mixtral_ff(model::ShapeSpec& s) { s.n_ff = 512; }

TEST(ModelArchReference, MixtralF16) {
  SynthFile f("mixtral-8x7b", 2, "F16", kSpmVocab, mixtral_ff);
  auto m = load(f.path(), 2048);
  ASSERT_TRUE(m);
  const model::ModelConfig& c = m->config();
  ASSERT_EQ(c.arch, "llama");
  ASSERT_FALSE(c.rope_neox);
  ASSERT_EQ(c.n_expert, 8);
  ASSERT_EQ(c.n_expert_used, 2);
  ASSERT_EQ(c.n_ff_exp, 512);
  expect_matches(*m, f.path(), "tests/data/arch-mixtral-f16.json", 0.02);
}

TEST(ModelArchReference, MixtralQ8_0) {
  SynthFile f("mixtral-8x7b", 2, "Q8_0", kSpmVocab, mixtral_ff);
  auto m = load(f.path(), 2048);
  ASSERT_TRUE(m);
  expect_matches(*m, f.path(), "tests/data/arch-mixtral-q8_0.json", kMoeQuantTol);
}

// Q4_K_M with llama-quantize's 8-expert rule: attn_k / attn_v Q8_0, attn_output Q5_K.
TEST(ModelArchReference, MixtralQ4_K_M) {
  SynthFile f("mixtral-8x7b", 2, "Q4_K_M", kSpmVocab, mixtral_ff);
  auto m = load(f.path(), 2048);
  ASSERT_TRUE(m);
  ASSERT_EQ(m->file().find_tensor("blk.0.attn_k.weight")->type, gguf::GgmlType::Q8_0);
  ASSERT_EQ(m->file().find_tensor("blk.0.attn_output.weight")->type, gguf::GgmlType::Q5_K);
  expect_matches(*m, f.path(), "tests/data/arch-mixtral-q4_k_m.json", kMoeQuantTol);
}

// --- The loader names what it cannot run, in one line ---

/// A tiny synth model of `arch` rewritten: metadata `set` on top, tensor `drop` left out,
/// tensor `halve` cut to its first half of rows. Returns the load error ("" if it loads).
std::string load_error(const std::string& arch, std::vector<std::pair<std::string, gguf::Value>> set, const std::string& drop = "",
                       const std::string& halve = "") {
  model::ShapeSpec s = model::builtin_shape(arch == "qwen3"      ? "qwen3-0.6b"
                                            : arch == "qwen3moe" ? "qwen3-30b-a3b"
                                            : arch == "phi3"   ? "phi-3.5-mini"
                                            : arch == "gemma2" ? "gemma-2-2b"
                                            : arch == "gemma3" ? "gemma-3-1b"
                                                               : "llama-3.2-1b")
                           .value();
  s.n_embd = 64; s.n_layer = 1; s.n_head = 4; s.n_head_kv = 2; s.n_ff = 128; s.n_vocab = 64;
  if (s.head_dim) s.head_dim = 32;
  if (s.n_expert) s.n_ff_exp = 32;
  const int hd = s.head_dim ? s.head_dim : s.n_embd / s.n_head;
  if (!s.rope_long.empty()) { s.rope_long.resize(hd / 2); s.rope_short.resize(hd / 2); }
  const std::string base = (std::filesystem::temp_directory_path() / ("pdserve-test-arch-bad-" + std::to_string(getpid()))).string();
  EXPECT_TRUE(model::synth_model(s, {}, base + "-in.gguf").ok());
  auto in = gguf::GgufFile::open(base + "-in.gguf");
  EXPECT_TRUE(in.ok());
  gguf::GgufWriter w;
  for (const auto& [k, v] : in.value()->metadata()) w.set(k, v);
  for (auto& [k, v] : set) w.set(k, v);
  for (const auto& t : in.value()->tensors()) {
    if (t.name == drop) continue;
    std::vector<int64_t> dims = t.dims;
    uint64_t n = t.nbytes;
    if (t.name == halve) { dims.back() /= 2; n /= 2; }
    w.add_tensor(t.name, dims, t.type, t.data, n);
  }
  EXPECT_TRUE(w.write(base + ".gguf").ok());
  auto m = model::Model::load(base + ".gguf");
  std::filesystem::remove(base + "-in.gguf");
  std::filesystem::remove(base + ".gguf");
  if (m.ok()) return "";
  EXPECT_EQ(m.error().find('\n'), std::string::npos) << m.error();
  return m.error();
}

TEST(ModelArchLoader, NamesTheMissingOrWrongTensorOrKey) {
  using gguf::Value;
  EXPECT_EQ(load_error("qwen3", {}), "");
  EXPECT_EQ(load_error("phi3", {}), "");
  EXPECT_EQ(load_error("llama", {}), "");
  EXPECT_EQ(load_error("gemma2", {}), "");
  EXPECT_EQ(load_error("gemma3", {}), "");
  EXPECT_NE(load_error("gemma3", {}, "blk.0.attn_q_norm.weight").find("missing tensor 'blk.0.attn_q_norm.weight'"),
            std::string::npos);
  EXPECT_NE(load_error("gemma3", {{"gemma3.attention.sliding_window_pattern", Value::array(gguf::ValueType::BOOL, {Value::boolean(true), Value::boolean(false)})}})
                .find("metadata key 'gemma3.attention.sliding_window_pattern' must be an integer"),
            std::string::npos);
  EXPECT_NE(load_error("gemma2", {}, "blk.0.post_ffw_norm.weight").find("missing tensor 'blk.0.post_ffw_norm.weight'"),
            std::string::npos);
  EXPECT_NE(load_error("qwen3", {}, "blk.0.attn_k_norm.weight").find("missing tensor 'blk.0.attn_k_norm.weight'"), std::string::npos);
  EXPECT_NE(load_error("phi3", {}, "", "blk.0.ffn_up.weight").find("tensor 'blk.0.ffn_up.weight' has shape [64, 128], expected [64, 256]"),
            std::string::npos);
  EXPECT_NE(load_error("phi3", {}, "blk.0.attn_qkv.weight").find("missing tensor 'blk.0.attn_q.weight'"), std::string::npos);
  EXPECT_NE(load_error("llama", {}, "", "rope_freqs.weight").find("tensor 'rope_freqs.weight' has shape [4], expected [8]"),
            std::string::npos);
  EXPECT_NE(load_error("llama", {{"llama.rope.scaling.type", Value::str("yarn")}})
                .find("metadata key 'llama.rope.scaling.type' is 'yarn': not supported"),
            std::string::npos);
  // Mixture of experts: qwen3moe and llama (Mixtral) only; the keys and each expert tensor named.
  EXPECT_EQ(load_error("qwen3moe", {}), "");
  EXPECT_NE(load_error("qwen3", {{"qwen3.expert_count", Value::u32(8)}})
                .find("metadata key 'qwen3.expert_count' is 8: mixture-of-experts is supported for qwen3moe and llama (Mixtral) only"),
            std::string::npos);
  EXPECT_NE(load_error("llama", {{"llama.expert_count", Value::u32(8)}}).find("missing required metadata key 'llama.expert_used_count'"),
            std::string::npos);
  EXPECT_NE(load_error("llama", {{"llama.expert_count", Value::u32(8)}, {"llama.expert_used_count", Value::u32(2)}})
                .find("missing tensor 'blk.0.ffn_gate_inp.weight'"),
            std::string::npos);
  EXPECT_NE(load_error("qwen3moe", {{"qwen3moe.expert_count", Value::u32(0)}}).find("metadata key 'qwen3moe.expert_count' is 0"),
            std::string::npos);
  EXPECT_NE(load_error("qwen3moe", {{"qwen3moe.expert_used_count", Value::u32(9)}})
                .find("metadata key 'qwen3moe.expert_used_count' is 9: it must be between 1 and 8"),
            std::string::npos);
  EXPECT_NE(load_error("qwen3moe", {}, "blk.0.ffn_down_exps.weight").find("missing tensor 'blk.0.ffn_down_exps.weight'"),
            std::string::npos);
  EXPECT_NE(load_error("qwen3moe", {}, "", "blk.0.ffn_up_exps.weight")
                .find("tensor 'blk.0.ffn_up_exps.weight' has shape [64, 32, 4], expected [64, 32, 8]"),
            std::string::npos);
  EXPECT_NE(load_error("qwen3moe", {}, "", "blk.0.ffn_gate_inp.weight")
                .find("tensor 'blk.0.ffn_gate_inp.weight' has shape [64, 4], expected [64, 8]"),
            std::string::npos);
  EXPECT_NE(load_error("qwen3moe", {{"qwen3moe.expert_feed_forward_length", Value::u32(64)}}, "", "")
                .find("tensor 'blk.0.ffn_gate_exps.weight' has shape [64, 32, 8], expected [64, 64, 8]"),
            std::string::npos);
  EXPECT_NE(load_error("llama", {{"general.architecture", Value::str("gemma3n")}}).find("unsupported architecture 'gemma3n'"),
            std::string::npos);
}

}  // namespace
}  // namespace pdserve
