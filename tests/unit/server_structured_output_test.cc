// Structured-output request fields (server/structured_output.h) through the request
// parsers: every accepted form yields the grammar of its constraint (checked by the
// strings that grammar accepts), and bad input gets a 400 naming the field.
#include <gtest/gtest.h>

#include "grammar/matcher.h"
#include "server/openai_protocol.h"
#include "server/request_limits.h"

using namespace pdserve;
using server::json;

namespace {

json chat_body(json extra) {
  json b = {{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}};
  for (auto it = extra.begin(); it != extra.end(); ++it) b[it.key()] = it.value();
  return b;
}

/// Whether the request's grammar accepts `text` exactly.
bool accepts(const std::string& gbnf, const std::string& text) {
  auto g = grammar::parse_gbnf(gbnf);
  EXPECT_TRUE(g.ok()) << g.error();
  std::vector<std::string> pieces;
  for (int b = 0; b < 256; ++b) pieces.push_back(std::string(1, static_cast<char>(b)));
  grammar::GrammarMatcher m(std::move(*g), std::make_shared<grammar::TokenVocab>(pieces, std::vector<int32_t>{}, 256));
  int32_t s = m.initial_state();
  for (char c : text) s = m.advance_byte(s, static_cast<uint8_t>(c));
  return m.accepting(s);
}

void expect_error(const server::ParsedRequest& p, const std::string& param, const std::string& msg) {
  ASSERT_FALSE(p.ok()) << "expected an error mentioning '" << msg << "'";
  EXPECT_EQ(p.error->status, 400);
  ASSERT_TRUE(p.error->param.has_value()) << p.error->message;
  EXPECT_EQ(*p.error->param, param) << p.error->message;
  EXPECT_NE(p.error->message.find(msg), std::string::npos) << p.error->message;
}

const json kSchema = {{"type", "object"},
                      {"properties", {{"x", {{"type", "integer"}}}}},
                      {"required", {"x"}},
                      {"additionalProperties", false}};

}  // namespace

TEST(StructuredOutputTest, EveryFormYieldsItsConstraint) {
  struct Case {
    json fields;
    std::string yes, no;
  };
  const std::vector<Case> cases = {
      {{{"response_format", {{"type", "json_object"}}}}, R"({"a": [1, "b"]})", "[1]"},
      {{{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "n"}, {"schema", kSchema}, {"strict", true}}}}}},
       R"({"x": 12})", R"({"x": "12"})"},
      {{{"response_format", {{"type", "json_object"}, {"schema", kSchema}}}}, R"({"x":1})", R"({"y":1})"},
      {{{"structured_outputs", {{"json", kSchema}}}}, R"({"x":-3})", R"({})"},
      {{{"structured_outputs", {{"json", kSchema.dump()}}}}, R"({"x":-3})", R"({})"},
      {{{"structured_outputs", {{"regex", "[a-c]{3}\\d"}}}}, "abc7", "abcd"},
      {{{"structured_outputs", {{"choice", {"red", "green"}}}}}, "green", "blue"},
      {{{"structured_outputs", {{"grammar", "root ::= \"x\"+"}}}}, "xxx", "xy"},
      {{{"guided_json", kSchema}}, R"({"x":0})", R"({"x":01})"},
      {{{"guided_regex", "(ab)+"}}, "abab", "aba"},
      {{{"guided_choice", {"A", "B"}}}, "B", "AB"},
      {{{"guided_grammar", "root ::= [0-9]"}}, "5", "55"},
      {{{"grammar", "root ::= \"yes\" | \"no\""}}, "no", "maybe"},
      {{{"json_schema", kSchema}}, R"({"x":5})", R"({"x":5,"y":1})"},
  };
  for (const Case& c : cases) {
    for (bool chat : {true, false}) {
      json body = chat_body(c.fields);
      if (!chat) {
        body.erase("messages");
        body["prompt"] = "p";
      }
      auto p = chat ? server::parse_chat_json(body) : server::parse_completion_json(body);
      ASSERT_TRUE(p.ok()) << c.fields.dump() << ": " << p.error->message;
      const std::string& g = p.request.params.grammar;
      ASSERT_FALSE(g.empty()) << c.fields.dump();
      EXPECT_TRUE(accepts(g, c.yes)) << c.fields.dump() << " should accept " << c.yes;
      EXPECT_FALSE(accepts(g, c.no)) << c.fields.dump() << " should refuse " << c.no;
    }
  }
  auto text = server::parse_chat_json(chat_body({{"response_format", {{"type", "text"}}}}));
  ASSERT_TRUE(text.ok());
  EXPECT_TRUE(text.request.params.grammar.empty());
}

TEST(StructuredOutputTest, BadInputNamesTheFieldAndProblem) {
  auto chat = [](json f) { return server::parse_chat_json(chat_body(std::move(f))); };
  expect_error(chat({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "n"},
                {"schema", {{"type", "object"}, {"properties", {{"a", {{"oneOf", json::array({{{"type", "string"}}})}}}}}}}}}}}}),
               "response_format.json_schema.schema", "unsupported keyword 'oneOf' at /properties/a");
  auto unsup = chat({{"guided_json", {{"type", "string"}, {"format", "email"}}}});
  expect_error(unsup, "guided_json", "format");
  expect_error(chat({{"response_format", {{"type", "xml"}}}}), "response_format.type", "'xml'");
  expect_error(chat({{"response_format", {{"type", "json_schema"}}}}), "response_format.json_schema", "missing");
  expect_error(chat({{"guided_regex", "a(?=b)"}}), "guided_regex", "lookaround");
  expect_error(chat({{"structured_outputs", {{"regex", "(ab"}}}}), "structured_outputs.regex", "missing ')'");
  expect_error(chat({{"grammar", "root ::= \"a\"\nfoo ::= bar\n"}}), "grammar", "undefined rule 'bar'");
  expect_error(chat({{"guided_grammar", "root ::= (\"a\""}}), "guided_grammar", "line 1");
  expect_error(chat({{"guided_choice", json::array()}}), "guided_choice", "non-empty array");
  expect_error(chat({{"guided_json", "{not json"}}), "guided_json", "does not parse");
  expect_error(chat({{"structured_outputs", {{"json", kSchema}, {"regex", "a"}}}}), "structured_outputs", "only one");
  expect_error(chat({{"structured_outputs", {{"xml", "a"}}}}), "structured_outputs.xml", "unknown");
  expect_error(chat({{"guided_regex", "a"}, {"grammar", "root ::= \"a\""}}), "grammar", "Only one");
}

TEST(ToolCallsTest, OutputParsesIntoCallsAndConversationRendersBack) {
  auto p = server::parse_tool_output(
      "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, \"x\"]}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>",
      "call_ab_0");
  EXPECT_FALSE(p.content.has_value());
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0]["id"], "call_ab_0_0");
  EXPECT_EQ(p.calls[0]["function"]["name"], "f");
  EXPECT_EQ(json::parse(p.calls[0]["function"]["arguments"].get<std::string>()), json::parse(R"({"a":[1,"x"]})"));
  EXPECT_EQ(p.calls[1]["function"]["name"], "g");
  // Plain text stays content; a call cut by max_tokens is the call begun so far (its
  // arguments as written) and none of the call syntax becomes content (issue #17: it
  // used to come back as raw <tool_call> text).
  auto t = server::parse_tool_output("hello", "c");
  EXPECT_EQ(t.content.value_or(""), "hello");
  EXPECT_TRUE(t.calls.empty());
  auto cut = server::parse_tool_output("<tool_call>\n{\"name\": \"f\", \"argu", "c");
  ASSERT_EQ(cut.calls.size(), 1u);
  EXPECT_EQ(cut.calls[0]["function"]["name"], "f");
  EXPECT_EQ(cut.calls[0]["function"]["arguments"], "");
  EXPECT_FALSE(cut.content.has_value());
  auto cut_args = server::parse_tool_output("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1", "c");
  ASSERT_EQ(cut_args.calls.size(), 1u);
  EXPECT_EQ(cut_args.calls[0]["function"]["arguments"], "{\"a\": [1");
  auto cut_name = server::parse_tool_output("<tool_call>\n{\"na", "c");
  EXPECT_TRUE(cut_name.calls.empty());
  EXPECT_FALSE(cut_name.content.has_value());
  EXPECT_TRUE(cut.cut && cut_args.cut && cut_name.cut);
  EXPECT_FALSE(p.cut);
  // A choice that ended on a stop string inside a call stays "stop"; complete calls are
  // "tool_calls" (helper-62: a call cut by stop "}" came back as a finished call).
  json body = {{"id", "chatcmpl-ab"},
               {"choices", {{{"index", 0}, {"finish_reason", "stop"}, {"message", {{"content", "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": -47"}}}},
                            {{"index", 1}, {"finish_reason", "stop"}, {"message", {{"content", "<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>"}}}}}}};
  server::apply_tool_calls(body, server::ToolSyntax::kWrapper);
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"], "{\"x\": -47");
  EXPECT_EQ(body["choices"][1]["finish_reason"], "tool_calls");

  // The rendered assistant turn is what the grammar lets the model write: parsing it
  // gives the same calls back.
  json assistant = {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", p.calls}};
  std::string role = "assistant", content;
  ASSERT_FALSE(server::render_tool_message(assistant, "messages[1]", role, content));
  auto again = server::parse_tool_output(content, "call_ab_0");
  EXPECT_EQ(again.calls, p.calls);
  std::string trole = "tool", tcontent = "42";
  ASSERT_FALSE(server::render_tool_message(json{{"role", "tool"}, {"content", "42"}}, "messages[2]", trole, tcontent));
  EXPECT_EQ(trole, "user");
  EXPECT_EQ(tcontent, "<tool_response>\n42\n</tool_response>");
  json bad = {{"role", "assistant"}, {"tool_calls", {{{"function", {{"name", "f"}, {"arguments", "{oops"}}}}}}};
  auto e = server::render_tool_message(bad, "messages[1]", role, content);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param.value_or(""), "messages[1].tool_calls[0].function.arguments");
}

TEST(ToolCallsTest, GrammarAllowsExactlyTheDeclaredCalls) {
  server::ToolConfig t;
  json body = chat_body({{"tools", {{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", kSchema}}}},
                                    {{"type", "function"}, {"function", {{"name", "g"}}}}}}});
  auto req = server::parse_chat_json(body);
  ASSERT_TRUE(req.ok()) << req.error->message;
  const std::string& g = req.request.params.grammar;  // auto: text or calls
  const std::string call_f = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 3}}\n</tool_call>";
  // g declares no parameters: an empty parameter list (OpenAI), so its arguments are {}.
  const std::string call_g = "<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>";
  EXPECT_FALSE(accepts(g, "<tool_call>\n{\"name\": \"g\", \"arguments\": {\"any\": [true]}}\n</tool_call>"));
  EXPECT_TRUE(accepts(g, call_f));
  EXPECT_TRUE(accepts(g, call_f + "\n" + call_g));
  EXPECT_TRUE(accepts(g, "Just text, <b>with</b> brackets later."));
  EXPECT_FALSE(accepts(g, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": \"3\"}}\n</tool_call>"));
  EXPECT_FALSE(accepts(g, "<tool_call>\n{\"name\": \"h\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_EQ(req.request.messages[0].role, "system");
  EXPECT_NE(req.request.messages[0].content.find("\"name\":\"f\""), std::string::npos);

  body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "g"}}}};
  body["parallel_tool_calls"] = false;
  auto named = server::parse_chat_json(body);
  ASSERT_TRUE(named.ok());
  EXPECT_TRUE(accepts(named.request.params.grammar, call_g));
  EXPECT_FALSE(accepts(named.request.params.grammar, call_f));
  EXPECT_FALSE(accepts(named.request.params.grammar, call_g + "\n" + call_g));
  EXPECT_FALSE(accepts(named.request.params.grammar, "text"));
  body["tool_choice"] = "none";
  auto none = server::parse_chat_json(body);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none.request.params.grammar.empty());
  // Arguments are an object: parameters {} are none (a random model wrote a bare number for
  // them), a schema without a type is an object's, and another type is refused.
  for (const json& params : {json::object(), json{{"properties", {{"x", {{"type", "integer"}}}}}}}) {
    json b = chat_body({{"tools", {{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", params}}}}}},
                        {"tool_choice", "required"}});
    auto r = server::parse_chat_json(b);
    ASSERT_TRUE(r.ok()) << r.error->message;
    EXPECT_FALSE(accepts(r.request.params.grammar, "<tool_call>\n{\"name\": \"f\", \"arguments\": 8}\n</tool_call>"));
    EXPECT_TRUE(accepts(r.request.params.grammar, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>"));
  }
  json str = chat_body({{"tools", {{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", {{"type", "string"}}}}}}}}});
  auto refused = server::parse_chat_json(str);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error->param.value_or(""), "tools[0].function.parameters");
  EXPECT_EQ(none.request.messages[0].role, "user");
}

