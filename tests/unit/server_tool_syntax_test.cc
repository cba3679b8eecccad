// Tools in the model's own template and call syntax (server/tool_syntax.h): the detector
// picks each real template's syntax; the chat prompt with tools is the template's own
// rendering (llama.cpp's reference text in ../shared/templates/*.expected.json, case d);
// for each syntax the tool grammar only produces outputs that parse back into calls of the
// declared functions with JSON-object arguments, what the template writes for an assistant
// call parses to that call, and every prefix of an output (a cut by max_tokens) parses to
// the calls begun so far without any call syntax as content.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <random>
#include <sstream>

#include "gguf/gguf.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "server/generation.h"
#include "server/openai_protocol.h"
#include "server/tool_calls.h"
#include "tokenizer/chat_jinja.h"
#include "tokenizer/tokenizer.h"

namespace pdserve::server {
namespace {

std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const std::string kDir = "../shared/templates/";

TEST(ToolSyntax, DetectorPicksEachTemplatesSyntax) {
  const std::pair<const char*, ToolSyntax> cases[] = {
      {"Qwen-Qwen2.5-7B-Instruct", ToolSyntax::kHermes},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", ToolSyntax::kHermes},
      {"Qwen-Qwen3-0.6B", ToolSyntax::kHermes},
      {"meta-llama-Llama-3.1-8B-Instruct", ToolSyntax::kLlama3},
      {"mistralai-Mistral-7B-Instruct-v0.3", ToolSyntax::kMistral},
      {"mistralai-Mistral-Nemo-Instruct-2407", ToolSyntax::kMistral},
      {"ibm-granite-granite-3.3-2B-Instruct", ToolSyntax::kWrapper},
      {"CohereForAI-c4ai-command-r-plus-tool_use", ToolSyntax::kWrapper},
      {"HuggingFaceH4-zephyr-7b-beta", ToolSyntax::kWrapper},
  };
  for (const auto& [name, want] : cases) {
    const std::string src = slurp(kDir + name + ".jinja");
    ASSERT_FALSE(src.empty()) << name;
    EXPECT_EQ(detect_tool_syntax(src), want) << name;
  }
}

std::unique_ptr<tokenizer::Tokenizer> stories_tokenizer() {
  auto f = gguf::GgufFile::open("../shared/models/stories260K.gguf");
  if (!f.ok()) return nullptr;
  auto t = tokenizer::Tokenizer::from_gguf(**f);
  return t.ok() ? std::move(t.value()) : nullptr;
}

// The reference conversations were rendered by llama.cpp with the stories260K vocab
// (bos <s>, eos </s>, BOS added by the tokenizer, so a leading <s> is stripped).
void check_prompt(const std::string& name, ToolSyntax want) {
  SCOPED_TRACE(name);
  auto tok = stories_tokenizer();
  ASSERT_TRUE(tok);
  const json exp = json::parse(slurp(kDir + name + ".expected.json"));
  auto tmpl = std::make_shared<const tokenizer::JinjaChatTemplate>(slurp(kDir + name + ".jinja"), "<s>", "</s>");
  std::time_t now = 0;
  ASSERT_TRUE(tokenizer::parse_utc_date(exp["render_date_utc"].get<std::string>(), &now));
  PromptEncoder enc(*tok, tokenizer::ChatTemplateKind::ChatML, tmpl, now);
  EXPECT_EQ(enc.template_tool_syntax(), want);
  for (const json& c : exp["cases"]) {
    if (!c.contains("tools")) continue;
    json body = {{"messages", c["messages"]}, {"tools", c["tools"]}};
    ParsedRequest p = parse_chat_json(body);
    ASSERT_TRUE(p.ok()) << p.error->message;
    ToolSyntax got = ToolSyntax::kWrapper;
    const std::string prompt = enc.render_chat_prompt(p.request, nullptr, nullptr, true, &got);
    EXPECT_EQ(prompt, c["prompt"].get<std::string>());
    EXPECT_EQ(got, want);
    // The same conversation without tools: no syntax, and the tools are not rendered.
    ParsedRequest none = parse_chat_json(json{{"messages", c["messages"]}, {"tools", c["tools"]}, {"tool_choice", "none"}});
    ASSERT_TRUE(none.ok());
    const std::string plain = enc.render_chat_prompt(none.request, nullptr, nullptr, true, &got);
    EXPECT_EQ(got, ToolSyntax::kWrapper);
    EXPECT_EQ(plain.find("Get the current weather"), std::string::npos) << plain;
  }
}

TEST(ToolSyntax, PromptWithToolsIsTheTemplatesRenderingHermes) { check_prompt("Qwen-Qwen2.5-7B-Instruct", ToolSyntax::kHermes); }
TEST(ToolSyntax, PromptWithToolsIsTheTemplatesRenderingLlama31) {
  check_prompt("meta-llama-Llama-3.1-8B-Instruct", ToolSyntax::kLlama3);
}
TEST(ToolSyntax, PromptWithToolsIsTheTemplatesRenderingMistral) {
  check_prompt("mistralai-Mistral-7B-Instruct-v0.3", ToolSyntax::kMistral);
}

TEST(ToolSyntax, TemplateWithToolsButNoSyntaxGetsTheWrapperInstructions) {
  auto tok = stories_tokenizer();
  ASSERT_TRUE(tok);
  const std::string name = "ibm-granite-granite-3.3-2B-Instruct";
  auto tmpl = std::make_shared<const tokenizer::JinjaChatTemplate>(slurp(kDir + name + ".jinja"), "<s>", "</s>");
  ASSERT_TRUE(tmpl->caps().supports_tools);
  PromptEncoder enc(*tok, tokenizer::ChatTemplateKind::ChatML, tmpl, 1764547200);
  const json tools = json::array({{{"type", "function"}, {"function", {{"name", "get_weather"}, {"description", "Weather here"}}}}});
  ParsedRequest p = parse_chat_json(json{{"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})}, {"tools", tools}});
  ASSERT_TRUE(p.ok());
  ToolSyntax got = ToolSyntax::kHermes;
  const std::string prompt = enc.render_chat_prompt(p.request, nullptr, nullptr, true, &got);
  EXPECT_EQ(got, ToolSyntax::kWrapper);
  EXPECT_NE(prompt.find("Weather here"), std::string::npos);  // the template rendered the tools
  EXPECT_NE(prompt.find(tool_syntax_instructions()), std::string::npos) << prompt;
}

// ---- grammar ⇄ parser, per syntax ---------------------------------------------------

const json kParams = json::parse(R"({"type": "object", "properties": {"city": {"type": "string", "maxLength": 4},
  "n": {"type": "integer"}, "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2}},
  "required": ["city", "n"], "additionalProperties": false})");

const json kFlag = json::parse(R"({"type": "object", "properties": {"v": {"type": "boolean"}}, "additionalProperties": false})");

ToolConfig two_tools(ToolSyntax s, const std::string& choice) {
  ToolConfig t;
  json body = {{"tools", json::array({{{"type", "function"}, {"function", {{"name", "get_weather"}, {"parameters", kParams}}}},
                                      {{"type", "function"}, {"function", {{"name", "noop"}, {"parameters", kFlag}}}}})},
               {"tool_choice", choice}};
  EXPECT_FALSE(parse_tools(body, t));
  t.syntax = s;
  return t;
}

/// Seeded random sentences of `gbnf` over single-byte tokens (token b = byte b, 256 = EOS):
/// each step a uniformly drawn allowed token, EOS taken with probability 1/4 once allowed.
std::vector<std::string> sample(const std::string& gbnf, int count, uint32_t seed) {
  auto g = grammar::parse_gbnf(gbnf);
  EXPECT_TRUE(g.ok()) << g.error();
  std::vector<std::string> pieces;
  for (int b = 0; b < 256; ++b) pieces.push_back(std::string(1, static_cast<char>(b)));
  pieces.push_back("");
  auto vocab = std::make_shared<grammar::TokenVocab>(pieces, std::vector<int32_t>{256}, 257);
  grammar::GrammarMatcher m(std::move(*g), vocab);
  std::mt19937 rng(seed);
  std::vector<std::string> out;
  for (int k = 0; k < count; ++k) {
    int32_t st = m.initial_state();
    std::string text;
    while (text.size() < 4000) {
      if (m.accepting(st) && rng() % 4 == 0) break;
      const uint32_t* mask = m.mask(st);
      std::vector<int> allowed;
      for (int b = 0; b < 256; ++b)
        if ((mask[b / 32] >> (b % 32)) & 1) allowed.push_back(b);
      if (allowed.empty()) break;
      const int b = allowed[rng() % allowed.size()];
      text += static_cast<char>(b);
      st = m.advance_byte(st, static_cast<uint8_t>(b));
      EXPECT_NE(st, grammar::GrammarMatcher::kDead);
    }
    EXPECT_TRUE(m.accepting(st)) << text;
    out.push_back(text);
  }
  return out;
}

void check_syntax(ToolSyntax s) {
  SCOPED_TRACE(tool_syntax_name(s));
  for (const char* choice : {"required", "auto"}) {
    const ToolConfig t = two_tools(s, choice);
    int with_calls = 0;
    for (const std::string& text : sample(tools_grammar(t), 40, 7)) {
      const ParsedToolOutput p = parse_tool_output(text, "call_x", s);
      if (p.content) {  // auto: plain text, which never starts like a call
        EXPECT_STREQ(choice, "auto");
        EXPECT_NE(text[0], tool_syntax_form(s).trigger());
        EXPECT_TRUE(p.calls.empty());
        continue;
      }
      ++with_calls;
      ASSERT_FALSE(p.calls.empty()) << text;
      if (!tool_syntax_form(s).parallel) {
        EXPECT_EQ(p.calls.size(), 1u);
      }
      for (const json& c : p.calls) {
        const std::string name = c["function"]["name"];
        EXPECT_TRUE(name == "get_weather" || name == "noop") << text;
        json args;
        ASSERT_NO_THROW(args = json::parse(c["function"]["arguments"].get<std::string>())) << text;
        ASSERT_TRUE(args.is_object()) << text;
        if (name == "get_weather") {
          ASSERT_TRUE(args["city"].is_string()) << text;
          size_t chars = 0;  // maxLength counts code points
          for (unsigned char ch : args["city"].get<std::string>()) chars += (ch & 0xC0) != 0x80;
          EXPECT_LE(chars, 4u) << text;
          EXPECT_TRUE(args["n"].is_number_integer()) << text;
        }
      }
      // Cut anywhere: the calls begun so far (names in order), never the syntax as content.
      for (size_t cut = 1; cut < text.size(); ++cut) {
        const ParsedToolOutput q = parse_tool_output(text.substr(0, cut), "call_x", s);
        ASSERT_FALSE(q.content) << text.substr(0, cut);
        ASSERT_LE(q.calls.size(), p.calls.size());
        for (size_t i = 0; i < q.calls.size(); ++i) EXPECT_EQ(q.calls[i]["function"]["name"], p.calls[i]["function"]["name"]);
      }
    }
    // auto: a uniformly drawn first byte is rarely the trigger, so calls are rare there.
    if (std::string(choice) == "required") {
      EXPECT_EQ(with_calls, 40);
    }
  }
}

TEST(ToolSyntax, GrammarOutputsParseIntoDeclaredCallsHermes) { check_syntax(ToolSyntax::kHermes); }
TEST(ToolSyntax, GrammarOutputsParseIntoDeclaredCallsLlama3) { check_syntax(ToolSyntax::kLlama3); }
TEST(ToolSyntax, GrammarOutputsParseIntoDeclaredCallsMistral) { check_syntax(ToolSyntax::kMistral); }

TEST(ToolSyntax, WhatTheTemplateWritesForACallParsesBack) {
  // The assistant tool-call turns of the reference renderings (case d above).
  const std::pair<ToolSyntax, std::string> cases[] = {
      {ToolSyntax::kHermes, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>"},
      {ToolSyntax::kLlama3, "{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Paris\", \"unit\": \"c\"}}"},
      {ToolSyntax::kMistral, "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\", \"unit\": \"c\"}, \"id\": \"call12345\"}] "},
  };
  for (const auto& [s, text] : cases) {
    const ParsedToolOutput p = parse_tool_output(text, "c", s);
    EXPECT_FALSE(p.content) << text;
    ASSERT_EQ(p.calls.size(), 1u) << text;
    EXPECT_EQ(p.calls[0]["function"]["name"], "get_weather");
    EXPECT_EQ(json::parse(p.calls[0]["function"]["arguments"].get<std::string>()), json::parse(R"({"location":"Paris","unit":"c"})"));
  }
  // A cut call: its arguments as written so far.
  const ParsedToolOutput cut = parse_tool_output("[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"a\": [1,", "c", ToolSyntax::kMistral);
  ASSERT_EQ(cut.calls.size(), 1u);
  EXPECT_EQ(cut.calls[0]["function"]["arguments"], "{\"a\": [1,");
  EXPECT_FALSE(cut.content);
}

// An agent loop sends the calls it got back with the tool's answer. Mistral Nemo's template
// raises on a call id that is not 9 letters and digits ("call_<hex>_0_0" made the server
// fall back to another prompt format and call syntax for the rest of the conversation).
TEST(ToolSyntax, MistralCallIdsComeBackThroughNemosTemplate) {
  const std::string text = "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}, "
                           "{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Rome\"}}]";
  const ParsedToolOutput p = parse_tool_output(text, tool_call_id_prefix("chatcmpl-bc4814b920b0fc0c5a47b793", 0), ToolSyntax::kMistral);
  ASSERT_EQ(p.calls.size(), 2u);
  for (const json& c : p.calls) {
    const std::string id = c["id"];
    EXPECT_EQ(id.size(), 9u) << id;
    EXPECT_TRUE(std::all_of(id.begin(), id.end(), [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)); })) << id;
  }
  EXPECT_NE(p.calls[0]["id"], p.calls[1]["id"]);
  EXPECT_EQ(parse_tool_output(text, tool_call_id_prefix("chatcmpl-bc4814b920b0fc0c5a47b793", 0), ToolSyntax::kMistral).calls,
            p.calls) << "the same response gives the same ids (streamed and not)";
  EXPECT_NE(parse_tool_output(text, tool_call_id_prefix("chatcmpl-bc4814b920b0fc0c5a47b793", 1), ToolSyntax::kMistral).calls[0]["id"],
            p.calls[0]["id"]) << "another choice, other ids";

  auto tok = stories_tokenizer();
  ASSERT_TRUE(tok);
  const std::string name = "mistralai-Mistral-Nemo-Instruct-2407";
  auto tmpl = std::make_shared<const tokenizer::JinjaChatTemplate>(slurp(kDir + name + ".jinja"), "<s>", "</s>");
  PromptEncoder enc(*tok, tokenizer::ChatTemplateKind::ChatML, tmpl, 1764547200);
  const json tools = json::array({{{"type", "function"},
                                   {"function", {{"name", "get_weather"}, {"parameters", {{"type", "object"},
                                     {"properties", {{"location", {{"type", "string"}}}}}}}}}}});
  json messages = json::array({{{"role", "user"}, {"content", "Weather in Paris and Rome?"}},
                               {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", p.calls}}});
  for (const json& c : p.calls) messages.push_back({{"role", "tool"}, {"tool_call_id", c["id"]}, {"content", "20 C"}});
  ParsedRequest req = parse_chat_json(json{{"messages", messages}, {"tools", tools}});
  ASSERT_TRUE(req.ok()) << req.error->message;
  ToolSyntax got = ToolSyntax::kWrapper;
  const std::string prompt = enc.render_chat_prompt(req.request, nullptr, nullptr, true, &got);
  EXPECT_EQ(got, ToolSyntax::kMistral) << prompt;
  EXPECT_NE(prompt.find("[TOOL_RESULTS]"), std::string::npos) << prompt;
  EXPECT_NE(prompt.find(p.calls[1]["id"].get<std::string>()), std::string::npos) << prompt;

  // History with ids from elsewhere (OpenAI's call_..., another server's): mapped to 9
  // letters and digits, the call and its answer alike, so the template still renders.
  json foreign = messages;
  foreign[1]["tool_calls"][0]["id"] = "call_abc123def";
  foreign[1]["tool_calls"][1]["id"] = "x";
  foreign[2]["tool_call_id"] = "call_abc123def";
  foreign[3]["tool_call_id"] = "x";
  ParsedRequest freq = parse_chat_json(json{{"messages", foreign}, {"tools", tools}});
  ASSERT_TRUE(freq.ok()) << freq.error->message;
  got = ToolSyntax::kWrapper;
  const std::string fprompt = enc.render_chat_prompt(freq.request, nullptr, nullptr, true, &got);
  EXPECT_EQ(got, ToolSyntax::kMistral) << fprompt;
  const std::string mapped = mistral_call_id("call_abc123def");
  EXPECT_EQ(mapped.size(), 9u);
  EXPECT_EQ(mistral_call_id(mapped), mapped);
  EXPECT_EQ(mistral_call_id("abcDEF123"), "abcDEF123") << "a valid id is kept";
  size_t n = 0;
  for (size_t at = fprompt.find(mapped); at != std::string::npos; at = fprompt.find(mapped, at + 1)) ++n;
  EXPECT_EQ(n, 2u) << "the call and its result: " << fprompt;
}

// A whole answer that became tool calls returns no logprobs (the text they covered is not
// returned; a streamed call has none either); a text answer keeps them.
TEST(ToolSyntax, ACallAnswerHasNoLogprobsATextAnswerKeepsThem) {
  const json lp = {{"content", json::array({{{"token", "<"}, {"logprob", -0.1}}})}};
  json body = {{"id", "chatcmpl-1"},
               {"choices", json::array({{{"index", 0}, {"finish_reason", "stop"}, {"logprobs", lp},
                                         {"message", {{"role", "assistant"},
                                                      {"content", "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>"}}}},
                                        {{"index", 1}, {"finish_reason", "stop"}, {"logprobs", lp},
                                         {"message", {{"role", "assistant"}, {"content", "plain text"}}}}})}};
  apply_tool_calls(body, ToolSyntax::kHermes);
  EXPECT_EQ(body["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_TRUE(body["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(body["choices"][1]["logprobs"], lp);
}

}  // namespace
}  // namespace pdserve::server
