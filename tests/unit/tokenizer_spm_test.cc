// SPM tokenizer against llama.cpp's test vectors (../shared/tokenizer) and the reference
// engine's prompt tokenization of stories260K (../shared/reference/stories260K.json).
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "gguf/gguf.h"
#include "support/linear_time.h"
#include "support/vocab_vectors.h"
#include "tokenizer/tokenizer.h"

namespace pdserve::tokenizer {
namespace {

using testing::load_tokenizer;
using testing::hex;
using testing::read_file;

void check_vectors(const std::string& name) { testing::check_vocab_vectors(name, /*check_decode=*/false); }

TEST(TokenizerSpm, LlamaSpmVectors) { check_vectors("llama-spm"); }
TEST(TokenizerSpm, Phi3Vectors) { check_vectors("phi-3"); }

TEST(TokenizerSpm, Stories260kReference) {
  auto tok = load_tokenizer("../shared/models/stories260K.gguf");
  ASSERT_TRUE(tok);
  auto ref = nlohmann::json::parse(read_file("../shared/reference/stories260K.json"));
  ASSERT_FALSE(ref["cases"].empty());
  for (const auto& c : ref["cases"]) {
    const std::string prompt = c["prompt"];
    EXPECT_EQ(tok->encode(prompt, tok->vocab().add_bos), c["prompt_tokens"].get<std::vector<int32_t>>()) << prompt;
    auto tokens = c["tokens"].get<std::vector<int32_t>>();
    auto pieces = c["token_bytes_hex"].get<std::vector<std::string>>();
    ASSERT_EQ(tokens.size(), pieces.size());
    std::string text;
    for (size_t i = 0; i < tokens.size(); ++i) {
      EXPECT_EQ(hex(tok->token_to_piece(tokens[i])), pieces[i]) << "token " << tokens[i];
      EXPECT_FALSE(tok->is_eog(tokens[i]));
    }
    EXPECT_EQ(hex(tok->decode(tokens)), c["text_bytes_hex"].get<std::string>());
  }
}

TEST(TokenizerSpm, VocabMetadata) {
  auto tok = load_tokenizer("../shared/tokenizer/ggml-vocab-llama-spm.gguf");
  ASSERT_TRUE(tok);
  const Vocab& v = tok->vocab();
  EXPECT_EQ(v.model, "llama");
  EXPECT_EQ(v.size(), 32000);
  EXPECT_EQ(v.bos_id, 1);
  EXPECT_EQ(v.eos_id, 2);
  EXPECT_EQ(v.unk_id, 0);
  EXPECT_TRUE(v.add_bos);
  EXPECT_FALSE(v.add_eos);
  EXPECT_TRUE(v.add_space_prefix);
  EXPECT_EQ(v.types[0], TokenType::UNKNOWN);
  EXPECT_EQ(v.types[3], TokenType::BYTE);
  EXPECT_TRUE(tok->is_eog(2));
  EXPECT_FALSE(tok->is_eog(1));

  auto phi = load_tokenizer("../shared/tokenizer/ggml-vocab-phi-3.gguf");
  ASSERT_TRUE(phi);
  EXPECT_EQ(phi->vocab().eos_id, 32000);
  EXPECT_EQ(phi->vocab().pad_id, 32000);
  EXPECT_EQ(phi->vocab().eot_id, 32007);  // "<|end|>", detected by text as llama.cpp does
  EXPECT_TRUE(phi->is_eog(32000));        // <|endoftext|>
  EXPECT_TRUE(phi->is_eog(32007));        // <|end|>
  EXPECT_FALSE(phi->is_eog(32001));       // <|assistant|>
  EXPECT_NE(phi->vocab().chat_template.find("<|assistant|>"), std::string::npos);
}

TEST(TokenizerSpm, BosAndEmpty) {
  auto tok = load_tokenizer("../shared/tokenizer/ggml-vocab-llama-spm.gguf");
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->encode("", true), std::vector<int32_t>{1});
  EXPECT_EQ(tok->encode("", false), std::vector<int32_t>{});
  EXPECT_EQ(tok->encode("Hello world", true), (std::vector<int32_t>{1, 15043, 3186}));
  EXPECT_EQ(tok->encode("Hello world", false), (std::vector<int32_t>{15043, 3186}));
}

TEST(TokenizerSpm, ParseSpecial) {
  auto tok = load_tokenizer("../shared/tokenizer/ggml-vocab-llama-spm.gguf");
  ASSERT_TRUE(tok);
  auto with = tok->encode("<s>Hi", false, /*parse_special=*/true);
  ASSERT_FALSE(with.empty());
  EXPECT_EQ(with[0], 1);
  // llama.cpp prefixes a space to text that follows a special token.
  auto rest = tok->encode("Hi", false);
  EXPECT_EQ(std::vector<int32_t>(with.begin() + 1, with.end()), rest);

  auto plain = tok->encode("<s>Hi", false, /*parse_special=*/false);
  EXPECT_EQ(std::find(plain.begin(), plain.end(), 1), plain.end());
  EXPECT_EQ(tok->decode(plain), " <s>Hi");

  // Several specials and text in between; the middle text also gets the space prefix.
  auto ids = tok->encode("a</s><s>b", false, true);
  std::vector<int32_t> a = tok->encode("a", false), b = tok->encode("b", false);
  std::vector<int32_t> want = a;
  want.push_back(2);
  want.push_back(1);
  want.insert(want.end(), b.begin(), b.end());
  EXPECT_EQ(ids, want);
}

TEST(TokenizerSpm, Phi3SpecialStrip) {
  auto tok = load_tokenizer("../shared/tokenizer/ggml-vocab-phi-3.gguf");
  ASSERT_TRUE(tok);
  // llama.cpp: Phi-3's special tokens RSTRIP, so the newline after <|user|> is dropped.
  auto ids = tok->encode("<|user|>\nHi<|end|>\n<|assistant|>\n", true, true);
  std::vector<int32_t> hi = tok->encode("Hi", false);
  std::vector<int32_t> want = {1, 32010};
  want.insert(want.end(), hi.begin(), hi.end());
  want.push_back(32007);
  want.push_back(32001);
  EXPECT_EQ(ids, want);
  // Without parse_special the control tokens are plain text.
  auto plain = tok->encode("<|user|>", false, false);
  EXPECT_EQ(std::find(plain.begin(), plain.end(), 32010), plain.end());
}

TEST(TokenizerSpm, TokenToPiece) {
  auto tok = load_tokenizer("../shared/tokenizer/ggml-vocab-llama-spm.gguf");
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->token_to_piece(1), "");    // control
  EXPECT_EQ(tok->token_to_piece(2), "");    // control
  EXPECT_EQ(tok->token_to_piece(0), "");    // unknown (llama.cpp special=false)
  EXPECT_EQ(tok->token_to_piece(3 + 0x0A), "\n");
  EXPECT_EQ(tok->token_to_piece(3 + 0xF0), "\xF0");
  EXPECT_EQ(tok->token_to_piece(15043), " Hello");
  EXPECT_EQ(tok->token_to_piece(-1), "");
  EXPECT_EQ(tok->token_to_piece(32000), "");
}

TEST(TokenizerSpm, ByteFallbackRoundTrip) {
  auto tok = load_tokenizer("../shared/tokenizer/ggml-vocab-llama-spm.gguf");
  ASSERT_TRUE(tok);
  const std::string text = "emoji 🦙 and 𝔘𝔫𝔦 and \x01 ctrl and invalid \xfe\xff";
  auto ids = tok->encode(text, false);
  EXPECT_EQ(tok->decode(ids), " " + text);
  // As in llama.cpp, a 0xF0..0xFF byte starts a 4-byte symbol even when invalid, so it
  // swallows the next bytes (here part of an escaped space) into its byte fallback.
  ids = tok->encode("\xff a", false);
  EXPECT_EQ(ids, (std::vector<int32_t>{29871, 3 + 0xFF, 3 + 0xE2, 3 + 0x96, 3 + 0x81, 29874}));
}

// Encoding time grows linearly with the input (support/linear_time.h): mixed text, and a
// long run where no merge is possible across it.
TEST(TokenizerSpm, EncodeTimeIsLinearInTheInput) {
  auto tok = load_tokenizer("../shared/tokenizer/ggml-vocab-llama-spm.gguf");
  ASSERT_TRUE(tok);
  std::string text;
  while (text.size() < 32000) text += "The quick brown fox jumps over the lazy dog; Ünïcödé 🦙 日本語 12345. ";
  EXPECT_GT(tok->encode(text, true, true).size(), 4000u);
  const auto run = [&](const std::string& in) { tok->encode(in, false); };
  testing::expect_linear_time(run, text.substr(0, 4000), text, "mixed text");
  testing::expect_linear_time(run, std::string(2500, 'a'), std::string(20000, 'a'), "one long run");
}

}  // namespace
}  // namespace pdserve::tokenizer
