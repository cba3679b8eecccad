// StreamDecoder: only complete UTF-8 characters are emitted; invalid bytes are not held.
#include <gtest/gtest.h>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace pdserve::tokenizer {
namespace {

class StreamDecoderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto f = gguf::GgufFile::open("../shared/tokenizer/ggml-vocab-llama-spm.gguf");
    ASSERT_TRUE(f.ok()) << f.error();
    auto t = Tokenizer::from_gguf(**f);
    ASSERT_TRUE(t.ok()) << t.error();
    tok_ = std::move(t).value();
  }
  int32_t byte_id(uint8_t b) const { return 3 + b; }  // <0x00> is id 3 in this vocab
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(StreamDecoderTest, EmojiSplitAcrossByteTokens) {
  const std::string llama = "\xF0\x9F\xA6\x99";  // 🦙
  StreamDecoder d(*tok_);
  EXPECT_EQ(d.push(15043), " Hello");
  EXPECT_EQ(d.push(byte_id(0xF0)), "");
  EXPECT_EQ(d.push(byte_id(0x9F)), "");
  EXPECT_EQ(d.push(byte_id(0xA6)), "");
  EXPECT_EQ(d.push(byte_id(0x99)), llama);
  EXPECT_EQ(d.flush(), "");
}

TEST_F(StreamDecoderTest, EncodedTextStreamsBackExactly) {
  const std::string text = "Grüße 🦙🦙 日本 𝔘 done";
  auto ids = tok_->encode(text, true);
  StreamDecoder d(*tok_);
  std::string out;
  for (int32_t id : ids) {
    std::string part = d.push(id);
    // Every emitted chunk ends on a character boundary.
    if (!part.empty()) {
      EXPECT_NE(static_cast<uint8_t>(part.back()) & 0xC0, 0xC0) << part;
    }
    out += part;
  }
  out += d.flush();
  EXPECT_EQ(out, " " + text);
}

TEST_F(StreamDecoderTest, CompleteCharacterInOnePiece) {
  StreamDecoder d(*tok_);
  EXPECT_EQ(d.push_bytes("a\xC3\xA9z"), "a\xC3\xA9z");
  EXPECT_EQ(d.push_bytes("x\xE6\x97"), "x");
  EXPECT_EQ(d.push_bytes("\xA5y"), "\xE6\x97\xA5y");
}

TEST_F(StreamDecoderTest, InvalidBytesAreNotHeld) {
  StreamDecoder d(*tok_);
  EXPECT_EQ(d.push_bytes("\x80"), "\x80");          // lone continuation byte
  EXPECT_EQ(d.push_bytes("a\xBF" "b"), "a\xBF" "b");
  EXPECT_EQ(d.push_bytes("\xC3"), "");              // could still become é
  EXPECT_EQ(d.push_bytes("A"), "\xC3" "A");          // lead byte broken by ASCII
  EXPECT_EQ(d.push_bytes("\xE2\x82"), "");
  EXPECT_EQ(d.push_bytes("\xF0"), "\xE2\x82");       // 3-byte sequence broken by a new lead
  EXPECT_EQ(d.push_bytes("\x9F\xA6\x99"), "\xF0\x9F\xA6\x99");
  EXPECT_EQ(d.push_bytes("\xFF\xC0\xF8"), "\xFF\xC0\xF8");  // bytes that never start a sequence
  EXPECT_EQ(d.flush(), "");
}

TEST_F(StreamDecoderTest, FlushReturnsIncompleteTail) {
  StreamDecoder d(*tok_);
  EXPECT_EQ(d.push(byte_id(0x61)), "a");
  EXPECT_EQ(d.push(byte_id(0xF0)), "");
  EXPECT_EQ(d.push(byte_id(0x9F)), "");
  EXPECT_EQ(d.flush(), "\xF0\x9F");
  EXPECT_EQ(d.flush(), "");
  EXPECT_EQ(d.push(byte_id(0x62)), "b");
}

TEST_F(StreamDecoderTest, ControlTokensAreEmpty) {
  StreamDecoder d(*tok_);
  EXPECT_EQ(d.push(1), "");
  EXPECT_EQ(d.push(2), "");
  EXPECT_EQ(d.push(-5), "");
}

}  // namespace
}  // namespace pdserve::tokenizer
