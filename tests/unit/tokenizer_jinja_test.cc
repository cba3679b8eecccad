// The Jinja interpreter (tokenizer/jinja) against Python's jinja2: every snippet of
// tests/data/jinja/cases.json (made by make_cases.py with jinja2 in transformers'
// chat-template environment) renders byte-identically; errors carry line and column.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tokenizer/chat_jinja.h"
#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/template.h"

namespace pdserve::tokenizer::jinja {
namespace {

using nlohmann::ordered_json;

ordered_json load_cases() {
  std::ifstream f("tests/data/jinja/cases.json");
  std::stringstream ss;
  ss << f.rdbuf();
  return ordered_json::parse(ss.str());
}

ValueDict vars_of(const ordered_json& j) {
  ValueDict d;
  for (auto it = j.begin(); it != j.end(); ++it) d.set(it.key(), Value::from_json(it.value()));
  return d;
}

std::string render(const std::string& src, const ValueDict& vars = {}) {
  RenderOptions opts;
  EXPECT_TRUE(parse_utc_date("2026-12-01", &opts.now));
  return Template(src).render(vars, opts);
}

std::string error_of(const std::string& src, const ValueDict& vars = {}) {
  try {
    render(src, vars);
  } catch (const TemplateError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(JinjaTest, MatchesJinja2OnEveryCase) {
  ordered_json data = load_cases();
  ValueDict vars = vars_of(data["vars"]);
  ASSERT_GE(data["cases"].size(), 60u);
  for (const auto& c : data["cases"]) {
    const std::string src = c["template"];
    SCOPED_TRACE(src);
    std::string out;
    try {
      out = render(src, vars);
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what();
      continue;
    }
    EXPECT_EQ(out, c["output"].get<std::string>());
  }
}

TEST(JinjaTest, VariablesAreSharedByReferenceLikePythonObjects) {
  // namespace attributes and list.append outlive the loop scope that changed them.
  EXPECT_EQ(render("{% set ns = namespace(a=[]) %}{% for i in range(3) %}{% set _ = ns.a.append(i) %}"
                   "{% endfor %}{{ ns.a | length }}"),
            "3");
}

TEST(JinjaTest, SyntaxErrorsCarryLineAndColumn) {
  EXPECT_EQ(error_of("ab\n{% if x %}\nc"), "line 3, column 2: unexpected end of template, expected 'elif'");
  EXPECT_EQ(error_of("{{ 1 + }}"), "line 1, column 8: unexpected '}}'");
  EXPECT_EQ(error_of("x\n  {% frobnicate %}"), "line 2, column 6: unknown statement 'frobnicate'");
  EXPECT_EQ(error_of("{{ 'abc }}"), "line 1, column 4: unterminated string");
  EXPECT_EQ(error_of("{# open"), "line 1, column 1: unterminated comment");
}

TEST(JinjaTest, RuntimeErrorsCarryLineAndColumn) {
  EXPECT_EQ(error_of("a\n{{ raise_exception('System role not supported') }}"),
            "line 2, column 4: System role not supported");
  EXPECT_EQ(error_of("{{ nothing() }}"), "line 1, column 4: 'nothing' is undefined");
  EXPECT_EQ(error_of("{{ 1 | nofilter }}"), "line 1, column 8: no filter named 'nofilter'");
  EXPECT_EQ(error_of("{{ 1 is notatest }}"), "line 1, column 6: no test named 'notatest'");
  EXPECT_EQ(error_of("{{ [1] - 2 }}"), "line 1, column 8: unsupported operand type(s) for -: 'list' and 'int'");
  EXPECT_NE(error_of("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}").find("maximum macro recursion depth"),
            std::string::npos);
}

TEST(JinjaTest, TemplatesThatWouldCrashOrExhaustTheServerAreErrors) {
  // A model file's template is input: nesting that overflowed the stack, a list that contains
  // itself, and sizes or loops that took gigabytes or never ended are TemplateErrors
  // (helper-63; the server then falls back to a built-in format).
  const auto has = [](const std::string& err, const std::string& what) { return err.find(what) != std::string::npos; };
  EXPECT_TRUE(has(error_of("{{ " + std::string(10000, '(') + "1" + std::string(10000, ')') + " }}"), "nested more than 200 levels"));
  std::string ifs;
  for (int i = 0; i < 50000; ++i) ifs += "{% if true %}";
  EXPECT_TRUE(has(error_of(ifs), "nested more than 200 levels"));
  EXPECT_EQ(render("{{ " + std::string(150, '(') + "1" + std::string(150, ')') + " }}"), "1");  // deep but allowed
  // Values nested past 512 levels (a list that contains itself is one: it crashed a server on a
  // request; built here without a cycle, which reference counting cannot free).
  const std::string wrap = "{% set ns = namespace(x=[]) %}{% for i in range(600) %}{% set ns.x = [ns.x] %}{% endfor %}";
  EXPECT_TRUE(has(error_of(wrap + "{{ ns.x | tojson }}"), "contains itself"));
  EXPECT_TRUE(has(error_of(wrap + "{{ ns.x }}"), "contains itself"));
  EXPECT_TRUE(has(error_of("{% for i in range(1000000000) %}x{% endfor %}"), "range() of 1000000000 items"));
  EXPECT_TRUE(has(error_of("{{ 'x' * 2000000000 }}"), "a string repeated 2000000000 times"));
  EXPECT_TRUE(has(error_of("{{ [1, 2] * 2000000000 }}"), "a list repeated"));
  EXPECT_TRUE(has(error_of("{% for i in range(1000000) %}{% for j in range(1000000) %}{% endfor %}{% endfor %}"),
                  "more than 1000000 statements"));
  EXPECT_TRUE(has(error_of("{% for i in range(1000000) %}{{ 'y' * 100 }}{% endfor %}"), "output is larger than"));
  EXPECT_EQ(render("{{ range(5, 0, -2) | list }}"), "[5, 3, 1]");
  // Chains deepen the tree as much as parentheses (helper-65: 30,000 of them crashed).
  for (const std::string& chain : {"{{ " + [] { std::string c; for (int i = 0; i < 30000; ++i) c += "not "; return c; }() + "true }}",
                                   "{{ 1" + [] { std::string c; for (int i = 0; i < 30000; ++i) c += "+1"; return c; }() + " }}",
                                   "{{ 'x'" + [] { std::string c; for (int i = 0; i < 30000; ++i) c += "|upper"; return c; }() + " }}",
                                   "{{ x" + [] { std::string c; for (int i = 0; i < 30000; ++i) c += ".a"; return c; }() + " }}"})
    EXPECT_TRUE(has(error_of(chain), "nested more than 200 levels")) << chain.substr(0, 40);
  EXPECT_EQ(render("{{ 1" + [] { std::string c; for (int i = 0; i < 100; ++i) c += "+1"; return c; }() + " }}"), "101");
  // Strings and lists grown by any operation, not only * and range().
  EXPECT_TRUE(has(error_of("{% set ns = namespace(s='x' * 1000000) %}{% for i in range(6) %}{% set ns.s = ns.s ~ ns.s %}"
                           "{% endfor %}{{ ns.s | length }}"),
                  "a string of 32000000 bytes"));
  EXPECT_TRUE(has(error_of("{% set ns = namespace(l=range(100000) | list) %}{% for i in range(5) %}{% set ns.l = ns.l + ns.l %}"
                           "{% endfor %}{{ ns.l | length }}"),
                  "a list of 1600000 items"));
}

TEST(JinjaTest, UndefinedPrintsEmptyAndAttributeOfUndefinedIsUndefined) {
  EXPECT_EQ(render("[{{ nope }}][{{ nope.deeper }}][{{ nope['k'] is defined }}]"), "[][][False]");
}

TEST(JinjaTest, LexerAppliesTrimAndLstripBlocks) {
  // trim_blocks removes the newline after a block tag; lstrip_blocks the indentation before.
  EXPECT_EQ(render("  {% if true %}\nx\n  {% endif %}\ny"), "x\ny");
  LexOptions plain{false, false};
  auto toks = lex("  {% if true %}\nx", plain);
  ASSERT_FALSE(toks.empty());
  EXPECT_EQ(toks[0].type, TokenType::Text);
  EXPECT_EQ(toks[0].value, "  ");
}

}  // namespace
}  // namespace pdserve::tokenizer::jinja
