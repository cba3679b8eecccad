// GGUF reader: round trip through the writer, every metadata type, and clear errors
// that name the problem for corrupt files.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "model/model.h"

namespace pdserve::gguf {
namespace {

std::string tmp_path(const std::string& name) { return ::testing::TempDir() + "pds_gguf_" + name; }

void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(b.data()), b.size());
}

GgufWriter sample_writer() {
  GgufWriter w;
  w.set("general.architecture", Value::str("llama"));
  w.set("u8", {ValueType::UINT8, uint64_t{200}});
  w.set("i8", {ValueType::INT8, int64_t{-100}});
  w.set("u16", {ValueType::UINT16, uint64_t{60000}});
  w.set("i16", {ValueType::INT16, int64_t{-30000}});
  w.set("u32", Value::u32(4000000000u));
  w.set("i32", Value::i32(-2000000000));
  w.set("u64", Value::u64(1ull << 40));
  w.set("i64", {ValueType::INT64, int64_t{-(1ll << 40)}});
  w.set("f32", Value::f32(0.5f));
  w.set("f64", {ValueType::FLOAT64, 0.125});
  w.set("bool", Value::boolean(true));
  w.set("arr.str", Value::array(ValueType::STRING, {Value::str("a"), Value::str("bc")}));
  w.set("arr.f32", Value::array(ValueType::FLOAT32, {Value::f32(1.5f), Value::f32(-2.f)}));
  std::vector<float> t(64 * 2);
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<float>(i);
  w.add_tensor("t.weight", {64, 2}, GgmlType::F32, t.data(), t.size() * 4);
  std::vector<uint16_t> h(32, 0x3c00);  // 1.0 in f16
  w.add_tensor("h.weight", {32}, GgmlType::F16, h.data(), h.size() * 2);
  return w;
}

TEST(Gguf, RoundTripsEveryValueTypeAndTensors) {
  const std::string path = tmp_path("ok.gguf");
  ASSERT_TRUE(sample_writer().write(path).ok());
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.ok()) << f.error();
  const GgufFile& g = *f.value();
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(*g.get_string("general.architecture"), "llama");
  EXPECT_EQ(*g.get_int("u8"), 200);
  EXPECT_EQ(*g.get_int("i8"), -100);
  EXPECT_EQ(*g.get_int("u16"), 60000);
  EXPECT_EQ(*g.get_int("i16"), -30000);
  EXPECT_EQ(*g.get_int("u32"), 4000000000ll);
  EXPECT_EQ(*g.get_int("i32"), -2000000000);
  EXPECT_EQ(*g.get_int("u64"), 1ll << 40);
  EXPECT_EQ(*g.get_int("i64"), -(1ll << 40));
  EXPECT_FLOAT_EQ(*g.get_float("f32"), 0.5);
  EXPECT_DOUBLE_EQ(*g.get_float("f64"), 0.125);
  EXPECT_TRUE(*g.get_bool("bool"));
  const Array* a = g.get_array("arr.str");
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(a->items.size(), 2u);
  EXPECT_EQ(*a->items[1].as_string(), "bc");
  EXPECT_FLOAT_EQ(*g.get_array("arr.f32")->items[1].as_float(), -2.0);
  const TensorInfo* t = g.find_tensor("t.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dims, (std::vector<int64_t>{64, 2}));
  EXPECT_EQ(t->nbytes, 64u * 2 * 4);
  EXPECT_EQ(reinterpret_cast<const float*>(t->data)[127], 127.f);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t->data) % 32, 0u);
  EXPECT_EQ(g.find_tensor("h.weight")->type, GgmlType::F16);
  EXPECT_FALSE(g.require_int("missing.key").ok());
  EXPECT_NE(g.require_int("missing.key").error().find("missing.key"), std::string::npos);
  // Serialising what we read gives the same bytes (the writer and reader agree).
  GgufWriter w2;
  for (const auto& [k, v] : g.metadata()) w2.set(k, v);
  for (const auto& ti : g.tensors()) w2.add_tensor(ti.name, ti.dims, ti.type, ti.data, ti.nbytes);
  EXPECT_EQ(w2.serialize(), sample_writer().serialize());
}

TEST(Gguf, ReadsTheSharedModels) {
  for (const char* m : {"stories260K", "synth-llama-small-f16", "synth-llama-small-q8_0", "synth-llama-small-q4_k_m",
                        "synth-qwen2-small-q8_0"}) {
    auto f = GgufFile::open(std::string("../shared/models/") + m + ".gguf");
    ASSERT_TRUE(f.ok()) << f.error();
    EXPECT_GT(f.value()->tensors().size(), 10u);
    for (const auto& t : f.value()->tensors()) EXPECT_NE(t.data, nullptr) << t.name;
  }
}

// FileMemory::kHugePages (what a model loads with by default) gives the mapped file's
// metadata and tensor bytes from its own copy (the mapping is gone by then); a corrupt
// file is refused before anything is copied, with the same error.
TEST(Gguf, AHugePageCopyHoldsTheFilesBytes) {
  for (const char* m : {"stories260K", "synth-llama-small-q4_k_m"}) {
    const std::string path = std::string("../shared/models/") + m + ".gguf";
    auto mapped = GgufFile::open(path, FileMemory::kMmap);
    auto copied = GgufFile::open(path, FileMemory::kHugePages);
    ASSERT_TRUE(mapped.ok() && copied.ok()) << mapped.error() << copied.error();
    const GgufFile &a = *mapped.value(), &b = *copied.value();
    ASSERT_EQ(a.tensors().size(), b.tensors().size());
    ASSERT_EQ(a.metadata().size(), b.metadata().size());
    for (size_t i = 0; i < a.tensors().size(); ++i) {
      const TensorInfo &x = a.tensors()[i], &y = b.tensors()[i];
      EXPECT_EQ(x.name, y.name);
      ASSERT_EQ(x.nbytes, y.nbytes);
      EXPECT_NE(x.data, y.data) << "a copy, not the mapping";
      EXPECT_EQ(std::memcmp(x.data, y.data, x.nbytes), 0) << m << " " << x.name;
      EXPECT_EQ(reinterpret_cast<uintptr_t>(y.data) % 32, 0u);
    }
    EXPECT_EQ(*a.get_string("general.architecture"), *b.get_string("general.architecture"));
  }
  const std::vector<uint8_t> whole = sample_writer().serialize();
  ASSERT_GT(whole.size(), 8u);
  const std::vector<uint8_t> cut(whole.begin(), whole.end() - 8);  // (not resize: GCC 12 -O1 warns)
  const std::string path = tmp_path("cut_copy");
  write_bytes(path, cut);
  auto f = GgufFile::open(path, FileMemory::kHugePages);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.error().find("tensor 'h.weight'"), std::string::npos) << f.error();
}

std::string open_error(const std::vector<uint8_t>& bytes, const std::string& name) {
  const std::string path = tmp_path(name);
  write_bytes(path, bytes);
  auto f = GgufFile::open(path);
  return f.ok() ? "" : f.error();
}

TEST(Gguf, ErrorsNameTheProblem) {
  auto missing = GgufFile::open("/nonexistent/model.gguf");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().find("cannot open"), std::string::npos);
  for (const char* special : {"/dev/zero", "/dev/null"}) {  // a device: refused at once, not read
    auto dev = GgufFile::open(special);
    ASSERT_FALSE(dev.ok()) << special;
    EXPECT_NE(dev.error().find("not a regular file"), std::string::npos) << dev.error();
  }

  EXPECT_NE(open_error({'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd'}, "text").find("not a GGUF file"), std::string::npos);
  EXPECT_NE(open_error({'G', 'G'}, "tiny").find("not a GGUF file"), std::string::npos);

  std::vector<uint8_t> good = sample_writer().serialize();
  std::vector<uint8_t> v1 = good;
  v1[4] = 1;
  EXPECT_NE(open_error(v1, "v1").find("unsupported GGUF version 1"), std::string::npos);
  std::vector<uint8_t> v9 = good;
  v9[4] = 9;
  EXPECT_NE(open_error(v9, "v9").find("unsupported GGUF version 9"), std::string::npos);

  // Truncated inside the metadata: the error names the key being read.
  std::vector<uint8_t> cut(good.begin(), good.begin() + 60);
  std::string err = open_error(cut, "cut_meta");
  EXPECT_NE(err.find("truncated"), std::string::npos) << err;
  EXPECT_NE(err.find("'"), std::string::npos) << err;

  // Truncated inside the tensor data: the error names the tensor.
  std::vector<uint8_t> cut_data(good.begin(), good.end() - 8);
  err = open_error(cut_data, "cut_data");
  EXPECT_NE(err.find("tensor 'h.weight'"), std::string::npos) << err;
  EXPECT_NE(err.find("outside the file"), std::string::npos) << err;
}

TEST(Gguf, UnknownTensorTypeAndBadShapesAreNamed) {
  GgufWriter w;
  std::vector<uint8_t> data(64);
  w.add_tensor("weird.weight", {16}, static_cast<GgmlType>(99), data.data(), data.size());
  EXPECT_NE(open_error(w.serialize(), "type99").find("tensor 'weird.weight' has unknown type 99"), std::string::npos);
  GgufWriter w2;
  w2.add_tensor("q.weight", {33}, GgmlType::Q8_0, data.data(), 34);
  EXPECT_NE(open_error(w2.serialize(), "q8rows").find("'q.weight'"), std::string::npos);
}

TEST(Gguf, ModelLoadNamesMissingKeysAndTensors) {
  GgufWriter w;
  w.set("general.architecture", Value::str("llama"));
  w.set("llama.context_length", Value::u32(64));
  const std::string path = tmp_path("nokeys.gguf");
  ASSERT_TRUE(w.write(path).ok());
  auto m = model::Model::load(path);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().find("missing required metadata key 'llama.embedding_length'"), std::string::npos) << m.error();

  // All keys present, tensors missing.
  w.set("llama.embedding_length", Value::u32(8));
  w.set("llama.block_count", Value::u32(1));
  w.set("llama.feed_forward_length", Value::u32(16));
  w.set("llama.attention.head_count", Value::u32(2));
  ASSERT_TRUE(w.write(path).ok());
  m = model::Model::load(path);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().find("missing tensor 'token_embd.weight'"), std::string::npos) << m.error();

  w.set("general.architecture", Value::str("mamba"));
  ASSERT_TRUE(w.write(path).ok());
  m = model::Model::load(path);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().find("unsupported architecture 'mamba'"), std::string::npos) << m.error();
}

// Found by fuzz_gguf (tests/fuzz/corpus/gguf/crash-config-int-wrap): 64-bit values that
// narrowed to int wrapped to 0 or below and passed as a "valid" config.
TEST(Gguf, HyperparametersThatDoNotFitAnIntAreRefusedByName) {
  auto base = [] {
    GgufWriter w;
    w.set("general.architecture", Value::str("llama"));
    w.set("llama.context_length", Value::u32(64));
    w.set("llama.embedding_length", Value::u32(8));
    w.set("llama.block_count", Value::u32(1));
    w.set("llama.feed_forward_length", Value::u32(16));
    w.set("llama.attention.head_count", Value::u32(2));
    return w;
  };
  const std::string path = tmp_path("intwrap.gguf");
  for (const char* key : {"llama.embedding_length", "llama.block_count", "llama.attention.head_count",
                          "llama.attention.head_count_kv", "llama.attention.key_length", "llama.context_length"}) {
    GgufWriter w = base();
    w.set(key, Value::u64(uint64_t{1} << 32));  // wraps to 0 as an int
    ASSERT_TRUE(w.write(path).ok());
    auto m = model::Model::load(path);
    ASSERT_FALSE(m.ok()) << key;
    EXPECT_NE(m.error().find(std::string("'") + key + "' is 4294967296"), std::string::npos) << m.error();
  }
  GgufWriter w = base();
  w.set("llama.attention.head_count_kv", Value::i32(-2));
  ASSERT_TRUE(w.write(path).ok());
  auto m = model::Model::load(path);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().find("'llama.attention.head_count_kv' is -2"), std::string::npos) << m.error();
  // Floats: present means a finite number in range (a NaN or zero RoPE base, a negative
  // epsilon loaded and gave NaN logits); a wrong type is refused, not replaced by the default.
  struct Case {
    const char* key;
    Value v;
    const char* says;
  };
  const Case cases[] = {
      {"llama.rope.freq_base", Value::f32(0.f), "'llama.rope.freq_base' is 0: it must be a finite number above 0"},
      {"llama.rope.freq_base", Value::f32(std::nanf("")), "'llama.rope.freq_base' is nan"},
      {"llama.rope.freq_base", Value::str("1e4"), "'llama.rope.freq_base' must be a number"},
      {"llama.attention.layer_norm_rms_epsilon", Value::f32(-1.f), "is -1: it must be a finite number of at least 0"},
      {"llama.rope.scaling.type", Value::u32(1), "'llama.rope.scaling.type' must be a string"},
      {"llama.context_length", Value::boolean(true), "'llama.context_length' must be an integer"},
  };
  for (const Case& c : cases) {
    GgufWriter w2 = base();
    w2.set(c.key, c.v);
    ASSERT_TRUE(w2.write(path).ok());
    auto m2 = model::Model::load(path);
    ASSERT_FALSE(m2.ok()) << c.key;
    EXPECT_NE(m2.error().find(c.says), std::string::npos) << m2.error();
  }
}

}  // namespace
}  // namespace pdserve::gguf

namespace pdserve::gguf {
namespace {

void put_u32(std::vector<uint8_t>& b, uint32_t x) { for (int i = 0; i < 4; ++i) b.push_back(static_cast<uint8_t>(x >> (8 * i))); }
void put_u64(std::vector<uint8_t>& b, uint64_t x) { for (int i = 0; i < 8; ++i) b.push_back(static_cast<uint8_t>(x >> (8 * i))); }
void put_str(std::vector<uint8_t>& b, const std::string& s) {
  put_u64(b, s.size());
  b.insert(b.end(), s.begin(), s.end());
}
std::vector<uint8_t> header(uint64_t n_tensors, uint64_t n_kv) {
  std::vector<uint8_t> b = {'G', 'G', 'U', 'F'};
  put_u32(b, 3);
  put_u64(b, n_tensors);
  put_u64(b, n_kv);
  return b;
}

// Found by tests/fuzz (fuzz_gguf, corpus/gguf/crash-array-count-oom): an array's element
// count was trusted with an allocation (~200 GB for a 100-byte file) before any element
// was read. Now the count beyond the file's rest is refused as truncation.
TEST(Gguf, HugeArrayCountInATinyFileIsTruncationNotAnAllocation) {
  std::vector<uint8_t> b = header(0, 1);
  put_str(b, "tokenizer.ggml.tokens");
  put_u32(b, static_cast<uint32_t>(ValueType::ARRAY));
  put_u32(b, static_cast<uint32_t>(ValueType::UINT64));
  put_u64(b, 3000000000ull);  // elements claimed; none present
  b.push_back(0);
  const std::string path = ::testing::TempDir() + "pds_gguf_huge_array";
  { std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), b.size()); }
  auto f = GgufFile::open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.error().find("tokenizer.ggml.tokens"), std::string::npos) << f.error();
  std::remove(path.c_str());
}

TEST(Gguf, AMetadataArrayOfMillionsOfSmallElementsIsRefusedNotInflated) {
  // 8 Mi one-byte elements (an 8 MB file) became 8 Mi Values of ~50 bytes each: refused by
  // count, naming the key (helper-63: a 40 MB file took 2 GB).
  std::vector<uint8_t> b = header(0, 1);
  put_str(b, "junk");
  put_u32(b, static_cast<uint32_t>(ValueType::ARRAY));
  put_u32(b, static_cast<uint32_t>(ValueType::UINT8));
  put_u64(b, 8ull << 20);
  b.resize(b.size() + (8u << 20), 7);
  const std::string path = ::testing::TempDir() + "pds_gguf_big_array";
  { std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), b.size()); }
  auto f = GgufFile::open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.error().find("'junk' has an array of 8388608 elements"), std::string::npos) << f.error();
  std::remove(path.c_str());
}

// Dimensions each in range whose product overflows int64 (TensorInfo::n_elements).
TEST(Gguf, TensorElementCountOverflowIsAnError) {
  std::vector<uint8_t> b = header(1, 0);
  put_str(b, "big.weight");
  put_u32(b, 3);
  for (int i = 0; i < 3; ++i) put_u64(b, 1ull << 30);
  put_u32(b, static_cast<uint32_t>(GgmlType::F32));
  put_u64(b, 0);
  const std::string path = ::testing::TempDir() + "pds_gguf_big_tensor";
  { std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), b.size()); }
  auto f = GgufFile::open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.error().find("tensor 'big.weight' has more than 2^50 elements"), std::string::npos) << f.error();
  std::remove(path.c_str());
}

// Two tensors whose data overlap are refused, naming both: the model's private copy
// rewrites some matrices in place (kernels/weight_layout.h), which would change the other's
// bytes (found by a helper with a hand-edited file). Tensors that only touch are fine.
TEST(Gguf, OverlappingTensorDataIsAnError) {
  for (uint64_t second : {uint64_t{96}, uint64_t{128}}) {  // 128 bytes each: overlapping, then adjacent
    std::vector<uint8_t> b = header(2, 0);
    for (const auto& [name, offset] : {std::pair<std::string, uint64_t>{"a.weight", 0}, {"b.weight", second}}) {
      put_str(b, name);
      put_u32(b, 1);
      put_u64(b, 32);
      put_u32(b, static_cast<uint32_t>(GgmlType::F32));
      put_u64(b, offset);
    }
    b.resize((b.size() + 31) / 32 * 32 + 256, 0);
    const std::string path = ::testing::TempDir() + "pds_gguf_overlap";
    { std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), b.size()); }
    auto f = GgufFile::open(path);
    if (second < 128) {
      ASSERT_FALSE(f.ok());
      EXPECT_NE(f.error().find("tensor 'b.weight' data (offset 96) overlaps tensor 'a.weight'"), std::string::npos) << f.error();
    } else {
      EXPECT_TRUE(f.ok()) << f.error();
    }
    std::remove(path.c_str());
  }
}

TEST(Gguf, WeightsFingerprintTellsFilesOfOneShapeApartAndIgnoresTheKernelLayout) {
  // KV store keys and the PD handshake carry it: two files of the same shape but other weights
  // (here Q8_0 and Q4_0 of one model) must differ, or one reuses the other's KV. The same file
  // must give the same fingerprint mapped or copied and re-laid out for the kernels.
  const std::string q8 = "../shared/models/synth-llama-small-q8_0.gguf", q4 = "../shared/models/synth-llama-small-q4_0.gguf";
  auto mapped = model::Model::load(q4, gguf::FileMemory::kMmap);
  auto copied = model::Model::load(q4, gguf::FileMemory::kHugePages);
  auto other = model::Model::load(q8, gguf::FileMemory::kMmap);
  ASSERT_TRUE(mapped.ok() && copied.ok() && other.ok());
  EXPECT_EQ(mapped.value()->weights_fingerprint().size(), 16u);
  EXPECT_EQ(mapped.value()->weights_fingerprint(), copied.value()->weights_fingerprint());
  EXPECT_NE(mapped.value()->weights_fingerprint(), other.value()->weights_fingerprint());
  // One changed weight byte in the middle of a tensor's samples changes it too.
  auto f = gguf::GgufFile::open(q4, gguf::FileMemory::kHugePages);
  ASSERT_TRUE(f.ok());
  const gguf::TensorInfo& t = f.value()->tensors().back();
  const std::string before = gguf::weights_fingerprint(*f.value());
  // The same tensors written in reverse order agree (quantize writes its own order).
  GgufWriter w;
  for (const auto& [key, value] : f.value()->metadata()) w.set(key, value);
  const auto& ts = f.value()->tensors();
  for (auto it = ts.rbegin(); it != ts.rend(); ++it) w.add_tensor(it->name, it->dims, it->type, it->data, it->nbytes);
  const std::string path = ::testing::TempDir() + "pds_fingerprint_reversed.gguf";
  ASSERT_TRUE(w.write(path).ok());
  auto reversed = gguf::GgufFile::open(path);
  ASSERT_TRUE(reversed.ok()) << reversed.error();
  EXPECT_EQ(reversed.value()->tensors().front().name, ts.back().name);
  EXPECT_EQ(gguf::weights_fingerprint(*reversed.value()), before);
  std::remove(path.c_str());
  const_cast<uint8_t*>(t.data)[(t.nbytes - 64) * 7 / 15 + 3] ^= 1;
  EXPECT_NE(gguf::weights_fingerprint(*f.value()), before);
}

}  // namespace
}  // namespace pdserve::gguf
