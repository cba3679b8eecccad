// Vocab::from_gguf and Tokenizer::from_gguf on synthetic GGUF files: defaults, special
// ids, and errors that name the missing or invalid key.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <cstdio>
#include <unistd.h>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace pdserve::tokenizer {
namespace {

using gguf::Value;
using gguf::ValueType;

Value strings(std::vector<std::string> xs) {
  std::vector<Value> items;
  for (auto& x : xs) items.push_back(Value::str(x));
  return Value::array(ValueType::STRING, std::move(items));
}

Value floats(std::vector<float> xs) {
  std::vector<Value> items;
  for (float x : xs) items.push_back(Value::f32(x));
  return Value::array(ValueType::FLOAT32, std::move(items));
}

Value ints(std::vector<int32_t> xs) {
  std::vector<Value> items;
  for (int32_t x : xs) items.push_back(Value::i32(x));
  return Value::array(ValueType::INT32, std::move(items));
}

/// A small SPM vocab: <unk> <s> </s> ▁ a b ▁a ab ba <0x41> <|x|>.
gguf::GgufWriter spm_writer() {
  gguf::GgufWriter w;
  w.set("general.architecture", Value::str("llama"));
  w.set("tokenizer.ggml.model", Value::str("llama"));
  w.set("tokenizer.ggml.tokens", strings({"<unk>", "<s>", "</s>", "\xe2\x96\x81", "a", "b", "\xe2\x96\x81" "a", "ab",
                                          "ba", "<0x41>", "<|x|>"}));
  w.set("tokenizer.ggml.scores", floats({0, 0, 0, -1, -2, -3, -4, -5, -5, 0, 0}));
  w.set("tokenizer.ggml.token_type", ints({2, 3, 3, 1, 1, 1, 1, 1, 1, 6, 4}));
  return w;
}

class TempGguf {
 public:
  explicit TempGguf(const gguf::GgufWriter& w) {
    char buf[] = "/tmp/pds_tok_XXXXXX";
    int fd = mkstemp(buf);
    close(fd);
    path_ = buf;
    Status s = w.write(path_);
    EXPECT_TRUE(s.ok()) << s.message();
    auto f = gguf::GgufFile::open(path_);
    EXPECT_TRUE(f.ok()) << f.error();
    if (f.ok()) file_ = std::move(f).value();
  }
  ~TempGguf() { std::remove(path_.c_str()); }
  const gguf::GgufFile& file() const { return *file_; }

 private:
  std::string path_;
  std::unique_ptr<gguf::GgufFile> file_;
};

TEST(TokenizerVocab, Defaults) {
  TempGguf g(spm_writer());
  auto v = Vocab::from_gguf(g.file());
  ASSERT_TRUE(v.ok()) << v.error();
  EXPECT_EQ(v->bos_id, 1);  // llama.cpp SPM defaults
  EXPECT_EQ(v->eos_id, 2);
  EXPECT_EQ(v->unk_id, 0);
  EXPECT_EQ(v->pad_id, -1);
  EXPECT_EQ(v->eot_id, -1);
  EXPECT_TRUE(v->add_bos);
  EXPECT_FALSE(v->add_eos);
  EXPECT_TRUE(v->add_space_prefix);
  EXPECT_EQ(v->chat_template, "");
  EXPECT_EQ(v->find("ab"), 7);
  EXPECT_EQ(v->find("zz"), -1);
  EXPECT_FLOAT_EQ(v->scores[5], -3.0f);
  EXPECT_EQ(v->types[10], TokenType::USER_DEFINED);
  // Longest special text first (ties in id order).
  EXPECT_EQ(v->special_ids, (std::vector<int32_t>{0, 10, 2, 1}));
  EXPECT_EQ(v->eog_ids, (std::vector<int32_t>{2}));
}

TEST(TokenizerVocab, ExplicitKeys) {
  auto w = spm_writer();
  w.set("tokenizer.ggml.bos_token_id", Value::u32(2));
  w.set("tokenizer.ggml.eos_token_id", Value::u32(1));
  w.set("tokenizer.ggml.unknown_token_id", Value::u32(3));
  w.set("tokenizer.ggml.padding_token_id", Value::u32(4));
  w.set("tokenizer.ggml.eot_token_id", Value::u32(5));
  w.set("tokenizer.ggml.add_bos_token", Value::boolean(false));
  w.set("tokenizer.ggml.add_eos_token", Value::boolean(true));
  w.set("tokenizer.ggml.add_space_prefix", Value::boolean(false));
  w.set("tokenizer.ggml.pre", Value::str("default"));
  w.set("tokenizer.chat_template", Value::str("{{ x }}"));
  TempGguf g(w);
  auto v = Vocab::from_gguf(g.file());
  ASSERT_TRUE(v.ok()) << v.error();
  EXPECT_EQ(v->bos_id, 2);
  EXPECT_EQ(v->eos_id, 1);
  EXPECT_EQ(v->unk_id, 3);
  EXPECT_EQ(v->pad_id, 4);
  EXPECT_EQ(v->eot_id, 5);
  EXPECT_FALSE(v->add_bos);
  EXPECT_TRUE(v->add_eos);
  EXPECT_FALSE(v->add_space_prefix);
  EXPECT_EQ(v->pre, "default");
  EXPECT_EQ(v->chat_template, "{{ x }}");
}

TEST(TokenizerVocab, OutOfRangeIdKeepsDefault) {
  auto w = spm_writer();
  w.set("tokenizer.ggml.bos_token_id", Value::u32(999));
  TempGguf g(w);
  auto v = Vocab::from_gguf(g.file());
  ASSERT_TRUE(v.ok()) << v.error();
  EXPECT_EQ(v->bos_id, 1);
}

TEST(TokenizerVocab, MissingKeys) {
  {
    gguf::GgufWriter w;
    w.set("tokenizer.ggml.model", Value::str("llama"));
    TempGguf g(w);
    auto v = Vocab::from_gguf(g.file());
    ASSERT_FALSE(v.ok());
    EXPECT_EQ(v.error(), "missing required metadata key 'tokenizer.ggml.tokens'");
    auto t = Tokenizer::from_gguf(g.file());
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.error(), "missing required metadata key 'tokenizer.ggml.tokens'");
  }
  {
    gguf::GgufWriter w;
    w.set("tokenizer.ggml.tokens", strings({"a"}));
    TempGguf g(w);
    auto v = Vocab::from_gguf(g.file());
    ASSERT_FALSE(v.ok());
    EXPECT_EQ(v.error(), "missing required metadata key 'tokenizer.ggml.model'");
  }
}

TEST(TokenizerVocab, InvalidValues) {
  {
    auto w = spm_writer();
    w.set("tokenizer.ggml.tokens", Value::u32(3));
    TempGguf g(w);
    auto v = Vocab::from_gguf(g.file());
    ASSERT_FALSE(v.ok());
    EXPECT_NE(v.error().find("'tokenizer.ggml.tokens'"), std::string::npos) << v.error();
  }
  {
    auto w = spm_writer();
    w.set("tokenizer.ggml.scores", floats({1, 2}));
    TempGguf g(w);
    auto v = Vocab::from_gguf(g.file());
    ASSERT_FALSE(v.ok());
    EXPECT_NE(v.error().find("'tokenizer.ggml.scores'"), std::string::npos) << v.error();
  }
  {
    auto w = spm_writer();
    w.set("tokenizer.ggml.tokens", strings({"a", "b", "a"}));
    w.set("tokenizer.ggml.scores", floats({0, 0, 0}));
    w.set("tokenizer.ggml.token_type", ints({1, 1, 1}));
    TempGguf g(w);
    auto v = Vocab::from_gguf(g.file());
    ASSERT_FALSE(v.ok());
    EXPECT_NE(v.error().find("duplicate token"), std::string::npos) << v.error();
  }
}

TEST(TokenizerVocab, UnsupportedModel) {
  auto w = spm_writer();
  w.set("tokenizer.ggml.model", Value::str("bert"));
  TempGguf g(w);
  auto t = Tokenizer::from_gguf(g.file());
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.error(), "unsupported tokenizer model 'bert'");
}

TEST(TokenizerVocab, BpeVocabLoads) {
  auto f = gguf::GgufFile::open("../shared/tokenizer/ggml-vocab-gpt-2.gguf");
  ASSERT_TRUE(f.ok()) << f.error();
  auto v = Vocab::from_gguf(**f);
  ASSERT_TRUE(v.ok()) << v.error();
  EXPECT_EQ(v->model, "gpt2");
  EXPECT_EQ(v->pre, "gpt-2");
  EXPECT_FALSE(v->add_space_prefix);
  EXPECT_GT(v->size(), 50000);
  ASSERT_EQ(v->merges.size(), 50000u);
  EXPECT_EQ(v->merges[0], "\xc4\xa0 t");  // "Ġ t"
  EXPECT_EQ(v->bos_id, 50256);
  EXPECT_TRUE(std::binary_search(v->eog_ids.begin(), v->eog_ids.end(), 50256));
  auto t = Tokenizer::from_gguf(**f);
  ASSERT_TRUE(t.ok()) << t.error();
}

TEST(TokenizerVocab, SmallSpmEncode) {
  auto w = spm_writer();
  w.set("tokenizer.ggml.add_eos_token", Value::boolean(true));
  TempGguf g(w);
  auto t = Tokenizer::from_gguf(g.file());
  ASSERT_TRUE(t.ok()) << t.error();
  auto& tok = **t;
  // "▁a" (score -4) outscores "ab" (-5), so "▁ab" splits as "▁a" "b".
  EXPECT_EQ(tok.encode("ab", false), (std::vector<int32_t>{6, 5}));
  // add_bos acts as llama.cpp's add_special: BOS and, with add_eos, EOS.
  EXPECT_EQ(tok.encode("ab", true), (std::vector<int32_t>{1, 6, 5, 2}));
  // Equal scores ("ba" and "ab" are both -5): the leftmost pair merges first.
  EXPECT_EQ(tok.encode("bab", false), (std::vector<int32_t>{3, 8, 5}));
  // 'A' has a byte token; 'C' has none and falls back to <unk>.
  EXPECT_EQ(tok.encode("A", false), (std::vector<int32_t>{3, 9}));
  EXPECT_EQ(tok.encode("C", false), (std::vector<int32_t>{3, 0}));
  // User-defined tokens are split out even without parse_special (llama.cpp).
  EXPECT_EQ(tok.encode("a<|x|>a", false, false), (std::vector<int32_t>{6, 10, 6}));
  EXPECT_EQ(tok.token_to_piece(10), "<|x|>");
  EXPECT_EQ(tok.token_to_piece(6), " a");
  EXPECT_EQ(tok.token_to_piece(9), "A");
}

/// vocab_fingerprint of a model file's vocabulary.
std::string fingerprint_of(const std::string& path) {
  auto f = gguf::GgufFile::open(path);
  EXPECT_TRUE(f.ok()) << f.error();
  if (!f.ok()) return {};
  auto t = Tokenizer::from_gguf(**f);
  EXPECT_TRUE(t.ok()) << t.error();
  return t.ok() ? t.value()->fingerprint() : std::string();
}

// The router serves only through decode workers whose fingerprint equals its own file's:
// files with one vocabulary must agree whatever their weights, and any change to what an
// id means (a piece, a score, a type, a merge, a special id, a flag) must not.
TEST(TokenizerVocab, FingerprintNamesWhatIdsMean) {
  const std::string q4 = fingerprint_of("../shared/models/synth-llama-small-q4_0.gguf");
  EXPECT_EQ(q4.size(), 16u);
  EXPECT_EQ(q4, fingerprint_of("../shared/models/synth-llama-small-q8_0.gguf")) << "same vocabulary, other weights";
  EXPECT_NE(q4, fingerprint_of("../shared/models/stories260K.gguf"));
  EXPECT_NE(q4, fingerprint_of("../shared/models/synth-qwen2-small-q8_0.gguf"));

  auto base = Vocab::from_gguf(TempGguf(spm_writer()).file());
  ASSERT_TRUE(base.ok()) << base.error();
  const std::string fp = vocab_fingerprint(*base);
  EXPECT_EQ(fp, vocab_fingerprint(*base));
  std::vector<std::function<void(Vocab&)>> edits = {
      [](Vocab& v) { v.tokens[4] = "c"; },
      [](Vocab& v) { v.scores[7] = -4.5f; },
      [](Vocab& v) { v.types[10] = TokenType::CONTROL; },
      [](Vocab& v) { v.tokens.push_back("x"); },
      [](Vocab& v) { v.merges.push_back("a b"); },
      [](Vocab& v) { v.eos_id = 1; },
      [](Vocab& v) { v.add_bos = !v.add_bos; },
      [](Vocab& v) { v.add_space_prefix = !v.add_space_prefix; },
      [](Vocab& v) { v.pre = "llama3"; },
      // Fields do not run together: "ab" + "" differs from "a" + "b".
      [](Vocab& v) { v.tokens[7] = "a"; v.tokens[8] = "bba"; },
  };
  for (size_t i = 0; i < edits.size(); ++i) {
    Vocab v = *base;
    edits[i](v);
    EXPECT_NE(vocab_fingerprint(v), fp) << "edit " << i;
  }
  Vocab templ = *base;
  templ.chat_template = "{{ messages }}";
  EXPECT_EQ(vocab_fingerprint(templ), fp) << "the chat template does not change what an id means";
}

}  // namespace
}  // namespace pdserve::tokenizer
