// `pdserve serve --chat-template-file F --chat-template-date D` end to end: POST
// /apply-template returns, byte for byte, what llama.cpp's server returned for the same
// model (stories260K), template and conversation (../shared/templates/*.expected.json,
// with tools in case d); a chat completion tokenizes that same prompt (its
// usage.prompt_tokens equals the count of the rendered prompt's tokens + BOS); bad input
// gets 400s and a bad flag a one-line error.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "support/server_process.h"
#include "support/pdserve_bin.h"

namespace pdserve::testing {
namespace {

using nlohmann::ordered_json;

ordered_json load_expected(const std::string& name) {
  std::ifstream f("../shared/templates/" + name + ".expected.json");
  std::stringstream ss;
  ss << f.rdbuf();
  return ordered_json::parse(ss.str());
}

void check_template(const std::string& name) {
  SCOPED_TRACE(name);
  ordered_json exp = load_expected(name);
  ServerProcess srv({"--chat-template-file", "../shared/templates/" + exp["template"].get<std::string>(),
                     "--chat-template-date", exp["render_date_utc"].get<std::string>()});
  ASSERT_TRUE(srv.ready()) << srv.error();
  auto cli = srv.client();
  for (const auto& c : exp["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    ordered_json body = {{"messages", c["messages"]}, {"add_generation_prompt", c["add_generation_prompt"]}};
    if (c.contains("tools")) body["tools"] = c["tools"];
    auto res = cli.Post("/apply-template", body.dump(), "application/json");
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    EXPECT_EQ(ordered_json::parse(res->body)["prompt"].get<std::string>(), c["prompt"].get<std::string>());
  }
}

TEST(ChatTemplateE2E, ApplyTemplateMatchesReferenceQwen25WithTools) { check_template("Qwen-Qwen2.5-7B-Instruct"); }
TEST(ChatTemplateE2E, ApplyTemplateMatchesReferenceLlama31Dated) { check_template("meta-llama-Llama-3.1-8B-Instruct"); }
TEST(ChatTemplateE2E, ApplyTemplateMatchesReferenceGemma2NoSystemRole) { check_template("google-gemma-2-2b-it"); }

TEST(ChatTemplateE2E, ChatCompletionUsesTheTemplatePrompt) {
  ServerProcess srv({"--chat-template-file", "../shared/templates/HuggingFaceH4-zephyr-7b-beta.jinja"});
  ASSERT_TRUE(srv.ready()) << srv.error();
  auto cli = srv.client();
  const ordered_json msgs = ordered_json::array({{{"role", "user"}, {"content", "Hello!"}}});
  auto res = cli.Post("/apply-template", ordered_json{{"messages", msgs}}.dump(), "application/json");
  ASSERT_TRUE(res && res->status == 200);
  const std::string prompt = ordered_json::parse(res->body)["prompt"];
  EXPECT_EQ(prompt, load_expected("HuggingFaceH4-zephyr-7b-beta")["cases"][0]["prompt"].get<std::string>());
  ASSERT_NE(prompt.find("</s>"), std::string::npos);
  // The same text as a completion prompt (no special tokens in it but </s>, which
  // completions read as text) vs the chat request: the chat prompt tokenizes </s> as the
  // EOS token, so it has fewer tokens than the plain-text reading.
  auto chat = cli.Post("/v1/chat/completions", ordered_json{{"messages", msgs}, {"max_tokens", 1}}.dump(),
                       "application/json");
  ASSERT_TRUE(chat && chat->status == 200) << (chat ? chat->body : "");
  auto comp = cli.Post("/v1/completions", ordered_json{{"prompt", prompt}, {"max_tokens", 1}}.dump(),
                       "application/json");
  ASSERT_TRUE(comp && comp->status == 200);
  const int chat_tokens = ordered_json::parse(chat->body)["usage"]["prompt_tokens"];
  const int text_tokens = ordered_json::parse(comp->body)["usage"]["prompt_tokens"];
  EXPECT_GT(chat_tokens, 5);
  EXPECT_LT(chat_tokens, text_tokens);

  auto bad = cli.Post("/apply-template", R"({"messages": "hi"})", "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_NE(bad->body.find("messages"), std::string::npos);
}

// `--chat-template-kwargs` end to end: the gpt-oss template on stories260K at the
// references' date renders every case of tests/data/chat_kwargs/cases.json as llama.cpp did,
// with the server's default reasoning_effort where a case gives none; a chat completion's
// prompt follows (a longer effort word, more prompt tokens).
TEST(ChatTemplateE2E, ServerTemplateKwargsAreEveryRequestsDefault) {
  std::ifstream f("tests/data/chat_kwargs/cases.json");
  std::stringstream ss;
  ss << f.rdbuf();
  const ordered_json refs = ordered_json::parse(ss.str());
  ServerProcess srv({"--chat-template-file", "../shared/templates/openai-gpt-oss-120b.jinja", "--chat-template-date",
                     refs["render_date_utc"].get<std::string>(), "--chat-template-kwargs", R"({"reasoning_effort": "high"})"});
  ASSERT_TRUE(srv.ready()) << srv.error();
  auto cli = srv.client();
  int checked = 0;
  for (const auto& c : refs["cases"]) {
    if (c["template"] != "openai-gpt-oss-120b") continue;
    const bool own = c.contains("reasoning_effort") || !c.value("chat_template_kwargs", ordered_json::object()).empty();
    ordered_json body = {{"messages", c["messages"]}};
    for (const char* k : {"chat_template_kwargs", "reasoning_effort"})
      if (c.contains(k)) body[k] = c[k];
    auto res = cli.Post("/apply-template", body.dump(), "application/json");
    ASSERT_TRUE(res && res->status == 200) << (res ? res->body : "");
    const std::string prompt = ordered_json::parse(res->body)["prompt"];
    if (own) {
      EXPECT_EQ(prompt, c["prompt"].get<std::string>()) << body.dump();
      ++checked;
    } else {  // the server's default: "high"
      EXPECT_NE(prompt.find("Reasoning: high"), std::string::npos) << prompt;
    }
  }
  EXPECT_GE(checked, 6);
  auto tokens = [&](const char* effort) {
    ordered_json body = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 1}, {"reasoning_effort", effort}};
    auto r = cli.Post("/v1/chat/completions", body.dump(), "application/json");
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "");
    return r && r->status == 200 ? ordered_json::parse(r->body)["usage"]["prompt_tokens"].get<int>() : -1;
  };
  EXPECT_GT(tokens("medium"), tokens("low"));
  auto bad = cli.Post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": [1]})",
                      "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_NE(bad->body.find("chat_template_kwargs"), std::string::npos);
}

TEST(ChatTemplateE2E, BadDateFlagIsAOneLineError) {
  std::string cmd = testing::pdserve_bin() + " serve --model " + kStoriesModel +
                    " --chat-template-date 2026-13-45 --port 0 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof buf, p)) out += buf;
  int rc = pclose(p);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("expected a date YYYY-MM-DD"), std::string::npos) << out;
}

}  // namespace
}  // namespace pdserve::testing
