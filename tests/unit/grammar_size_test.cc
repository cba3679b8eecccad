// The size bound of a compiled grammar (Grammar::expanded_size, the unit of
// --max-grammar-states): hand-counted grammars, an upper bound on the frames the matcher
// really creates when every state is explored, saturation, and the refusals of nested
// repetitions by the GBNF parser and the regex and JSON Schema converters (issue #17).
#include <gtest/gtest.h>

#include <deque>
#include <set>

#include <nlohmann/json.hpp>

#include "grammar/grammar.h"
#include "grammar/json_schema_to_gbnf.h"
#include "grammar/matcher.h"
#include "grammar/regex_to_gbnf.h"

using namespace pdserve;
using namespace pdserve::grammar;

namespace {

constexpr uint64_t kCap = 1000000;  // the server's default --max-grammar-states

uint64_t size_of(const std::string& gbnf) {
  auto g = parse_gbnf(gbnf);
  EXPECT_TRUE(g.ok()) << g.error() << "\n" << gbnf;
  return g.ok() ? g->expanded_size() : 0;
}

/// Explores every state reachable over single bytes; returns the matcher's frame count.
int frames_of_every_state(const std::string& gbnf) {
  auto g = parse_gbnf(gbnf);
  EXPECT_TRUE(g.ok()) << g.error();
  std::vector<std::string> pieces;
  for (int b = 0; b < 256; ++b) pieces.push_back(std::string(1, static_cast<char>(b)));
  GrammarMatcher m(std::move(*g), std::make_shared<TokenVocab>(pieces, std::vector<int32_t>{}, 256));
  std::set<int32_t> seen{m.initial_state()};
  std::deque<int32_t> todo{m.initial_state()};
  while (!todo.empty()) {
    const int32_t s = todo.front();
    todo.pop_front();
    for (int b = 0; b < 256; ++b) {
      const int32_t t = m.advance_byte(s, static_cast<uint8_t>(b));
      if (t >= 0 && seen.insert(t).second) todo.push_back(t);
    }
  }
  return m.num_frames();
}

const char* kNestedArrays = R"({"type": "array", "minItems": 1000,
  "items": {"type": "array", "minItems": 1000, "items": {"type": "integer"}}})";

}  // namespace

TEST(GrammarSizeTest, CountsEveryElementOfEveryCopy) {
  EXPECT_EQ(size_of("root ::= \"ab\"\n"), 3u);  // a, b, end
  // x twice: the first reference copies x (3), the second is a tail call, which shares the
  // root's return stack (x's 3 once), plus root's own 3.
  EXPECT_EQ(size_of("root ::= x x\nx ::= \"ab\"\n"), 9u);
  EXPECT_EQ(size_of("root ::= x x \"c\"\nx ::= \"ab\"\n"), 4u + 3u + 3u);
  EXPECT_EQ(size_of("root ::= \"a\"{3}\n"), 4u);  // a literal is repeated in place
  // Three levels: root copies y twice (non-tail) and tail-calls it once; y copies x.
  EXPECT_EQ(size_of("root ::= y y y\ny ::= x \"-\"\nx ::= \"ab\"\n"), 4u + 3u * (3u + 3u));
  // A star is a tail-recursive rule (star ::= "a" star | ""): its repetitions add
  // nothing: root's 2 and the star's 4.
  EXPECT_EQ(size_of("root ::= \"a\"*\n"), 6u);
  // Recursion through a non-tail reference counts once (it grows with the output).
  EXPECT_EQ(size_of("root ::= \"(\" root \")\" | \"x\"\n"), 6u);
}

TEST(GrammarSizeTest, BoundsTheFramesTheMatcherCreates) {
  // Every state of each (non-recursive) grammar is explored: the matcher's frames are
  // never more than the count, and the count is within a small factor of them (it also
  // counts the ends and references of the regex converter's group rules).
  for (const std::string re : {"([a-c]{5}){4}", "(a|bc){3}d?", "((x?){4}){3}y", "([a-z]{2,6}-){2}\\d{0,3}"}) {
    SCOPED_TRACE(re);
    auto gbnf = regex_to_gbnf(re);
    ASSERT_TRUE(gbnf.ok()) << gbnf.error();
    const uint64_t counted = size_of(*gbnf);
    const int frames = frames_of_every_state(*gbnf);
    EXPECT_LE(static_cast<uint64_t>(frames), counted);
    EXPECT_LE(counted, 8u * static_cast<uint64_t>(frames));
  }
  // The count grows as the nested repetition: 100 x 100 positions.
  auto big = regex_to_gbnf("([a-z]{100}){100}");
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(size_of(*big), 30401u);
  auto small = regex_to_gbnf("([a-z]{100}){10}");
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(size_of(*small), 3041u);
}

TEST(GrammarSizeTest, SaturatesInsteadOfOverflowing) {
  // (a{1000}) nested 7 times: 10^21 copies, past 2^64.
  std::string re = "a";
  for (int i = 0; i < 7; ++i) re = "(" + re + "){1000}";
  auto gbnf = regex_to_gbnf(re);
  ASSERT_TRUE(gbnf.ok()) << gbnf.error();
  auto g = parse_gbnf(*gbnf);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->expanded_size(), kNoSizeLimit);
  EXPECT_EQ(g->expanded_size(kCap), kCap + 1);
  // A grammar of its limit's size is accepted, one element above is not.
  const uint64_t n = size_of("root ::= \"ab\"{10}\n");
  EXPECT_TRUE(parse_gbnf("root ::= \"ab\"{10}\n", n).ok());
  EXPECT_EQ(parse_gbnf("root ::= \"ab\"{10}\n", n - 1).code(), StatusCode::ResourceExhausted);
}

TEST(GrammarSizeTest, NestedRepetitionsAreRefusedByEveryCompiler) {
  for (const char* re : {"([a-z]{100}){100}", "(a{1000}){1000}"}) {
    SCOPED_TRACE(re);
    const uint64_t cap = std::string(re) == "([a-z]{100}){100}" ? 20000 : kCap;
    auto r = regex_to_gbnf(re, cap);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.code(), StatusCode::ResourceExhausted);
    EXPECT_NE(r.error().find("more than " + std::to_string(cap) + " elements"), std::string::npos) << r.error();
    EXPECT_TRUE(regex_to_gbnf(re).ok());  // without a limit it compiles
  }
  auto s = json_schema_to_gbnf(nlohmann::ordered_json::parse(kNestedArrays), kCap);
  EXPECT_EQ(s.code(), StatusCode::ResourceExhausted) << s.error();
  auto unbounded = json_schema_to_gbnf(nlohmann::ordered_json::parse(kNestedArrays));
  ASSERT_TRUE(unbounded.ok());
  auto sg = parse_gbnf(*unbounded);
  ASSERT_TRUE(sg.ok());
  EXPECT_GT(sg->expanded_size(), 1000u * 1000u);
  // The same in a string pattern of a schema.
  auto p = json_schema_to_gbnf(nlohmann::ordered_json::parse(R"({"type": "string", "pattern": "^(a{1000}){1000}$"})"), kCap);
  EXPECT_EQ(p.code(), StatusCode::ResourceExhausted) << p.error();
  // GBNF: a rule repeated 1000 times inside a repetition of 1000.
  const std::string gbnf = "root ::= (item{1000}){1000}\nitem ::= [a-z] \"-\"\n";
  auto gr = parse_gbnf(gbnf, kCap);
  EXPECT_EQ(gr.code(), StatusCode::ResourceExhausted) << gr.error();
  EXPECT_GT(size_of(gbnf), 1000u * 1000u);
}

TEST(GrammarSizeTest, ALongLiteralRepeatedIsRefusedBeforeItIsCopied) {
  // 1,000 bytes x 10,000 copies would be 10^7 elements; refused at the repetition.
  const std::string gbnf = "root ::= \"" + std::string(1000, 'a') + "\"{10000}\n";
  auto g = parse_gbnf(gbnf, kCap);
  EXPECT_EQ(g.code(), StatusCode::ResourceExhausted) << g.error();
  const std::string opt = "root ::= \"" + std::string(1000, 'a') + "\"{0,10000}\n";
  EXPECT_EQ(parse_gbnf(opt, kCap).code(), StatusCode::ResourceExhausted);
}

TEST(GrammarSizeTest, OrdinaryGrammarsFitTheDefault) {
  EXPECT_LE(size_of(json_object_gbnf()), kCap);
  const char* schema = R"({"type": "object", "properties": {
      "name": {"type": "string", "maxLength": 100}, "age": {"type": "integer"},
      "bio": {"type": "string", "maxLength": 10000},
      "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 10},
      "address": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}}}},
      "required": ["name"]})";
  auto g = json_schema_to_gbnf(nlohmann::ordered_json::parse(schema), kCap);
  ASSERT_TRUE(g.ok()) << g.error();
  EXPECT_LE(size_of(*g), kCap);
}
