// BPE tokenizer (`tokenizer.ggml.model = gpt2`) against llama.cpp's test vectors
// (../shared/tokenizer, gpt-2 and deepseek-llm) and the reference engine's tokenization of
// synth-qwen2-small (../shared/reference/synth-qwen2-small-q8_0.json); pre-tokenizer
// regex semantics for the pre-types without vectors (llama3, qwen2, default).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "gguf/gguf.h"
#include "tokenizer/bpe_pretokenizer.h"
#include "tokenizer/bpe_tokenizer.h"
#include "support/linear_time.h"
#include "support/vocab_vectors.h"
#include "tokenizer/tokenizer.h"

namespace pdserve::tokenizer {
namespace {

using testing::load_tokenizer;
using testing::hex;
using testing::read_file;

void check_vectors(const std::string& name) { testing::check_vocab_vectors(name, /*check_decode=*/true); }

TEST(TokenizerBpe, Gpt2Vectors) { check_vectors("gpt-2"); }
TEST(TokenizerBpe, DeepseekLlmVectors) { check_vectors("deepseek-llm"); }

TEST(TokenizerBpe, SynthQwen2Reference) {
  auto tok = load_tokenizer("../shared/models/synth-qwen2-small-q8_0.gguf");
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->vocab().pre, "gpt-2");
  EXPECT_FALSE(tok->vocab().add_bos);
  auto ref = nlohmann::json::parse(read_file("../shared/reference/synth-qwen2-small-q8_0.json"));
  ASSERT_FALSE(ref["cases"].empty());
  size_t n_tokens = 0;
  for (const auto& c : ref["cases"]) {
    const std::string prompt = c["prompt"];
    EXPECT_EQ(tok->encode(prompt, tok->vocab().add_bos), c["prompt_tokens"].get<std::vector<int32_t>>()) << prompt;
    auto tokens = c["tokens"].get<std::vector<int32_t>>();
    auto pieces = c["token_bytes_hex"].get<std::vector<std::string>>();
    ASSERT_EQ(tokens.size(), pieces.size());
    for (size_t i = 0; i < tokens.size(); ++i) {
      EXPECT_EQ(hex(tok->token_to_piece(tokens[i])), pieces[i]) << "token " << tokens[i];
      EXPECT_FALSE(tok->is_eog(tokens[i]));
    }
    n_tokens += tokens.size();
    if (c.contains("text_bytes_hex")) {
      EXPECT_EQ(hex(tok->decode(tokens)), c["text_bytes_hex"].get<std::string>());
    }
  }
  EXPECT_GT(n_tokens, 0u);
}

// ---------------------------------------------------------------------------------------
// Pre-tokenizers. Expected words are the regex semantics llama.cpp uses (verified against
// Python `regex` with llama.cpp's substitution of non-ASCII whitespace, and for gpt2 /
// llama3 against a port of llama.cpp's hand-written splitters).

std::vector<std::string> split(const std::string& pre, const std::string& text) {
  auto cfg = bpe_pre_config(pre);
  EXPECT_TRUE(cfg) << pre;
  if (!cfg) return {};
  auto p = BpePreTokenizer::create(cfg->regexes);
  EXPECT_TRUE(p.ok()) << p.error();
  return p.ok() ? p->split(text) : std::vector<std::string>{};
}

using Words = std::vector<std::string>;

TEST(TokenizerBpePre, Gpt2) {
  EXPECT_EQ(split("gpt-2", "it's 3.14  x"), (Words{"it", "'s", " 3", ".", "14", " ", " x"}));
  EXPECT_EQ(split("gpt-2", "'S"), (Words{"'", "S"}));  // contractions are case-sensitive
  EXPECT_EQ(split("gpt-2", "a \u3000b"), (Words{"a", " ", "\u3000", "b"}));
  EXPECT_EQ(split("gpt-2", "\u0661\u0662 x"), (Words{"\u0661\u0662", " x"}));  // \p{N} beyond ASCII
  EXPECT_EQ(split("gpt-2", "a\n\nb  "), (Words{"a", "\n", "\n", "b", "  "}));
  EXPECT_EQ(split("gpt-2", ""), Words{});
  // "default" (also what an empty tokenizer.ggml.pre means)
  EXPECT_EQ(split("default", "a.b,c 12345 $x"),
            (Words{"a", ".", "b", ",", "c", " ", "123", "45", " ", "$", "x"}));
  EXPECT_EQ(split("", "(hi)!!"), (Words{"(", "hi", ")!!"}));
}

TEST(TokenizerBpePre, Llama3) {
  for (const char* pre : {"llama3", "llama-bpe"}) {
    EXPECT_EQ(split(pre, "Hello world"), (Words{"Hello", " world"}));
    EXPECT_EQ(split(pre, "I'M here, you'Re 've"), (Words{"I", "'M", " here", ",", " you", "'Re", " '", "ve"}));
    EXPECT_EQ(split(pre, "1234567"), (Words{"123", "456", "7"}));
    EXPECT_EQ(split(pre, "a\n\n  b"), (Words{"a", "\n\n", " ", " b"}));
    EXPECT_EQ(split(pre, "x  \t\n y"), (Words{"x", "  \t\n", " y"}));
    EXPECT_EQ(split(pre, "   "), (Words{"   "}));
    EXPECT_EQ(split(pre, "\u00a1Hola!\r\n"), (Words{"\u00a1Hola", "!\r\n"}));
    EXPECT_EQ(split(pre, "abc?!\n\nd"), (Words{"abc", "?!\n\n", "d"}));
    EXPECT_EQ(split(pre, "\u4e2d\u6587 \u5b57"), (Words{"\u4e2d\u6587", " \u5b57"}));
    // Non-ASCII whitespace is \s: NBSP and U+3000 lead a word like any non-letter.
    EXPECT_EQ(split(pre, "d\u00a0e\u3000f"), (Words{"d", "\u00a0e", "\u3000f"}));
  }
}

TEST(TokenizerBpePre, Qwen2) {
  EXPECT_EQ(split("qwen2", "1234567"), (Words{"1", "2", "3", "4", "5", "6", "7"}));
  EXPECT_EQ(split("qwen2", "I'M ok"), (Words{"I", "'M", " ok"}));
  EXPECT_EQ(split("qwen2", "a\n\n  b"), (Words{"a", "\n\n", " ", " b"}));
  EXPECT_EQ(split("qwen2", " ?? x"), (Words{" ??", " x"}));
  EXPECT_EQ(split("qwen2", "\u216b\u00bd"), (Words{"\u216b", "\u00bd"}));
  EXPECT_EQ(split("qwen2", "x\u2003\u2003y"), (Words{"x", "\u2003", "\u2003y"}));
}

TEST(TokenizerBpePre, DeepseekLlm) {
  EXPECT_EQ(split("deepseek-llm", "Hello, \u4e16\u754c! 123\n"),
            (Words{"Hello", ",", " ", "\u4e16\u754c", "!", " ", "123", "\n"}));
  // llama.cpp matches on text whose non-ASCII whitespace became \v: U+3000 falls in no
  // literal range ([\x{800}-\x{4E00}], [\x{3000}-\x{3002}]) and stays a piece of its own.
  EXPECT_EQ(split("deepseek-llm", "\u4e2d\u3000\u6587"), (Words{"\u4e2d", "\u3000", "\u6587"}));
  EXPECT_EQ(split("deepseek-llm", "a\u3000\u3001b"), (Words{"a", "\u3000", "\u3001", "b"}));
  // The letter class holds U+212A KELVIN SIGN itself (not 'K'); later the CJK class
  // [\x{800}-\x{4E00}] splits it off again.
  EXPECT_EQ(split("deepseek-llm", "\u212a" "elvin"), (Words{"\u212a", "elvin"}));
}

TEST(TokenizerBpePre, InvalidUtf8BecomesReplacementChar) {
  // llama.cpp unicode_cpts_from_utf8: an undecodable byte is U+FFFD; overlong forms decode
  // (and are re-encoded canonically); surrogates are kept.
  EXPECT_EQ(split("gpt-2", "a\xff" "b"), (Words{"a", "\xef\xbf\xbd", "b"}));
  EXPECT_EQ(split("gpt-2", "\xc3"), (Words{"\xef\xbf\xbd"}));  // truncated sequence
  EXPECT_EQ(split("gpt-2", "\xc1\x81" "b"), (Words{"Ab"}));     // overlong 'A'
  EXPECT_EQ(split("gpt-2", "x\xed\xa0\x80y"), (Words{"x", "\xed\xa0\x80", "y"}));
  EXPECT_EQ(split("gpt-2", std::string("a\0b", 3)), (Words{"a", std::string("\0", 1), "b"}));
}

TEST(TokenizerBpePre, ByteLevelAlphabet) {
  EXPECT_EQ(byte_to_unicode(' '), "\xc4\xa0");   // Ġ
  EXPECT_EQ(byte_to_unicode('\n'), "\xc4\x8a");  // Ċ
  EXPECT_EQ(byte_to_unicode('a'), "a");
  EXPECT_EQ(byte_to_unicode(0xad), "\xc5\x83");  // soft hyphen → U+0143
  for (int b = 0; b < 256; ++b) {
    const std::string& u = byte_to_unicode(static_cast<uint8_t>(b));
    EXPECT_EQ(byte_decode(u), std::string(1, static_cast<char>(b)));
  }
  EXPECT_EQ(unicode_to_byte(0x144), -1);
  EXPECT_EQ(byte_decode("\xe4\xb8\xad"), "[UNK_BYTE_0xe4b8ad\xe4\xb8\xad]");  // llama.cpp's rendering
}

TEST(TokenizerBpePre, UnknownPre) { EXPECT_FALSE(bpe_pre_config("no-such-pre")); }

// ---------------------------------------------------------------------------------------
// The BPE tokenizer on the gpt-2 vocabulary.

TEST(TokenizerBpe, Gpt2Basics) {
  auto tok = load_tokenizer("../shared/tokenizer/ggml-vocab-gpt-2.gguf");
  ASSERT_TRUE(tok);
  const Vocab& v = tok->vocab();
  EXPECT_FALSE(v.add_bos);  // gpt-2: no BOS unless tokenizer.ggml.add_bos_token says so
  EXPECT_EQ(tok->encode("Hello world", true), (std::vector<int32_t>{15496, 995}));
  EXPECT_EQ(tok->encode("", true), std::vector<int32_t>{});
  EXPECT_TRUE(tok->is_eog(50256));

  EXPECT_EQ(tok->token_to_piece(50256), "");  // control
  EXPECT_EQ(tok->token_to_piece(198), "\n");
  EXPECT_EQ(tok->token_to_piece(220), " ");
  EXPECT_EQ(tok->token_to_piece(995), " world");
  EXPECT_EQ(tok->token_to_piece(-1), "");
  EXPECT_EQ(tok->token_to_piece(50257), "");

  // Special-token text is plain text unless parse_special.
  EXPECT_EQ(tok->encode("a<|endoftext|>b", false, true), (std::vector<int32_t>{64, 50256, 65}));
  auto plain = tok->encode("a<|endoftext|>b", false, false);
  EXPECT_EQ(std::find(plain.begin(), plain.end(), 50256), plain.end());
  EXPECT_EQ(tok->decode(plain), "a<|endoftext|>b");

  // Undecodable bytes become U+FFFD (llama.cpp); everything else round-trips.
  EXPECT_EQ(tok->decode(tok->encode("a\xff" "b", false)), "a\xef\xbf\xbd" "b");
  const std::string odd = "x\xed\xa0\x80y \x01\x7f \xc2\x85 \xe3\x80\x80 \xf0\x9f\xa6\x99";
  EXPECT_EQ(tok->decode(tok->encode(odd, false)), odd);
}

TEST(TokenizerBpe, DeepseekUserDefinedAndBos) {
  auto tok = load_tokenizer("../shared/tokenizer/ggml-vocab-deepseek-llm.gguf");
  ASSERT_TRUE(tok);
  const Vocab& v = tok->vocab();
  EXPECT_TRUE(v.add_bos);  // tokenizer.ggml.add_bos_token = true
  EXPECT_EQ(v.bos_id, 100000);
  auto ids = tok->encode("Hello", true);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], 100000);
  EXPECT_EQ(std::vector<int32_t>(ids.begin() + 1, ids.end()), tok->encode("Hello", false));
  // User-defined tokens (here "ø" = 100002) are split out even without parse_special, and
  // render as their text.
  auto ud = tok->encode("a\xc3\xb8" "b", false);
  EXPECT_NE(std::find(ud.begin(), ud.end(), 100002), ud.end());
  EXPECT_EQ(tok->token_to_piece(100002), "\xc3\xb8");
  EXPECT_EQ(tok->token_to_piece(100000), "");
}

/// The gpt-2 vocabulary with another pre-tokenizer (what llama3/qwen2 GGUFs would do with
/// it). Expected ids from an independent reference (Python `regex` + naive BPE).
std::unique_ptr<BpeTokenizer> gpt2_with_pre(const std::string& pre) {
  auto f = gguf::GgufFile::open("../shared/tokenizer/ggml-vocab-gpt-2.gguf");
  EXPECT_TRUE(f.ok());
  if (!f.ok()) return nullptr;
  auto v = Vocab::from_gguf(**f);
  EXPECT_TRUE(v.ok());
  if (!v.ok()) return nullptr;
  v->pre = pre;
  auto t = BpeTokenizer::create(std::move(v).value());
  EXPECT_TRUE(t.ok()) << t.error();
  return t.ok() ? std::move(t).value() : nullptr;
}

TEST(TokenizerBpe, Llama3AndQwen2PreOnGpt2Vocab) {
  auto l3 = gpt2_with_pre("llama-bpe");
  auto q2 = gpt2_with_pre("qwen2");
  ASSERT_TRUE(l3 && q2);
  for (auto* t : {l3.get(), q2.get()}) {
    EXPECT_EQ(t->encode("Hello world", false), (std::vector<int32_t>{15496, 995}));
    EXPECT_EQ(t->encode("I'M here, you'Re 've", false), (std::vector<int32_t>{40, 6, 44, 994, 11, 345, 6, 3041, 705, 303}));
    EXPECT_EQ(t->encode("a\xc2\xa1Hola!\r\n\xe4\xb8\xad\xe6\x96\x87 \xe5\xad\x97", false),
              (std::vector<int32_t>{64, 126, 94, 39, 5708, 0, 201, 198, 40792, 23877, 229, 10263, 255, 245}));
    EXPECT_EQ(t->encode("d\xc2\xa0" "e\xe3\x80\x80" "f \xf0\x9f\xa6\x99", false),
              (std::vector<int32_t>{67, 1849, 68, 5099, 222, 69, 12520, 99, 247}));
  }
  EXPECT_EQ(l3->encode("1234567 apples\n\n  and\t\n pears", false),
            (std::vector<int32_t>{10163, 29228, 22, 22514, 628, 220, 290, 197, 198, 279, 4127}));
  EXPECT_EQ(q2->encode("1234567 apples\n\n  and\t\n pears", false),
            (std::vector<int32_t>{16, 17, 18, 19, 20, 21, 22, 22514, 628, 220, 290, 197, 198, 279, 4127}));
}

// ---------------------------------------------------------------------------------------
// Small synthetic BPE vocabularies: defaults per pre-tokenizer and merge order.

using gguf::Value;
using gguf::ValueType;

Value strings(std::vector<std::string> xs) {
  std::vector<Value> items;
  for (auto& x : xs) items.push_back(Value::str(x));
  return Value::array(ValueType::STRING, std::move(items));
}

Value ints(std::vector<int32_t> xs) {
  std::vector<Value> items;
  for (int32_t x : xs) items.push_back(Value::i32(x));
  return Value::array(ValueType::INT32, std::move(items));
}

/// a b c ab bc abc <s> </s> <0x41> Ġ Ġa <|u|>; merges "b c" before "a b".
gguf::GgufWriter bpe_writer(const std::string& pre) {
  gguf::GgufWriter w;
  w.set("general.architecture", Value::str("llama"));
  w.set("tokenizer.ggml.model", Value::str("gpt2"));
  w.set("tokenizer.ggml.pre", Value::str(pre));
  w.set("tokenizer.ggml.tokens", strings({"a", "b", "c", "ab", "bc", "abc", "<s>", "</s>", "<0x41>", "\xc4\xa0",
                                          "\xc4\xa0" "a", "<|u|>"}));
  w.set("tokenizer.ggml.token_type", ints({1, 1, 1, 1, 1, 1, 3, 3, 6, 1, 1, 4}));
  w.set("tokenizer.ggml.merges", strings({"b c", "a b", "\xc4\xa0 a"}));
  w.set("tokenizer.ggml.bos_token_id", Value::u32(6));
  w.set("tokenizer.ggml.eos_token_id", Value::u32(7));
  return w;
}

class TempGguf {
 public:
  explicit TempGguf(const gguf::GgufWriter& w) {
    char buf[] = "/tmp/pds_bpe_XXXXXX";
    int fd = mkstemp(buf);
    close(fd);
    path_ = buf;
    Status s = w.write(path_);
    EXPECT_TRUE(s.ok()) << s.message();
  }
  ~TempGguf() { std::remove(path_.c_str()); }
  std::unique_ptr<Tokenizer> tokenizer() const { return load_tokenizer(path_); }
  Result<std::unique_ptr<Tokenizer>> try_tokenizer() const {
    auto f = gguf::GgufFile::open(path_);
    if (!f.ok()) return f.status();
    return Tokenizer::from_gguf(**f);
  }

 private:
  std::string path_;
};

TEST(TokenizerBpe, MergeOrderAndIgnoreMerges) {
  auto gpt2 = TempGguf(bpe_writer("gpt-2")).tokenizer();
  auto llama3 = TempGguf(bpe_writer("llama-bpe")).tokenizer();
  ASSERT_TRUE(gpt2 && llama3);
  // Lowest rank first: "b c" (0) before "a b" (1), and "a"+"bc" has no merge.
  EXPECT_EQ(gpt2->encode("abc", false), (std::vector<int32_t>{0, 4}));
  EXPECT_EQ(gpt2->encode("ab", false), (std::vector<int32_t>{3}));
  EXPECT_EQ(gpt2->encode(" a", false), (std::vector<int32_t>{10}));
  // llama3 ignores merges for words that are tokens.
  EXPECT_EQ(llama3->encode("abc", false), (std::vector<int32_t>{5}));
  // A character with no token: its bytes that are tokens, the rest dropped (llama.cpp).
  EXPECT_EQ(gpt2->encode("aA", false), (std::vector<int32_t>{0}));
  // User-defined tokens split even without parse_special; control ones only with it.
  EXPECT_EQ(gpt2->encode("a<|u|>b", false), (std::vector<int32_t>{0, 11, 1}));
  EXPECT_EQ(gpt2->encode("a<s>", false, true), (std::vector<int32_t>{0, 6}));
  EXPECT_EQ(gpt2->token_to_piece(11), "<|u|>");
  EXPECT_EQ(gpt2->token_to_piece(8), "A");  // BYTE token <0x41>
  EXPECT_EQ(gpt2->token_to_piece(10), " a");
  EXPECT_EQ(gpt2->token_to_piece(6), "");
}

TEST(TokenizerBpe, BosDefaultsPerPre) {
  auto gpt2 = TempGguf(bpe_writer("gpt-2")).tokenizer();
  auto llama3 = TempGguf(bpe_writer("llama3")).tokenizer();
  ASSERT_TRUE(gpt2 && llama3);
  EXPECT_FALSE(gpt2->vocab().add_bos);
  EXPECT_EQ(gpt2->encode("a", true), (std::vector<int32_t>{0}));
  EXPECT_TRUE(llama3->vocab().add_bos);  // llama.cpp: llama3 adds BOS by default
  EXPECT_EQ(llama3->encode("a", true), (std::vector<int32_t>{6, 0}));
  EXPECT_EQ(llama3->encode("a", false), (std::vector<int32_t>{0}));

  auto w = bpe_writer("gpt-2");
  w.set("tokenizer.ggml.add_bos_token", Value::boolean(true));
  w.set("tokenizer.ggml.add_eos_token", Value::boolean(true));
  auto keyed = TempGguf(w).tokenizer();
  ASSERT_TRUE(keyed);
  EXPECT_EQ(keyed->encode("a", true), (std::vector<int32_t>{6, 0, 7}));

  w = bpe_writer("llama3");
  w.set("tokenizer.ggml.add_bos_token", Value::boolean(false));
  auto off = TempGguf(w).tokenizer();
  ASSERT_TRUE(off);
  EXPECT_EQ(off->encode("a", true), (std::vector<int32_t>{0}));
}

TEST(TokenizerBpe, UnsupportedPre) {
  auto t = TempGguf(bpe_writer("no-such-pre")).try_tokenizer();
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().find("'no-such-pre'"), std::string::npos) << t.error();
}

// ---------------------------------------------------------------------------------------

// Encoding time grows linearly with the input — the failure mode of a BPE merge loop or a
// backtracking pre-tokenizer regex is quadratic (support/linear_time.h).
TEST(TokenizerBpe, EncodeTimeIsLinearInTheInput) {
  std::string text;
  while (text.size() < 32768) text += "The quick brown fox jumps over the lazy dog; \xc3\x9cn\xc3\xaf" "c\xc3\xb6" "d\xc3\xa9 \xf0\x9f\xa6\x99 \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e 12345.\n";
  std::vector<std::unique_ptr<Tokenizer>> toks;
  toks.push_back(load_tokenizer("../shared/tokenizer/ggml-vocab-gpt-2.gguf"));
  toks.push_back(load_tokenizer("../shared/tokenizer/ggml-vocab-deepseek-llm.gguf"));
  toks.push_back(gpt2_with_pre("llama-bpe"));
  toks.push_back(gpt2_with_pre("qwen2"));
  const auto check = [](Tokenizer& tok, const std::string& small, const std::string& big, const std::string& what) {
    testing::expect_linear_time([&](const std::string& in) { tok.encode(in, false); }, small, big, tok.vocab().pre + ", " + what);
  };
  for (auto& tok : toks) {
    ASSERT_TRUE(tok);
    EXPECT_GT(tok->encode(text, true, true).size(), 4000u);
    check(*tok, text.substr(0, 4096), text, "mixed text");
    // Long runs without a split: one huge word, white space, digits, newlines.
    for (char c : {'a', ' ', '7', '\n'}) check(*tok, std::string(2500, c) + "x", std::string(20000, c) + "x", "one long run");
  }
}

TEST(TokenizerBpe, ConcurrentEncode) {
  auto tok = load_tokenizer("../shared/tokenizer/ggml-vocab-gpt-2.gguf");
  ASSERT_TRUE(tok);
  const std::string text = "Hello, y'all! How are you \xf0\x9f\x98\x81 ?\xe6\x88\x91\xe6\x83\xb3 1314151";
  const auto want = tok->encode(text, false);
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      int good = 0;
      for (int i = 0; i < 200; ++i) good += tok->encode(text, false) == want;
      ok[t] = good;
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(ok[t], 200);
}

}  // namespace
}  // namespace pdserve::tokenizer
