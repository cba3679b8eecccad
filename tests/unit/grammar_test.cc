// The grammar layer without a model: GBNF parsing and errors, byte-level acceptance,
// regex → grammar against std::regex, JSON Schema → grammar (random walks parse as JSON
// and keep the schema's shape), and token masks against a brute-force check of every
// token's bytes.
#include <gtest/gtest.h>

#include <random>
#include <regex>

#include <nlohmann/json.hpp>

#include "grammar/grammar.h"
#include "grammar/json_schema_to_gbnf.h"
#include "grammar/matcher.h"
#include "grammar/regex_to_gbnf.h"

using namespace pdserve::grammar;
using nlohmann::json;

namespace {

std::shared_ptr<const TokenVocab> byte_vocab() {
  std::vector<std::string> pieces;
  for (int b = 0; b < 256; ++b) pieces.push_back(std::string(1, static_cast<char>(b)));
  return std::make_shared<TokenVocab>(pieces, std::vector<int32_t>{}, 256);
}

std::unique_ptr<GrammarMatcher> compile(const std::string& gbnf, std::shared_ptr<const TokenVocab> v = byte_vocab()) {
  auto g = parse_gbnf(gbnf);
  EXPECT_TRUE(g.ok()) << g.error() << "\n" << gbnf;
  if (!g.ok()) return nullptr;
  return std::make_unique<GrammarMatcher>(std::move(*g), v);
}

bool accepts(GrammarMatcher& m, const std::string& s) {
  int32_t st = m.initial_state();
  for (char c : s) {
    st = m.advance_byte(st, static_cast<uint8_t>(c));
    if (st < 0) return false;
  }
  return m.accepting(st);
}

/// A random sentence: random allowed bytes until the grammar accepts (stopping there
/// with probability 1/2, always when nothing else is allowed); "" if `limit` is hit.
std::string random_walk(GrammarMatcher& m, std::mt19937& rng, int limit = 400) {
  int32_t st = m.initial_state();
  std::string out;
  for (int i = 0; i < limit; ++i) {
    std::vector<int> ok;
    for (int b = 0; b < 256; ++b)
      if (m.advance_byte(st, static_cast<uint8_t>(b)) >= 0) ok.push_back(b);
    // Bias towards ending: near the limit, prefer bytes that close things.
    if (m.accepting(st) && (ok.empty() || rng() % 2 == 0 || i > limit / 2)) return out;
    if (ok.empty()) return "";
    int b = ok[rng() % ok.size()];
    if (i > limit / 4) {  // prefer structural bytes so walks finish
      for (int pref : {'"', '}', ']', '0'})
        if (std::find(ok.begin(), ok.end(), pref) != ok.end() && rng() % 2 == 0) { b = pref; break; }
    }
    out += static_cast<char>(b);
    st = m.advance_byte(st, static_cast<uint8_t>(b));
  }
  return "";
}

}  // namespace

TEST(GbnfTest, AcceptsExactlyTheLanguage) {
  auto m = compile(R"(
root ::= greeting (" " name)? "!"{1,3}   # comment
greeting ::= "hi" | "hello"
name ::= [A-Z] [a-z]*
)");
  ASSERT_TRUE(m);
  for (const char* s : {"hi!", "hello!!!", "hi Bob!", "hello X!!"}) EXPECT_TRUE(accepts(*m, s)) << s;
  for (const char* s : {"hi", "hi!!!!", "hi bob!", "hey!", "hi Bob", ""}) EXPECT_FALSE(accepts(*m, s)) << s;
}

TEST(GbnfTest, UnicodeClassesAreMatchedAsUtf8Bytes) {
  auto m = compile("root ::= [α-ω]+ [^a-z\\x00-\\x7F] \".\"\n");
  ASSERT_TRUE(m);
  EXPECT_TRUE(accepts(*m, "αβγ€."));
  EXPECT_TRUE(accepts(*m, "ω😀."));
  EXPECT_FALSE(accepts(*m, "αβγa."));
  EXPECT_FALSE(accepts(*m, "a€."));
  EXPECT_FALSE(accepts(*m, "α\xED\xA0\x80."));  // a surrogate's encoding is not UTF-8
  // A prefix that ends inside a multi-byte character is alive.
  int32_t st = m->initial_state();
  st = m->advance_byte(st, 0xCE);
  EXPECT_GE(st, 0);
  EXPECT_FALSE(m->accepting(st));
}

TEST(GbnfTest, ErrorsNameTheLineAndProblem) {
  auto e1 = parse_gbnf("root ::= \"a\"\nx ::= \"b\" |\n  \"c\" )\n");
  ASSERT_FALSE(e1.ok());
  EXPECT_NE(e1.error().find("line 3"), std::string::npos) << e1.error();
  auto e2 = parse_gbnf("root ::= foo\n");
  ASSERT_FALSE(e2.ok());
  EXPECT_NE(e2.error().find("undefined rule 'foo'"), std::string::npos) << e2.error();
  auto e3 = parse_gbnf("root ::= root \"a\" | \"b\"\n");
  ASSERT_FALSE(e3.ok());
  EXPECT_NE(e3.error().find("left recursive"), std::string::npos) << e3.error();
  auto e4 = parse_gbnf("start ::= \"a\"\n");
  ASSERT_FALSE(e4.ok());
  EXPECT_NE(e4.error().find("root"), std::string::npos);
  EXPECT_FALSE(parse_gbnf("root ::= \"a\" \"b\n").ok());
  EXPECT_FALSE(parse_gbnf("root ::= \"a\"{3,1}\n").ok());
  EXPECT_FALSE(parse_gbnf("root ::= <think>\n").ok());
  // A grammar that matches no text is refused here (it gave a 500 at the first token with
  // nowhere to go); an alternative that can end is enough.
  auto e5 = parse_gbnf("root ::= \"a\" [^\\x00-\\U0010FFFF]\n");
  ASSERT_FALSE(e5.ok());
  EXPECT_NE(e5.error().find("the grammar matches no text"), std::string::npos) << e5.error();
  EXPECT_FALSE(parse_gbnf("root ::= x\nx ::= \"a\" x\n").ok());  // never ends
  EXPECT_TRUE(parse_gbnf("root ::= \"a\" | \"b\" [^\\x00-\\U0010FFFF]\n").ok());
  // ... and the alternatives that cannot end are dropped, so no generation starts down them
  // ("b" had nowhere to go: a 500 at the next token; "b" x ran "bccc..." to max_tokens).
  for (const char* g : {"root ::= \"a\" | \"b\" [^\\x00-\\U0010FFFF]\n", "root ::= \"a\" | \"b\" x\nx ::= \"c\" x\n"}) {
    auto m = compile(g);
    ASSERT_TRUE(m) << g;
    EXPECT_TRUE(accepts(*m, "a")) << g;
    EXPECT_LT(m->advance_byte(m->initial_state(), 'b'), 0) << g;
  }
  // A regular expression's error says what is wrong with it.
  auto r = regex_to_gbnf("a{5,2}");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("n < m"), std::string::npos) << r.error();
  EXPECT_EQ(r.error().find("empty string"), std::string::npos) << r.error();
}

TEST(GbnfTest, DeepRepetitionStaysFlat) {
  // x* with a tail call: the state after many repetitions is the state after one.
  auto m = compile("root ::= \"[\" \"a\"* \"]\"\n");
  ASSERT_TRUE(m);
  int32_t st = m->advance_byte(m->initial_state(), '[');
  const int32_t one = m->advance_byte(st, 'a');
  int32_t many = one;
  for (int i = 0; i < 1000; ++i) many = m->advance_byte(many, 'a');
  EXPECT_EQ(one, many);
  // Nested nullable repetitions do not blow up.
  auto n = compile("root ::= (\" \"?){0,200} \"x\"\n");
  ASSERT_TRUE(n);
  EXPECT_TRUE(accepts(*n, std::string(150, ' ') + "x"));
  EXPECT_FALSE(accepts(*n, std::string(201, ' ') + "x"));
}

TEST(RegexTest, AgreesWithStdRegexOnRandomStrings) {
  const char* patterns[] = {
      "a(b|c)*d", "[0-9]{2,4}-[a-f]+", "(foo|ba[rz])+\\.?", "x?y+z*", "\\d+(\\.\\d{1,2})?", "[^abc]{1,3}",
      "(?:ab){2}|c{0,2}", "\\w+@\\w+\\.(com|org)", "^[a-c]+b$", "(a|b)(c|d)?", "[\\s\\d]+e", ".{2}a"};
  const std::string alphabet = "abcdxyz0129-.@ _\nfoqrmg";
  std::mt19937 rng(7);
  for (const char* p : patterns) {
    auto g = regex_to_gbnf(p);
    ASSERT_TRUE(g.ok()) << p << ": " << g.error();
    auto m = compile(*g);
    ASSERT_TRUE(m);
    const std::regex re(p, std::regex::ECMAScript);
    int matched = 0;
    for (int i = 0; i < 3000; ++i) {
      std::string s;
      const int len = static_cast<int>(rng() % 9);
      for (int k = 0; k < len; ++k) s += alphabet[rng() % alphabet.size()];
      if (i % 3 == 0) s = random_walk(*m, rng, 30);  // many strings in the language too
      // std::regex matches bytes, not code points: compare on ASCII strings only; and its
      // ECMAScript `.` also excludes \r (ours, like Python's, only \n).
      if (std::any_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) >= 0x80 || c == '\r'; })) continue;
      const bool want = std::regex_match(s, re);
      matched += want;
      EXPECT_EQ(accepts(*m, s), want) << "pattern " << p << " on \"" << s << "\"";
    }
    EXPECT_GT(matched, 10) << p;
  }
}

TEST(RegexTest, RefusesUnsupportedConstructsByName) {
  for (auto [p, word] : std::vector<std::pair<const char*, const char*>>{
           {"(a)\\1", "back-references"}, {"a(?=b)", "lookaround"}, {"\\bfoo", "word boundaries"},
           {"a^b", "anchors"}, {"(ab", "missing ')'"}, {"[a-", "unterminated"}, {"*a", "nothing to repeat"},
           {"a{2,x}", "invalid repetition"}, {"ab)", "unbalanced"}}) {
    auto r = regex_to_gbnf(p);
    ASSERT_FALSE(r.ok()) << p;
    EXPECT_NE(r.error().find(word), std::string::npos) << p << ": " << r.error();
  }
}

// Found by tests/fuzz (fuzz_grammar, corpus/grammar/crash-regex-deep-groups): thousands of
// nested groups overflowed the stack of the recursive parsers. Both refuse past 100 levels
// by name; 100 levels still compile.
TEST(RegexTest, GroupsNestedTooDeeplyAreRefusedNotAStackOverflow) {
  const std::string deep = std::string(20000, '(') + "a" + std::string(20000, ')');
  auto r = regex_to_gbnf(deep);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("nested deeper than 100"), std::string::npos) << r.error();
  auto g = parse_gbnf("root ::= " + deep);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.error().find("nested deeper than 100"), std::string::npos) << g.error();
  const std::string ok = std::string(100, '(') + "a" + std::string(100, ')');
  auto r2 = regex_to_gbnf(ok);
  ASSERT_TRUE(r2.ok()) << r2.error();
  EXPECT_TRUE(parse_gbnf(*r2).ok());
  auto g2 = parse_gbnf("root ::= " + std::string(100, '(') + "\"a\"" + std::string(100, ')'));
  EXPECT_TRUE(g2.ok()) << g2.error();
}

// Found by tests/fuzz (fuzz_grammar, corpus/grammar/crash-regex-nullable-repeat): a repeated
// part that can match the empty string compiled to GBNF the grammar refuses as left
// recursive, so a request was accepted and its grammar failed later. Refused up front now;
// the same parts that cannot match empty still compile.
TEST(RegexTest, RefusesRepeatingWhatCanMatchEmpty) {
  for (const char* p : {"a()+", "(a?)*", "(b|)+c", "x(y*){2,}"}) {
    auto r = regex_to_gbnf(p);
    ASSERT_FALSE(r.ok()) << p;
    EXPECT_NE(r.error().find("can match the empty string"), std::string::npos) << p << ": " << r.error();
  }
  for (const char* p : {"(a)+", "(a|b)*", "(a?b)+", "x(y+){2,}"}) {
    auto r = regex_to_gbnf(p);
    ASSERT_TRUE(r.ok()) << p << ": " << r.error();
    auto g = parse_gbnf(*r);
    ASSERT_TRUE(g.ok()) << p << ": " << g.error();
    EXPECT_TRUE(g->validate().ok()) << p;
  }
}

namespace {

/// A minimal validator for the schemas of this test (the integration test uses ajv).
bool valid(const json& v, const json& s, const json& root) {
  if (s.contains("$ref")) {
    const std::string r = s["$ref"];
    return valid(v, r == "#" ? root : root["$defs"][r.substr(8)], root);
  }
  if (s.contains("const")) return v == s["const"];
  if (s.contains("enum")) return std::find(s["enum"].begin(), s["enum"].end(), v) != s["enum"].end();
  if (s.contains("anyOf")) {
    for (const auto& sub : s["anyOf"])
      if (valid(v, sub, root)) return true;
    return false;
  }
  if (!s.contains("type")) return true;
  if (s["type"].is_array()) {
    for (const auto& t : s["type"]) {
      json one = s;
      one["type"] = t;
      if (valid(v, one, root)) return true;
    }
    return false;
  }
  const std::string t = s["type"];
  if (t == "string") {
    if (!v.is_string()) return false;
    size_t chars = 0;
    for (unsigned char c : v.get<std::string>()) chars += (c & 0xC0) != 0x80;
    if (s.contains("minLength") && chars < s["minLength"].get<size_t>()) return false;
    if (s.contains("maxLength") && chars > s["maxLength"].get<size_t>()) return false;
    if (s.contains("pattern") && !std::regex_search(v.get<std::string>(), std::regex(s["pattern"].get<std::string>()))) return false;
    return true;
  }
  if (t == "integer") return v.is_number_integer();
  if (t == "number") return v.is_number();
  if (t == "boolean") return v.is_boolean();
  if (t == "null") return v.is_null();
  if (t == "array") {
    if (!v.is_array()) return false;
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return false;
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return false;
    for (const auto& x : v)
      if (s.contains("items") && !valid(x, s["items"], root)) return false;
    return true;
  }
  if (!v.is_object()) return false;
  for (const auto& r : s.value("required", json::array()))
    if (!v.contains(r.get<std::string>())) return false;
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (!s.contains("properties") || !s["properties"].contains(it.key())) {
      if (s.value("additionalProperties", json(true)) == json(false)) return false;
      continue;
    }
    if (!valid(it.value(), s["properties"][it.key()], root)) return false;
  }
  return true;
}

}  // namespace

TEST(JsonSchemaTest, RandomSentencesParseAndValidate) {
  const json schemas[] = {
      json::parse(R"({"type":"object","properties":{"name":{"type":"string","maxLength":5},"age":{"type":"integer"},
        "tags":{"type":"array","items":{"enum":["a","b",3,null]},"minItems":1,"maxItems":3},"ok":{"type":"boolean"}},
        "required":["name","age"],"additionalProperties":false})"),
      json::parse(R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"number"},"next":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}},
        "required":["v","next"]}},"$ref":"#/$defs/node"})"),
      json::parse(R"({"type":"object","properties":{"a":{"const":"x\"y"},"b":{"type":["string","null"],"pattern":"^[a-c]{2}\\d$"},
        "c":{"type":"object","properties":{"d":{"type":"string","minLength":2,"maxLength":3}}}}})"),
      json::parse(R"({"type":"array","items":{"type":"object","additionalProperties":{"type":"integer"}},"maxItems":2})"),
      json::parse(R"({"anyOf":[{"type":"string","format":"uuid"},{"type":"array","items":{},"minItems":2}]})"),
  };
  std::mt19937 rng(3);
  for (const json& s : schemas) {
    auto g = json_schema_to_gbnf(s);
    ASSERT_TRUE(g.ok()) << g.error();
    auto m = compile(*g);
    ASSERT_TRUE(m);
    int done = 0;
    for (int i = 0; i < 200; ++i) {
      const std::string out = random_walk(*m, rng);
      if (out.empty()) continue;
      ++done;
      json v;
      ASSERT_NO_THROW(v = json::parse(out)) << out;
      EXPECT_TRUE(valid(v, s, s)) << s.dump() << "\n" << out;
    }
    EXPECT_GT(done, 50) << s.dump();
  }
}

TEST(JsonSchemaTest, RefusesWhatItCannotEnforceNamingTheKeyword) {
  for (auto [s, word] : std::vector<std::pair<const char*, const char*>>{
           {R"({"type":"integer","minimum":3})", "'minimum' at /"},
           {R"({"type":"object","properties":{"a":{"oneOf":[{"type":"string"}]}}})", "'oneOf' at /properties/a"},
           {R"({"type":"string","format":"email"})", "format"},
           {R"({"$ref":"http://x/y"})", "$ref"},
           {R"({"type":"thing"})", "unknown type 'thing'"},
           {R"({"type":"array","items":{"not":{}}})", "'not' at /items"},
           {R"({"type":"object","required":["a"]})", "required property 'a'"},
           {R"({"type":"string","pattern":"(a"})", "invalid 'pattern'"}}) {
    auto r = json_schema_to_gbnf(json::parse(s));
    ASSERT_FALSE(r.ok()) << s;
    EXPECT_NE(r.error().find(word), std::string::npos) << s << ": " << r.error();
  }
}

TEST(JsonSchemaTest, EnumValuesMustHaveTheType) {
  auto g = json_schema_to_gbnf(json::parse(R"({"type":"string","enum":["a",1,null,"b"]})"));
  ASSERT_TRUE(g.ok()) << g.error();
  auto m = compile(*g);
  ASSERT_TRUE(m);
  EXPECT_TRUE(accepts(*m, "\"a\""));
  EXPECT_TRUE(accepts(*m, "\"b\""));
  EXPECT_FALSE(accepts(*m, "1"));
  EXPECT_FALSE(accepts(*m, "null"));
  EXPECT_FALSE(json_schema_to_gbnf(json::parse(R"({"type":"integer","enum":["a"]})")).ok());
  // const too: its value had to have the type (5 came back for type string).
  EXPECT_FALSE(json_schema_to_gbnf(json::parse(R"({"type":"string","const":5})")).ok());
  EXPECT_FALSE(json_schema_to_gbnf(json::parse(R"({"type":"integer","const":"a"})")).ok());
  EXPECT_TRUE(json_schema_to_gbnf(json::parse(R"({"type":["integer","null"],"const":null})")).ok());
}

TEST(JsonSchemaTest, PropertiesComeInTheSchemasOrder) {
  // Declared zeta, alpha, mid: the grammar must produce them in that order, not sorted.
  auto g = json_schema_to_gbnf(nlohmann::ordered_json::parse(
      R"({"type":"object","properties":{"zeta":{"type":"integer"},"alpha":{"type":"string"},"mid":{"type":"boolean"}},
          "required":["zeta","alpha","mid"]})"));
  ASSERT_TRUE(g.ok()) << g.error();
  auto m = compile(*g);
  ASSERT_TRUE(m);
  EXPECT_TRUE(accepts(*m, R"({"zeta":1,"alpha":"a","mid":true})"));
  EXPECT_FALSE(accepts(*m, R"({"alpha":"a","mid":true,"zeta":1})"));
  std::mt19937 rng(5);
  int done = 0;
  for (int i = 0; i < 100; ++i) {
    const std::string out = random_walk(*m, rng);
    if (out.empty()) continue;
    ++done;
    const auto parsed = nlohmann::ordered_json::parse(out);
    std::vector<std::string> keys;
    for (auto it = parsed.begin(); it != parsed.end(); ++it) keys.push_back(it.key());
    EXPECT_EQ(keys, (std::vector<std::string>{"zeta", "alpha", "mid"})) << out;
  }
  EXPECT_GT(done, 20);
}

TEST(ChoiceTest, ExactlyTheChoices) {
  auto m = compile(choice_gbnf({"yes", "no", "maybe \"so\""}));
  ASSERT_TRUE(m);
  EXPECT_TRUE(accepts(*m, "yes"));
  EXPECT_TRUE(accepts(*m, "maybe \"so\""));
  EXPECT_FALSE(accepts(*m, "ye"));
  EXPECT_FALSE(accepts(*m, "yesno"));
}

TEST(MaskTest, TrieMaskEqualsBruteForceOverEveryToken) {
  // A vocabulary with shared prefixes, multi-byte pieces, pieces that straddle grammar
  // element boundaries, partial UTF-8, empty pieces and an EOG id, plus ids without a piece.
  std::mt19937 rng(11);
  const std::string chars = "{}[]\":, abn01-9eu\\t\xCE\xB1\xE2\x82\xAC";
  std::vector<std::string> pieces = {"", "{\"", "\":", "\"}", "true", "null", ", \"", "\xCE", "\xB1\"", "\\u00"};
  while (pieces.size() < 3000) {
    std::string p;
    const int len = 1 + static_cast<int>(rng() % 6);
    for (int k = 0; k < len; ++k) p += chars[rng() % chars.size()];
    pieces.push_back(p);
  }
  const int32_t eog = 0;
  auto vocab = std::make_shared<TokenVocab>(pieces, std::vector<int32_t>{eog}, 3010);
  const json schema = json::parse(R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"string"}},
     "b":{"enum":[true,null,"αβ"]},"c":{"type":"number"}},"required":["a"]})");
  auto g = json_schema_to_gbnf(schema);
  ASSERT_TRUE(g.ok());
  auto m = compile(*g, vocab);
  ASSERT_TRUE(m);
  int checked_states = 0;
  for (int walk = 0; walk < 40; ++walk) {
    int32_t st = m->initial_state();
    for (int step = 0; step < 30 && st >= 0; ++step) {
      const uint32_t* mask = m->mask(st);
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < vocab->n_vocab; ++id) {
        // Brute force: feed the token's bytes one by one.
        bool want;
        if (id == eog) want = m->accepting(st);
        else if (id >= static_cast<int32_t>(pieces.size()) || pieces[id].empty()) want = false;
        else {
          int32_t s = st;
          for (char c : pieces[id]) s = s < 0 ? s : m->advance_byte(s, static_cast<uint8_t>(c));
          want = s >= 0;
        }
        const bool got = (mask[id >> 5] >> (id & 31)) & 1;
        ASSERT_EQ(got, want) << "token " << id << " '" << (id < 3000 ? pieces[id] : "") << "' at step " << step;
        if (got) allowed.push_back(id);
      }
      ++checked_states;
      if (allowed.empty()) break;
      const int32_t tok = allowed[rng() % allowed.size()];
      if (tok == eog) break;
      st = m->advance_token(st, tok);
      ASSERT_GE(st, 0);
    }
  }
  EXPECT_GT(checked_states, 200);
}

TEST(MaskTest, ManyStatesKeepMasksCorrectPastTheCacheBound) {
  // "a"{0,3000}: every count is its own state, so masks are dropped and recomputed.
  std::vector<std::string> pieces = {"", "a", "aa", "b"};
  auto vocab = std::make_shared<TokenVocab>(pieces, std::vector<int32_t>{0}, 4);
  auto m = compile("root ::= \"a\"{0,3000}\n", vocab);
  ASSERT_TRUE(m);
  int32_t st = m->initial_state();
  const uint32_t* first = m->mask(st);
  EXPECT_EQ(first[0], 0b0111u);  // EOS (complete), "a", "aa"; never "b"
  for (int n = 0; n < 2999; ++n) {
    const uint32_t* mask = m->mask(st);
    const uint32_t want = 0b0011u | (n <= 2998 ? 0b0100u : 0u);  // "aa" fits while n + 2 <= 3000
    ASSERT_EQ(mask[0], want) << "after " << n << " a's";
    st = m->advance_token(st, 1);
    ASSERT_GE(st, 0);
  }
  EXPECT_GT(m->num_states(), GrammarMatcher::kMaxCachedMasks);
  EXPECT_EQ(m->mask(st)[0], 0b0011u);  // 2999 a's: "a" once more, or stop
  st = m->advance_token(st, 1);
  EXPECT_EQ(m->mask(st)[0], 0b0001u);  // 3000: only EOS
}

// Found from tests/fuzz (a 3.3 KB guided_regex timed out): building a grammar scanned every
// byte set so far for each new one, so N distinct classes cost O(N²) (40,000 took 7 s), and
// each '.' rebuilt its own multi-byte rule. Both are built once now; the languages are the
// same.
TEST(GbnfTest, ManyDistinctClassesAndALongRunOfDotsCompileToTheSameLanguage) {
  const std::string chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  constexpr int kClasses = 20000;
  std::string rx, match;
  for (int i = 1; i <= kClasses; ++i) {  // class i: the characters of i's set bits, all distinct
    rx += '[';
    for (int b = 0; b < 16; ++b)
      if (i >> b & 1) rx += chars[b];
    rx += ']';
    match += chars[__builtin_ctz(i)];
  }
  auto g = regex_to_gbnf(rx, 10'000'000);
  ASSERT_TRUE(g.ok()) << g.error();
  auto parsed = parse_gbnf(*g);
  ASSERT_TRUE(parsed.ok()) << parsed.error();
  EXPECT_EQ(parsed->sets.size(), static_cast<size_t>(kClasses)) << "one byte set per distinct class";
  auto m = compile(*g);
  ASSERT_TRUE(m);
  EXPECT_TRUE(accepts(*m, match));
  std::string wrong = match;
  wrong.back() = chars[15];  // class 20000 = bits 5, 9, 10, 11, 14: not 'p'
  EXPECT_FALSE(accepts(*m, wrong));

  constexpr int kDots = 10000;
  auto d = regex_to_gbnf(std::string(kDots, '.') + "x", 10'000'000);
  ASSERT_TRUE(d.ok()) << d.error();
  auto dg = parse_gbnf(*d);
  ASSERT_TRUE(dg.ok()) << dg.error();
  int char_rules = 0;
  for (const std::string& name : dg->rule_names) char_rules += name.rfind("char-", 0) == 0;
  EXPECT_EQ(char_rules, 1) << "every '.' refers to one rule";
  auto dm = compile(*d);
  ASSERT_TRUE(dm);
  std::string text;
  for (int i = 0; i < kDots; ++i) text += i % 3 == 0 ? "é" : i % 3 == 1 ? "😀" : "a";
  EXPECT_TRUE(accepts(*dm, text + "x"));
  EXPECT_FALSE(accepts(*dm, text));
  std::string newline;  // the same text with its 6th character (an 'a') a newline: '.' does not match it
  for (int i = 0; i < kDots; ++i) newline += i == 5 ? "\n" : i % 3 == 0 ? "é" : i % 3 == 1 ? "😀" : "a";
  EXPECT_FALSE(accepts(*dm, newline + "x"));
}
