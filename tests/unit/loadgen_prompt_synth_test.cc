// pdserve bench prompt synthesis: exact token lengths (BOS counted, as the server encodes
// /v1/completions prompts) and identical token blocks for shared trace hash ids.
#include <gtest/gtest.h>

#include "loadgen/prompt_synth.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace pdserve::loadgen {
namespace {

std::unique_ptr<tokenizer::Tokenizer> load(const std::string& path) {
  auto f = gguf::GgufFile::open(path);
  if (!f.ok()) return nullptr;
  auto t = tokenizer::Tokenizer::from_gguf(*f.value());
  return t.ok() ? std::move(t).value() : nullptr;
}

std::vector<int32_t> slice(const std::vector<int32_t>& v, int64_t begin, int64_t len) {
  return std::vector<int32_t>(v.begin() + begin, v.begin() + begin + len);
}

class PromptSynthTest : public ::testing::TestWithParam<std::string> {};

TEST_P(PromptSynthTest, ExactLengthsAsTheServerTokenizes) {
  auto tok = load(GetParam());
  if (!tok) GTEST_SKIP() << "tokenizer not supported here: " << GetParam();
  auto s = PromptSynthesizer::create(*tok, /*seed=*/1);
  ASSERT_TRUE(s.ok()) << s.error();
  const bool bos = tok->vocab().add_bos;
  EXPECT_EQ(s.value().min_tokens(), bos ? 2 : 1);
  EXPECT_GE(s.value().pool_size(), 8u);
  for (int64_t n : {2, 3, 7, 8, 9, 16, 63, 100, 257, 511}) {
    for (int64_t block : {0, 1, 8, 16, 512}) {
      auto p = s.value().synthesize(n, {}, block, static_cast<uint64_t>(n * 31 + block));
      ASSERT_TRUE(p.ok()) << "n=" << n << " block=" << block << ": " << p.error();
      EXPECT_EQ(static_cast<int64_t>(p.value().tokens.size()), n);
      // The server's view: encode(text, add_bos = vocab().add_bos).
      EXPECT_EQ(tok->encode(p.value().text, bos), p.value().tokens) << p.value().text;
      if (bos) {
        EXPECT_EQ(p.value().tokens[0], tok->vocab().bos_id);
      }
    }
  }
  EXPECT_FALSE(s.value().synthesize(s.value().min_tokens() - 1, {}, 8, 0).ok());
}

TEST_P(PromptSynthTest, SharedHashIdsGiveIdenticalBlocks) {
  auto tok = load(GetParam());
  if (!tok) GTEST_SKIP() << "tokenizer not supported here: " << GetParam();
  auto s = PromptSynthesizer::create(*tok, /*seed=*/7);
  ASSERT_TRUE(s.ok()) << s.error();
  const PromptSynthesizer& syn = s.value();
  const int64_t B = 8;
  // Mooncake-style: a shared system block 0, a shared conversation block 5, then own blocks.
  auto a = syn.synthesize(4 * B, {0, 5, 10, 11}, B, 1);
  auto b = syn.synthesize(4 * B + 3, {0, 5, 12, 13, 14}, B, 2);  // last block partial (3 tokens)
  auto c = syn.synthesize(2 * B, {0, 20}, B, 3);
  auto d = syn.synthesize(6 * B, {0, 5, 10, 11}, B, 4);  // longer than its hash ids
  auto e = syn.synthesize(4 * B - 2, {0, 5, 10, 11}, B, 5);  // ends inside block 3
  for (auto* p : {&a, &b, &c, &d, &e}) ASSERT_TRUE(p->ok()) << p->error();
  const auto& ta = a.value().tokens;
  const auto& tb = b.value().tokens;
  const auto& tc = c.value().tokens;
  const auto& td = d.value().tokens;
  const auto& te = e.value().tokens;
  EXPECT_EQ(tb.size(), 4 * B + 3u);
  EXPECT_EQ(slice(ta, 0, B), slice(tb, 0, B));          // hash 0
  EXPECT_EQ(slice(ta, 0, B), slice(tc, 0, B));
  EXPECT_EQ(slice(ta, B, B), slice(tb, B, B));          // hash 5
  EXPECT_NE(slice(ta, 2 * B, B), slice(tb, 2 * B, B));  // 10 vs 12
  EXPECT_NE(slice(ta, B, B), slice(tc, B, B));          // 5 vs 20
  EXPECT_EQ(ta, slice(td, 0, 4 * B));                   // same ids, same blocks
  EXPECT_NE(slice(td, 4 * B, B), slice(td, 5 * B, B));  // past the ids: request-own content
  EXPECT_EQ(slice(ta, 0, 4 * B - 2), te);               // a partial block is a prefix of the block
  // A block's content is the same wherever it is used, in a different request too.
  auto a2 = syn.synthesize(4 * B, {0, 5, 10, 11}, B, 99);
  ASSERT_TRUE(a2.ok());
  EXPECT_EQ(a2.value().tokens, ta);
  EXPECT_EQ(a2.value().text, a.value().text);
  // Requests without hash ids do not share content.
  auto u1 = syn.synthesize(3 * B, {}, B, 1000);
  auto u2 = syn.synthesize(3 * B, {}, B, 1001);
  ASSERT_TRUE(u1.ok() && u2.ok());
  EXPECT_NE(slice(u1.value().tokens, 1, B - 1), slice(u2.value().tokens, 1, B - 1));
  // Another seed changes the content.
  auto other = PromptSynthesizer::create(*tok, /*seed=*/8);
  ASSERT_TRUE(other.ok());
  auto a3 = other.value().synthesize(4 * B, {0, 5, 10, 11}, B, 1);
  ASSERT_TRUE(a3.ok());
  EXPECT_NE(a3.value().tokens, ta);
}

TEST_P(PromptSynthTest, ScaledMooncakeBlocksRoundTripAtEveryLength) {
  auto tok = load(GetParam());
  if (!tok) GTEST_SKIP() << "tokenizer not supported here: " << GetParam();
  auto s = PromptSynthesizer::create(*tok, 0);
  ASSERT_TRUE(s.ok()) << s.error();
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 64; ++i) ids.push_back(1000 + i * 7);
  for (int64_t n = s.value().min_tokens(); n <= 400; n += 13) {
    auto p = s.value().synthesize(n, ids, 8, static_cast<uint64_t>(n));
    ASSERT_TRUE(p.ok()) << n << ": " << p.error();
    EXPECT_EQ(static_cast<int64_t>(p.value().tokens.size()), n);
  }
}

INSTANTIATE_TEST_SUITE_P(Vocabs, PromptSynthTest,
                         ::testing::Values("../shared/models/stories260K.gguf",
                                           "../shared/tokenizer/ggml-vocab-llama-spm.gguf",
                                           "../shared/tokenizer/ggml-vocab-phi-3.gguf",
                                           "../shared/tokenizer/ggml-vocab-gpt-2.gguf"),
                         [](const auto& info) {
                           std::string n = info.param.substr(info.param.find_last_of('/') + 1);
                           n = n.substr(0, n.find(".gguf"));
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace pdserve::loadgen
