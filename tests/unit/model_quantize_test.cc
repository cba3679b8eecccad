// model::quantize_file reproduces llama-quantize: quantising synth-llama-small-f16.gguf to
// Q8_0 and Q4_0 gives, tensor for tensor, the types and bytes of the shipped q8_0 / q4_0
// files (the q4_0 file's output.weight is Q6_K), and the Q4_K_M / Q5_K_M mixes; the Q2_K,
// Q3_K_S, Q3_K_M, IQ4_NL and IQ4_XS files hash, tensor for tensor, to the digests of
// llama-quantize's (tests/data/*.sha256, see tests/data/README.md).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <vector>

#include "base/sha256.h"
#include "gguf/gguf.h"
#include "kernels/quants.h"
#include "model/quantize.h"

namespace pdserve {
namespace {

void expect_same_tensors(const std::string& ours_path, const std::string& ref_path, bool compare_bytes) {
  auto ours = gguf::GgufFile::open(ours_path);
  auto ref = gguf::GgufFile::open(ref_path);
  ASSERT_TRUE(ours.ok()) << ours.error();
  ASSERT_TRUE(ref.ok()) << ref.error();
  ASSERT_EQ(ours.value()->tensors().size(), ref.value()->tensors().size());
  int mismatched = 0;
  for (const gguf::TensorInfo& r : ref.value()->tensors()) {
    const gguf::TensorInfo* o = ours.value()->find_tensor(r.name);
    ASSERT_NE(o, nullptr) << r.name;
    EXPECT_EQ(gguf::type_name(o->type), gguf::type_name(r.type)) << r.name;
    ASSERT_EQ(o->nbytes, r.nbytes) << r.name;
    if (compare_bytes && std::memcmp(o->data, r.data, r.nbytes) != 0) {
      ++mismatched;
      ADD_FAILURE() << r.name << " (" << gguf::type_name(r.type) << "): bytes differ";
    }
  }
  EXPECT_EQ(mismatched, 0);
}

std::string tmp(const std::string& name) { return (std::filesystem::temp_directory_path() / name).string(); }

TEST(ModelQuantize, Q8_0MatchesShippedFileByteForByte) {
  const std::string out = tmp("pdserve-test-q8_0.gguf");
  ASSERT_TRUE(model::quantize_file("../shared/models/synth-llama-small-f16.gguf", out, "Q8_0").ok());
  expect_same_tensors(out, "../shared/models/synth-llama-small-q8_0.gguf", true);
  std::filesystem::remove(out);
}

TEST(ModelQuantize, Q4_0MatchesShippedFileByteForByte) {
  const std::string out = tmp("pdserve-test-q4_0.gguf");
  ASSERT_TRUE(model::quantize_file("../shared/models/synth-llama-small-f16.gguf", out, "Q4_0").ok());
  expect_same_tensors(out, "../shared/models/synth-llama-small-q4_0.gguf", true);
  std::filesystem::remove(out);
}

// Q4_K_M: the per-tensor type plan (Q6_K attn_v / ffn_down on use_more_bits layers, Q6_K
// output) equals the shipped file's; the bytes too where the reference quantiser was used.
TEST(ModelQuantize, Q4_K_MTypePlanMatchesShippedFile) {
  const std::string out = tmp("pdserve-test-q4_k_m.gguf");
  ASSERT_TRUE(model::quantize_file("../shared/models/synth-llama-small-f16.gguf", out, "Q4_K_M").ok());
  expect_same_tensors(out, "../shared/models/synth-llama-small-q4_k_m.gguf", true);
  std::filesystem::remove(out);
}

// Q5_K_M: types and bytes equal the shipped file (llama-quantize build 11669): Q5_K
// (make_qkx2_quants with rmin -0.5, 15 steps) plus Q6_K on the use_more_bits layers.
TEST(ModelQuantize, Q5_K_MMatchesShippedFileByteForByte) {
  const std::string out = tmp("pdserve-test-q5_k_m.gguf");
  ASSERT_TRUE(model::quantize_file("../shared/models/synth-llama-small-f16.gguf", out, "Q5_K_M").ok());
  expect_same_tensors(out, "../shared/models/synth-llama-small-q5_k_m.gguf", true);
  std::filesystem::remove(out);
}

// Our quantize_file(f16 synth, TYPE) against the per-tensor SHA-256 digests of the file
// llama-quantize (build 11669) writes for TYPE: the same tensors (llama-quantize orders
// them differently), types and bytes.
void expect_digests(const std::string& type, const std::string& digest_path) {
  const std::string out = tmp("pdserve-test-digest-" + type + ".gguf");
  ASSERT_TRUE(model::quantize_file("../shared/models/synth-llama-small-f16.gguf", out, type).ok());
  auto f = gguf::GgufFile::open(out);
  ASSERT_TRUE(f.ok()) << f.error();
  std::ifstream in(digest_path);
  ASSERT_TRUE(in) << digest_path;
  std::string line;
  size_t n = 0;
  int mismatched = 0;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string name, hex;
    uint32_t type_id = 0;
    ls >> name >> type_id >> hex;
    const gguf::TensorInfo* tp = f.value()->find_tensor(name);
    ASSERT_NE(tp, nullptr) << name;
    const gguf::TensorInfo& t = *tp;
    ++n;
    EXPECT_EQ(gguf::type_name(t.type), gguf::type_name(static_cast<gguf::GgmlType>(type_id))) << name;
    if (to_hex(sha256(t.data, t.nbytes)) != hex) {
      ++mismatched;
      ADD_FAILURE() << type << " " << name << " (" << gguf::type_name(t.type) << "): bytes differ";
    }
  }
  EXPECT_EQ(n, f.value()->tensors().size());
  EXPECT_EQ(mismatched, 0);
  std::filesystem::remove(out);
}

TEST(ModelQuantize, Q2_KMatchesLlamaQuantizeDigests) { expect_digests("Q2_K", "tests/data/synth-llama-small-q2_k.sha256"); }
TEST(ModelQuantize, Q3_K_SMatchesLlamaQuantizeDigests) { expect_digests("Q3_K_S", "tests/data/synth-llama-small-q3_k_s.sha256"); }
TEST(ModelQuantize, Q3_K_MMatchesLlamaQuantizeDigests) { expect_digests("Q3_K_M", "tests/data/synth-llama-small-q3_k_m.sha256"); }
TEST(ModelQuantize, IQ4_NLMatchesLlamaQuantizeDigests) { expect_digests("IQ4_NL", "tests/data/synth-llama-small-iq4_nl.sha256"); }
TEST(ModelQuantize, IQ4_XSMatchesLlamaQuantizeDigests) { expect_digests("IQ4_XS", "tests/data/synth-llama-small-iq4_xs.sha256"); }

// F32 output dequantises every 2-D weight: each value equals kernels::dequantize of the
// source row (so a quantised file can be inspected or re-quantised from its values).
TEST(ModelQuantize, F32DequantisesEveryWeight) {
  const std::string in = "../shared/models/synth-llama-small-q4_k_m.gguf";
  const std::string out = tmp("pdserve-test-f32.gguf");
  ASSERT_TRUE(model::quantize_file(in, out, "F32").ok());
  auto src = gguf::GgufFile::open(in);
  auto dst = gguf::GgufFile::open(out);
  ASSERT_TRUE(src.ok() && dst.ok());
  EXPECT_EQ(dst.value()->get_int("general.file_type").value_or(-1), 0);
  for (const gguf::TensorInfo& t : src.value()->tensors()) {
    const gguf::TensorInfo* o = dst.value()->find_tensor(t.name);
    ASSERT_NE(o, nullptr) << t.name;
    ASSERT_EQ(o->type, gguf::GgmlType::F32) << t.name;
    ASSERT_EQ(o->dims, t.dims) << t.name;
    const int64_t cols = t.dims[0], rows = t.rows(), rb = gguf::row_bytes(t.type, cols);
    std::vector<float> want(cols);
    for (int64_t r = 0; r < rows; r += 97) {  // a spread of rows
      kernels::dequantize(t.type, t.data + r * rb, want.data(), cols);
      ASSERT_EQ(std::memcmp(want.data(), o->data + r * cols * sizeof(float), cols * sizeof(float)), 0) << t.name << " row " << r;
    }
  }
  std::filesystem::remove(out);
}

// Rows that are not a multiple of 256 (e.g. Qwen2.5-0.5B's 896) cannot hold K-quant
// super-blocks: llama.cpp's fallbacks, Q4_K → Q5_0, Q5_K → Q5_1, Q6_K → Q8_0.
TEST(ModelQuantize, KQuantFallbacksForRowsNotAMultipleOf256) {
  const std::vector<int64_t> dims = {896, 4864};
  const auto plan = [](const char* t) { return model::parse_quantize_type(t).value(); };
  EXPECT_EQ(model::quantized_tensor_type(plan("Q4_K_M"), "blk.5.ffn_up.weight", dims, 24, true), gguf::GgmlType::Q5_0);
  EXPECT_EQ(model::quantized_tensor_type(plan("Q5_K_M"), "blk.5.ffn_up.weight", dims, 24, true), gguf::GgmlType::Q5_1);
  EXPECT_EQ(model::quantized_tensor_type(plan("Q6_K"), "blk.5.ffn_up.weight", dims, 24, true), gguf::GgmlType::Q8_0);
  EXPECT_EQ(model::quantized_tensor_type(plan("Q5_K_M"), "blk.5.ffn_up.weight", {1024, 4864}, 24, true), gguf::GgmlType::Q5_K);
  // Q2_K / Q3_K / IQ4_XS → IQ4_NL (and F16 when not even a multiple of 32).
  EXPECT_EQ(model::quantized_tensor_type(plan("Q2_K"), "blk.5.ffn_up.weight", dims, 24, true), gguf::GgmlType::IQ4_NL);
  EXPECT_EQ(model::quantized_tensor_type(plan("Q3_K_M"), "blk.5.ffn_up.weight", dims, 24, true), gguf::GgmlType::IQ4_NL);
  EXPECT_EQ(model::quantized_tensor_type(plan("IQ4_XS"), "blk.5.ffn_up.weight", dims, 24, true), gguf::GgmlType::IQ4_NL);
  EXPECT_EQ(model::quantized_tensor_type(plan("IQ4_XS"), "blk.5.ffn_up.weight", {100, 64}, 24, true), gguf::GgmlType::F16);
}

// Mixture of experts (llama-quantize's llama_tensor_get_type): the router ffn_gate_inp is
// never quantised; with exactly 8 experts (Mixtral) attn_k and attn_v go to Q8_0 and, for
// the low-bit mixes, attn_output to Q5_K; 3-D expert stacks take the rules of their names.
TEST(ModelQuantize, MixtureOfExpertsRules) {
  const auto plan = [](const char* t) { return model::parse_quantize_type(t).value(); };
  const std::vector<int64_t> sq = {4096, 4096}, kv = {4096, 1024}, exps = {4096, 512, 8};
  EXPECT_EQ(model::quantized_tensor_type(plan("Q4_K_M"), "blk.0.ffn_gate_inp.weight", {4096, 8}, 32, true, 4, 8), gguf::GgmlType::F32);
  EXPECT_EQ(model::quantized_tensor_type(plan("F16"), "blk.0.ffn_gate_inp.weight", {4096, 8}, 32, true, 4, 8), gguf::GgmlType::F32);
  EXPECT_EQ(model::quantized_tensor_type(plan("Q4_K_M"), "blk.5.attn_k.weight", kv, 32, true, 4, 8), gguf::GgmlType::Q8_0);
  EXPECT_EQ(model::quantized_tensor_type(plan("Q4_K_M"), "blk.5.attn_v.weight", kv, 32, true, 4, 8), gguf::GgmlType::Q8_0);
  EXPECT_EQ(model::quantized_tensor_type(plan("Q4_0"), "blk.5.attn_v.weight", kv, 32, true, 4, 8), gguf::GgmlType::Q8_0);
  EXPECT_EQ(model::quantized_tensor_type(plan("Q4_K_M"), "blk.5.attn_output.weight", sq, 32, true, 4, 8), gguf::GgmlType::Q5_K);
  EXPECT_EQ(model::quantized_tensor_type(plan("Q5_K_M"), "blk.5.attn_output.weight", sq, 32, true, 4, 8), gguf::GgmlType::Q5_K);
  EXPECT_EQ(model::quantized_tensor_type(plan("Q4_K_M"), "blk.5.attn_q.weight", sq, 32, true, 4, 8), gguf::GgmlType::Q4_K);
  EXPECT_EQ(model::quantized_tensor_type(plan("Q4_K_M"), "blk.0.ffn_down_exps.weight", {512, 4096, 8}, 32, true, 4, 8),
            gguf::GgmlType::Q6_K);  // use_more_bits(0, 32)
  EXPECT_EQ(model::quantized_tensor_type(plan("Q4_K_M"), "blk.5.ffn_up_exps.weight", exps, 32, true, 4, 8), gguf::GgmlType::Q4_K);
  // Not 8 experts (or dense): no bump.
  EXPECT_EQ(model::quantized_tensor_type(plan("Q4_K_M"), "blk.5.attn_k.weight", kv, 32, true, 4, 16), gguf::GgmlType::Q4_K);
  EXPECT_EQ(model::quantized_tensor_type(plan("Q4_K_M"), "blk.5.attn_k.weight", kv, 32, true, 4), gguf::GgmlType::Q4_K);
  EXPECT_EQ(model::quantized_tensor_type(plan("Q4_K_M"), "blk.5.attn_output.weight", sq, 32, true, 4), gguf::GgmlType::Q4_K);
}

TEST(ModelQuantize, UnknownTypeIsAnError) {
  auto s = model::quantize_file("../shared/models/synth-llama-small-f16.gguf", tmp("x.gguf"), "Q3_X");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("unknown quantisation type"), std::string::npos);
}

TEST(ModelQuantize, ATensorOfATypePdserveCannotReadIsAnErrorNotZeros) {
  // One IQ3_S tensor (256 values, 110 bytes a block): refused, naming it, and no output file
  // (it was converted to zeros).
  gguf::GgufWriter w;
  w.set("general.architecture", gguf::Value::str("llama"));
  const std::vector<uint8_t> block(110 * 4, 0x5A);
  w.add_tensor("token_embd.weight", {256, 4}, gguf::GgmlType::IQ3_S, block.data(), block.size());
  const std::string in = tmp("pdserve-test-iq3s.gguf"), out = tmp("pdserve-test-iq3s-q8.gguf");
  std::filesystem::remove(out);
  ASSERT_TRUE(w.write(in).ok());
  auto s = model::quantize_file(in, out, "Q8_0");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("tensor 'token_embd.weight' has type IQ3_S"), std::string::npos) << s.message();
  EXPECT_FALSE(std::filesystem::exists(out));
  std::filesystem::remove(in);
}

TEST(ModelQuantize, AFileQuantisedOntoItselfEqualsOneWrittenElsewhere) {
  // The output path may be the input's: the output replaces it once written whole (through a
  // temporary file next to it, which is gone afterwards).
  const std::string a = tmp("pdserve-test-self.gguf"), b = tmp("pdserve-test-other.gguf");
  std::filesystem::copy_file("../shared/models/synth-llama-small-f16.gguf", a, std::filesystem::copy_options::overwrite_existing);
  ASSERT_TRUE(model::quantize_file(a, b, "Q8_0").ok());
  ASSERT_TRUE(model::quantize_file(a, a, "Q8_0").ok());
  const auto slurp = [](const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  EXPECT_EQ(slurp(a), slurp(b));
  // Onto a symlink: the target is replaced and the link stays a link.
  const std::string link = tmp("pdserve-test-link.gguf");
  std::filesystem::remove(link);
  std::filesystem::create_symlink(b, link);
  ASSERT_TRUE(model::quantize_file(a, link, "Q4_0").ok());
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  EXPECT_NE(slurp(b), slurp(a));  // b now holds the Q4_0 file
  std::filesystem::remove(link);
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::temp_directory_path()))
    EXPECT_EQ(e.path().string().find("pdserve-test-self.gguf.tmp"), std::string::npos) << e.path();
  std::filesystem::remove(a);
  std::filesystem::remove(b);
}

}  // namespace
}  // namespace pdserve
