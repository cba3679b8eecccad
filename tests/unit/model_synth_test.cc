// model::synth_model: a tiny random-weight model of a custom shape (llama and qwen2,
// F16 and quantised) loads with model::Model::load and gives finite logits; the built-in
// shapes are those of the real models.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <cstdio>
#include <unistd.h>

#include "gguf/gguf.h"
#include "kernels/matmul.h"
#include "kv/block_pool.h"
#include "kv/block_table.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "model/synth.h"

namespace pdserve {
namespace {

const char* kVocab = "../shared/models/stories260K.gguf";  // 512 tokens

std::string tmp_path(const std::string& tag) {
  return "/tmp/pdserve_synth_test_" + std::to_string(getpid()) + "_" + tag + ".gguf";
}

/// Runs a 5-token prompt then one decode step; returns false on non-finite logits.
void forward_finite(const std::string& path, const model::ShapeSpec& s, int n_vocab) {
  auto r = model::Model::load(path);
  ASSERT_TRUE(r.ok()) << r.error();
  model::Model& m = *r.value();
  EXPECT_EQ(m.config().arch, s.arch);
  EXPECT_EQ(m.config().n_layer, s.n_layer);
  EXPECT_EQ(m.config().n_head_kv, s.n_head_kv);
  EXPECT_EQ(m.config().n_ff, s.n_ff);
  EXPECT_EQ(m.config().n_vocab, n_vocab);
  EXPECT_FLOAT_EQ(m.config().rope_base, s.rope_base);
  EXPECT_EQ(m.file().find_tensor("output.weight") == nullptr, s.tied_embeddings);

  kv::KvCacheShape ks;
  ks.n_layers = m.config().n_layer;
  ks.n_kv_heads = m.config().n_head_kv;
  ks.head_dim = m.config().head_dim;
  ks.block_size = 4;
  ks.num_blocks = 8;
  kv::KvCache cache(ks);
  kv::BlockPool pool(8);
  kv::BlockTable table;
  ASSERT_TRUE(pool.allocate(2, table.blocks));
  std::vector<float> logits;
  auto feed = [&](std::vector<int32_t> toks, int pos, int prompt_len) {
    model::Batch b;
    b.block_tables.push_back(table.blocks.data());
    for (size_t i = 0; i < toks.size(); ++i) {
      b.tokens.push_back(toks[i]);
      b.positions.push_back(pos + static_cast<int>(i));
      b.slot_mapping.push_back(table.slot(pos + static_cast<int>(i), ks.block_size));
      b.seq_ids.push_back(0);
      b.gemm_order.push_back(kernels::gemm_order_flag(pos + static_cast<int>(i), prompt_len));
    }
    b.logits_rows.push_back(static_cast<int>(toks.size()) - 1);
    const float* out = m.forward(b, cache.layers());
    logits.assign(out, out + n_vocab);
    float maxabs = 0;
    for (float x : logits) {
      ASSERT_TRUE(std::isfinite(x));
      maxabs = std::max(maxabs, std::fabs(x));
    }
    EXPECT_GT(maxabs, 0.f);  // random weights: not all zero
  };
  feed({1, 20, 300, 7, 511}, 0, 5);
  feed({42}, 5, 5);
}

model::ShapeSpec tiny(const std::string& arch) {
  model::ShapeSpec s;
  s.name = "tiny-" + arch;
  s.arch = arch;
  s.n_embd = 256;  // multiple of 256: K-quants apply
  s.n_layer = 2;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.n_ff = 512;
  s.n_vocab = 1000;  // replaced by the tokenizer's 512
  s.n_ctx = 64;
  s.rope_base = arch == "qwen2" ? 1e6f : 1e4f;
  s.tied_embeddings = arch == "qwen2";
  return s;
}

TEST(ModelSynth, TinyShapesLoadAndGiveFiniteLogits) {
  for (const char* arch : {"llama", "qwen2"}) {
    for (const char* type : {"F16", "Q8_0", "Q4_0", "Q4_K_M"}) {
      SCOPED_TRACE(std::string(arch) + " " + type);
      const model::ShapeSpec s = tiny(arch);
      model::SynthOptions opt;
      opt.type = type;
      opt.vocab_from = kVocab;
      opt.seed = 7;
      const std::string path = tmp_path(std::string(arch) + "_" + type);
      auto rep = model::synth_model(s, opt, path);
      ASSERT_TRUE(rep.ok()) << rep.error();
      EXPECT_EQ(rep.value().n_vocab, 512);
      EXPECT_TRUE(rep.value().vocab_changed);
      forward_finite(path, s, 512);
      std::remove(path.c_str());
    }
  }
}

// Mixture of experts, qwen3moe and llama with experts (Mixtral's layout): the router stays
// F32 and the stacked experts take the file's type; the forward pass runs.
TEST(ModelSynth, TinyMoeShapesLoadAndGiveFiniteLogits) {
  for (const char* arch : {"qwen3moe", "llama"}) {
    for (const char* type : {"F16", "Q8_0", "Q4_K_M"}) {
      SCOPED_TRACE(std::string(arch) + " " + type);
      model::ShapeSpec s = tiny(arch);
      s.n_expert = 4;
      s.n_expert_used = 2;
      s.n_ff_exp = 256;
      if (std::string(arch) == "qwen3moe") s.head_dim = 64;
      model::SynthOptions opt;
      opt.type = type;
      opt.vocab_from = kVocab;
      const std::string path = tmp_path(std::string("moe_") + arch + "_" + type);
      auto rep = model::synth_model(s, opt, path);
      ASSERT_TRUE(rep.ok()) << rep.error();
      {
        auto f = gguf::GgufFile::open(path);
        ASSERT_TRUE(f.ok());
        const gguf::TensorInfo* gi = f.value()->find_tensor("blk.0.ffn_gate_inp.weight");
        ASSERT_TRUE(gi);
        EXPECT_EQ(gi->type, gguf::GgmlType::F32);
        const gguf::TensorInfo* up = f.value()->find_tensor("blk.0.ffn_up_exps.weight");
        ASSERT_TRUE(up);
        const int64_t rows = std::string(arch) == "qwen3moe" ? 256 : s.n_ff;
        EXPECT_EQ(up->dims, (std::vector<int64_t>{256, rows, 4}));
        EXPECT_EQ(f.value()->find_tensor("blk.0.ffn_up.weight"), nullptr);
      }
      forward_finite(path, s, 512);
      auto m = model::Model::load(path);
      ASSERT_TRUE(m.ok());
      EXPECT_EQ(m.value()->config().n_expert, 4);
      EXPECT_EQ(m.value()->config().n_ff_exp, std::string(arch) == "qwen3moe" ? 256 : s.n_ff);
      std::remove(path.c_str());
    }
  }
}

TEST(ModelSynth, SameSeedSameFile) {
  const model::ShapeSpec s = tiny("llama");
  model::SynthOptions opt;
  opt.type = "Q4_0";
  opt.vocab_from = kVocab;
  const std::string a = tmp_path("seed_a"), b = tmp_path("seed_b"), c = tmp_path("seed_c");
  ASSERT_TRUE(model::synth_model(s, opt, a).ok());
  ASSERT_TRUE(model::synth_model(s, opt, b).ok());
  opt.seed = 2;
  ASSERT_TRUE(model::synth_model(s, opt, c).ok());
  auto read = [](const std::string& p) {
    std::vector<char> v;
    if (FILE* f = std::fopen(p.c_str(), "rb")) {
      char buf[65536];
      size_t n;
      while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) v.insert(v.end(), buf, buf + n);
      std::fclose(f);
    }
    return v;
  };
  EXPECT_EQ(read(a), read(b));
  EXPECT_NE(read(a), read(c));
  for (const auto& p : {a, b, c}) std::remove(p.c_str());
}

TEST(ModelSynth, BuiltinShapes) {
  auto t = model::builtin_shape("tinyllama-1.1b");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t.value().n_embd, 2048);
  EXPECT_EQ(t.value().n_layer, 22);
  EXPECT_EQ(t.value().n_head_kv, 4);
  EXPECT_EQ(t.value().n_ff, 5632);
  EXPECT_FALSE(t.value().tied_embeddings);
  auto l = model::builtin_shape("llama-3.2-1b");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l.value().n_vocab, 128256);
  EXPECT_TRUE(l.value().tied_embeddings);
  auto q = model::builtin_shape("qwen2.5-0.5b");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q.value().arch, "qwen2");
  EXPECT_EQ(q.value().n_embd, 896);
  auto moe = model::builtin_shape("qwen3-30b-a3b");
  ASSERT_TRUE(moe.ok());
  EXPECT_EQ(moe.value().arch, "qwen3moe");
  EXPECT_EQ(moe.value().n_embd, 2048);
  EXPECT_EQ(moe.value().n_layer, 48);
  EXPECT_EQ(moe.value().n_head, 32);
  EXPECT_EQ(moe.value().n_head_kv, 4);
  EXPECT_EQ(moe.value().head_dim, 128);
  EXPECT_EQ(moe.value().n_ff_exp, 768);
  EXPECT_EQ(moe.value().n_expert, 8);  // scaled down from 128 (see synth.cc)
  EXPECT_EQ(moe.value().n_expert_used, 2);
  EXPECT_FALSE(model::builtin_shape("gpt-5").ok());
}

// gemma3's per-layer RoPE, as llama.cpp's gemma3 hparams set it: local layers (l % 6 < 5)
// take rope.freq_base_swa (default 10000) and no linear scaling; global ones rope.freq_base
// and 1 / rope.scaling.factor (Gemma 3 4B+: linear, factor 8). Other architectures: one base.
TEST(ModelConfig, Gemma3LocalAndGlobalLayersTakeTheirOwnRope) {
  auto spec = model::builtin_shape("gemma-3-1b");
  ASSERT_TRUE(spec.ok());
  model::ShapeSpec s = spec.value();
  s.n_embd = 256; s.n_layer = 7; s.n_ff = 256; s.head_dim = 64;
  s.rope_linear_factor = 8.f;
  model::SynthOptions opt;
  opt.vocab_from = kVocab;
  const std::string path = tmp_path("gemma3_rope");
  ASSERT_TRUE(model::synth_model(s, opt, path).ok());
  auto m = model::Model::load(path);
  ASSERT_TRUE(m.ok()) << m.error();
  const model::ModelConfig& c = m.value()->config();
  for (int l = 0; l < 7; ++l) {
    SCOPED_TRACE(l);
    const bool local = l != 5;
    EXPECT_EQ(c.is_swa_layer(l), local);
    EXPECT_EQ(c.rope_base_of(l), local ? 10000.f : 1e6f);
    EXPECT_EQ(c.rope_freq_scale_of(l), local ? 1.f : 0.125f);
  }
  EXPECT_FLOAT_EQ(c.q_scale, 1.0f / 8.0f);  // 1/sqrt(head_dim 64)
  forward_finite(path, s, 512);
  std::remove(path.c_str());
  s.rope_base_swa = 20000.f;  // the key, when written, wins
  ASSERT_TRUE(model::synth_model(s, opt, path).ok());
  auto m2 = model::Model::load(path);
  ASSERT_TRUE(m2.ok()) << m2.error();
  EXPECT_EQ(m2.value()->config().rope_base_of(0), 20000.f);
  std::remove(path.c_str());
  // gemma2: the sliding-window layers share the global RoPE.
  auto g2 = model::builtin_shape("gemma-2-2b");
  ASSERT_TRUE(g2.ok());
  s = g2.value();
  s.n_embd = 256; s.n_layer = 2; s.n_ff = 256; s.head_dim = 64; s.rope_base = 5e5f;
  ASSERT_TRUE(model::synth_model(s, opt, path).ok());
  auto m3 = model::Model::load(path);
  ASSERT_TRUE(m3.ok()) << m3.error();
  EXPECT_TRUE(m3.value()->config().is_swa_layer(0));
  EXPECT_EQ(m3.value()->config().rope_base_of(0), 5e5f);
  std::remove(path.c_str());
}

// A file whose rope.dimension_count exceeds the head dimension (RoPE would rotate past
// the head) is refused at load with the key named, not read out of bounds.
TEST(ModelConfig, RopeDimensionBeyondTheHeadIsRefused) {
  const std::string src = "../shared/models/synth-llama-small-f16.gguf";
  std::ifstream in(src, std::ios::binary);
  ASSERT_TRUE(in) << src;
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string key = "llama.rope.dimension_count";
  const size_t at = bytes.find(key);
  ASSERT_NE(at, std::string::npos);
  uint32_t type;
  std::memcpy(&type, bytes.data() + at + key.size(), 4);
  ASSERT_TRUE(type == 4 || type == 5) << "expected a 32-bit integer value, type " << type;
  const uint32_t too_big = 4096;  // head_dim is 32
  std::memcpy(bytes.data() + at + key.size() + 4, &too_big, 4);
  const std::string out = (std::filesystem::temp_directory_path() / "pdserve-test-rope-dim.gguf").string();
  std::ofstream(out, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  auto m = model::Model::load(out);
  std::filesystem::remove(out);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().find("rope.dimension_count"), std::string::npos) << m.error();
}

}  // namespace
}  // namespace pdserve
