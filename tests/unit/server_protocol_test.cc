// Request parsing/validation and response shaping of the OpenAI API layer, as pure
// functions (no sockets).
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>
#include <string>

#include "server/api_error.h"
#include "server/auth.h"
#include "server/generation.h"
#include "server/info_json.h"
#include "server/json_util.h"
#include "server/openai_protocol.h"
#include "server/openai_response.h"
#include "server/sse.h"
#include "support/fake_engine.h"

namespace pdserve::server {
namespace {

using engine::FinishReason;
using engine::TokenLogprob;

ParsedRequest completion(const json& body) { return parse_completion_json(body); }
ParsedRequest chat(const json& body) { return parse_chat_json(body); }

json user_messages(const std::string& text = "hi") {
  return json::array({{{"role", "user"}, {"content", text}}});
}

/// Expects a 400 (or `status`) with `param` (empty ⇒ null) and a message containing `msg`.
void expect_error(const ParsedRequest& p, const std::string& param, const std::string& msg,
                  int status = 400) {
  ASSERT_FALSE(p.ok()) << "expected an error mentioning '" << msg << "'";
  EXPECT_EQ(p.error->status, status);
  if (param.empty()) {
    EXPECT_FALSE(p.error->param.has_value()) << *p.error->param;
  } else {
    ASSERT_TRUE(p.error->param.has_value()) << p.error->message;
    EXPECT_EQ(*p.error->param, param);
  }
  EXPECT_NE(p.error->message.find(msg), std::string::npos) << p.error->message;
  EXPECT_EQ(p.error->type, "invalid_request_error");
}

// ---- /v1/completions parsing --------------------------------------------------------------

TEST(ServerProtocol, CompletionDefaults) {
  auto p = completion({{"prompt", "Once upon a time"}});
  ASSERT_TRUE(p.ok()) << p.error->message;
  const auto& r = p.request;
  EXPECT_EQ(r.endpoint, Endpoint::Completions);
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_FALSE(r.prompts[0].is_tokens);
  EXPECT_EQ(r.prompts[0].text, "Once upon a time");
  EXPECT_EQ(r.params.max_tokens, 16);
  EXPECT_FLOAT_EQ(r.params.temperature, 1.0f);
  EXPECT_FLOAT_EQ(r.params.top_p, 1.0f);
  EXPECT_EQ(r.params.top_k, 0);
  EXPECT_FALSE(r.params.seed.has_value());
  EXPECT_TRUE(r.params.stop.empty());
  EXPECT_EQ(r.params.top_logprobs, -1);
  EXPECT_FALSE(r.params.ignore_eos);
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.include_usage);
  EXPECT_EQ(r.n, 1);
  EXPECT_TRUE(r.model.empty());
  EXPECT_EQ(r.num_choices(), 1);
}

TEST(ServerProtocol, CompletionAllFields) {
  auto p = completion({{"model", "m"},
                       {"prompt", json::array({"abc"})},
                       {"max_tokens", 7},
                       {"temperature", 0},
                       {"top_p", 0.5},
                       {"top_k", 40},
                       {"seed", 1234},
                       {"stop", json::array({"\n", "END"})},
                       {"stream", true},
                       {"stream_options", {{"include_usage", true}}},
                       {"logprobs", 3},
                       {"echo", false},
                       {"n", 2},
                       {"ignore_eos", true},
                       {"user", "u1"},
                       {"presence_penalty", 0},
                       {"frequency_penalty", 0.0}});
  ASSERT_TRUE(p.ok()) << p.error->message;
  const auto& r = p.request;
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].text, "abc");
  EXPECT_EQ(r.params.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.params.temperature, 0.0f);
  EXPECT_FLOAT_EQ(r.params.top_p, 0.5f);
  EXPECT_EQ(r.params.top_k, 40);
  ASSERT_TRUE(r.params.seed.has_value());
  EXPECT_EQ(*r.params.seed, 1234u);
  EXPECT_EQ(r.params.stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.params.top_logprobs, 3);
  EXPECT_TRUE(r.want_logprobs());
  EXPECT_EQ(r.n, 2);
  EXPECT_EQ(r.num_choices(), 2);
  EXPECT_TRUE(r.params.ignore_eos);
  EXPECT_EQ(r.user, "u1");
}

TEST(ServerProtocol, CompletionPromptForms) {
  auto tokens = completion({{"prompt", json::array({1, 2, 3})}});
  ASSERT_TRUE(tokens.ok());
  ASSERT_EQ(tokens.request.prompts.size(), 1u);
  EXPECT_TRUE(tokens.request.prompts[0].is_tokens);
  EXPECT_EQ(tokens.request.prompts[0].tokens, (std::vector<int32_t>{1, 2, 3}));

  auto batch = completion({{"prompt", json::array({json::array({1, 2}), json::array({3})})}});
  ASSERT_TRUE(batch.ok());
  ASSERT_EQ(batch.request.prompts.size(), 2u);
  EXPECT_EQ(batch.request.prompts[1].tokens, (std::vector<int32_t>{3}));

  auto texts = completion({{"prompt", json::array({"a", "b"})}, {"n", 3}});
  ASSERT_TRUE(texts.ok());
  EXPECT_EQ(texts.request.prompts.size(), 2u);
  EXPECT_EQ(texts.request.num_choices(), 6);

  auto empty_string = completion({{"prompt", ""}});
  EXPECT_TRUE(empty_string.ok());  // BOS alone is a valid prompt; encode() decides
}

TEST(ServerProtocol, CompletionPromptErrors) {
  expect_error(completion(json::object()), "prompt", "Missing required parameter: 'prompt'");
  expect_error(completion({{"prompt", nullptr}}), "prompt", "Missing required parameter");
  expect_error(completion({{"prompt", 5}}), "prompt", "Invalid type for 'prompt'");
  expect_error(completion({{"prompt", json::array()}}), "prompt", "empty");
  expect_error(completion({{"prompt", json::array({"a", 1})}}), "prompt", "Invalid type");
  expect_error(completion({{"prompt", json::array({1, "a"})}}), "prompt", "Invalid type");
  expect_error(completion({{"prompt", json::array({-1})}}), "prompt", "out of range");
  expect_error(completion({{"prompt", json::array({json::array()})}}), "prompt", "empty");
  expect_error(completion({{"prompt", {{"text", "x"}}}}), "prompt", "Invalid type");
}

TEST(ServerProtocol, InvalidJsonAndBody) {
  auto bad = parse_completion_request(std::string_view("{\"prompt\": "));
  expect_error(bad, "", "could not parse the JSON body");
  auto bad_chat = parse_chat_request(std::string_view("not json"));
  expect_error(bad_chat, "", "could not parse the JSON body");
  expect_error(completion(json::array({1})), "", "must be a JSON object");
  auto invalid_utf8 = parse_completion_request(std::string_view("{\"prompt\": \"\xff\"}"));
  expect_error(invalid_utf8, "", "could not parse");
  auto ok = parse_completion_request(std::string_view(R"({"prompt": "x", "max_tokens": 2})"));
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok.request.params.max_tokens, 2);
}

TEST(ServerProtocol, MaxTokens) {
  expect_error(completion({{"prompt", "x"}, {"max_tokens", 0}}), "max_tokens", "expected an integer >= 1");
  expect_error(completion({{"prompt", "x"}, {"max_tokens", -5}}), "max_tokens", ">= 1");
  expect_error(completion({{"prompt", "x"}, {"max_tokens", "16"}}), "max_tokens",
               "Invalid type for 'max_tokens': expected an integer, but got a string instead.");
  expect_error(completion({{"prompt", "x"}, {"max_tokens", 1.5}}), "max_tokens", "expected an integer");
  auto integral_float = completion({{"prompt", "x"}, {"max_tokens", 8.0}});
  ASSERT_TRUE(integral_float.ok());
  EXPECT_EQ(integral_float.request.params.max_tokens, 8);
  auto null_tokens = completion({{"prompt", "x"}, {"max_tokens", nullptr}});
  ASSERT_TRUE(null_tokens.ok());
  EXPECT_EQ(null_tokens.request.params.max_tokens, -1);
  auto huge = completion({{"prompt", "x"}, {"max_tokens", 1LL << 40}});
  ASSERT_TRUE(huge.ok());
  EXPECT_EQ(huge.request.params.max_tokens, std::numeric_limits<int>::max());
}

TEST(ServerProtocol, SamplingRanges) {
  expect_error(completion({{"prompt", "x"}, {"temperature", -0.1}}), "temperature", "between 0 and 2");
  expect_error(completion({{"prompt", "x"}, {"temperature", 2.5}}), "temperature", "between 0 and 2");
  expect_error(completion({{"prompt", "x"}, {"temperature", "hot"}}), "temperature", "expected a number");
  EXPECT_TRUE(completion({{"prompt", "x"}, {"temperature", 2}}).ok());
  expect_error(completion({{"prompt", "x"}, {"top_p", 0}}), "top_p", "greater than 0");
  expect_error(completion({{"prompt", "x"}, {"top_p", 1.01}}), "top_p", "at most 1");
  EXPECT_TRUE(completion({{"prompt", "x"}, {"top_p", 1}}).ok());
  expect_error(completion({{"prompt", "x"}, {"top_k", -2}}), "top_k", "Invalid value");
  expect_error(completion({{"prompt", "x"}, {"top_k", 1.5}}), "top_k", "expected an integer");
  auto k_off = completion({{"prompt", "x"}, {"top_k", -1}});
  ASSERT_TRUE(k_off.ok());
  EXPECT_EQ(k_off.request.params.top_k, 0);
  auto seed = completion({{"prompt", "x"}, {"seed", -1}});
  ASSERT_TRUE(seed.ok());
  EXPECT_EQ(*seed.request.params.seed, std::numeric_limits<uint64_t>::max());
  // Seeds from 2^63 up are their own uint64 (no clamping to 2^63 - 1): distinct seeds, distinct
  // streams; 2^64 - 1 is the same seed as -1.
  for (uint64_t big : {uint64_t{1} << 63, (uint64_t{1} << 63) + 1, uint64_t{10000000000000000000u}, std::numeric_limits<uint64_t>::max()}) {
    auto b = completion({{"prompt", "x"}, {"seed", big}});
    ASSERT_TRUE(b.ok()) << big;
    EXPECT_EQ(*b.request.params.seed, big);
  }
  auto as_float = completion({{"prompt", "x"}, {"seed", 1e19}});  // an integral float in that range too
  ASSERT_TRUE(as_float.ok());
  EXPECT_EQ(*as_float.request.params.seed, uint64_t{10000000000000000000u});
  expect_error(completion({{"prompt", "x"}, {"seed", "7"}}), "seed", "expected an integer");
  expect_error(completion({{"prompt", "x"}, {"stream", 1}}), "stream", "expected a boolean");
  expect_error(completion({{"prompt", "x"}, {"ignore_eos", "yes"}}), "ignore_eos", "boolean");
  expect_error(completion({{"prompt", "x"}, {"user", 5}}), "user", "expected a string");
  expect_error(completion({{"prompt", "x"}, {"model", 5}}), "model", "expected a string");
  // OpenAI's penalties and logit_bias: ranges as OpenAI's, token ids as keys.
  auto pen = completion({{"prompt", "x"}, {"presence_penalty", 0.5}, {"frequency_penalty", -1.25}});
  ASSERT_TRUE(pen.ok());
  EXPECT_FLOAT_EQ(pen.request.params.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(pen.request.params.frequency_penalty, -1.25f);
  expect_error(completion({{"prompt", "x"}, {"presence_penalty", 3}}), "presence_penalty", "between -2 and 2");
  expect_error(completion({{"prompt", "x"}, {"frequency_penalty", -2.5}}), "frequency_penalty", "between -2 and 2");
  expect_error(completion({{"prompt", "x"}, {"frequency_penalty", "1"}}), "frequency_penalty", "expected a number");
  auto bias = completion({{"prompt", "x"}, {"logit_bias", {{"1", 5}, {"20", -100}, {"7", 0}}}});
  ASSERT_TRUE(bias.ok());
  EXPECT_EQ(bias.request.params.logit_bias, (std::vector<std::pair<int32_t, float>>{{1, 5.f}, {20, -100.f}, {7, 0.f}}))
      << "0 biases are kept, so their ids are checked against the vocabulary";
  // One token, one bias: "0383" would add to "383" (+700 from seven spellings).
  expect_error(completion({{"prompt", "x"}, {"logit_bias", {{"383", 100}, {"0383", 100}}}}), "logit_bias", "no leading zeros");
  EXPECT_TRUE(completion({{"prompt", "x"}, {"logit_bias", {{"0", 1}}}}).ok());
  // JSON text inside a string (a schema as text, tool-call arguments) meets the body's
  // bounds too: 200,000 keys took 50 s of CPU to parse.
  std::string wide = "{";
  for (int i = 0; i < 200000; ++i) wide += (i ? ",\"k" : "\"k") + std::to_string(i) + "\": 0";
  wide += "}";
  expect_error(completion({{"prompt", "x"}, {"guided_json", wide}}), "guided_json", "more than 10000 members");
  json calls = json::array({{{"id", "c"}, {"type", "function"}, {"function", {{"name", "f"}, {"arguments", wide}}}}});
  json msgs = json::array({{{"role", "user"}, {"content", "hi"}}, {{"role", "assistant"}, {"tool_calls", calls}}});
  expect_error(chat({{"messages", msgs}}), "messages[1].tool_calls[0].function.arguments", "more than 10000 members");
  expect_error(completion({{"prompt", "x"}, {"logit_bias", {{"1", 101}}}}), "logit_bias", "between -100 and 100");
  expect_error(completion({{"prompt", "x"}, {"logit_bias", {{"abc", 0}}}}), "logit_bias", "not a token id");
  expect_error(completion({{"prompt", "x"}, {"logit_bias", {{"-1", 1}}}}), "logit_bias", "not a token id");
  expect_error(completion({{"prompt", "x"}, {"logit_bias", {{"99999999999", 1}}}}), "logit_bias", "not a token id");
  // vLLM / llama.cpp sampler extensions: refused unless neutral, never silently ignored.
  // vLLM's and llama.cpp's sampler extensions: the repetition penalty (vLLM's over the whole
  // sequence, llama.cpp's over the last repeat_last_n = 64 tokens) and min_p.
  auto vllm = completion({{"prompt", "x"}, {"repetition_penalty", 1.1}, {"min_p", 0.05}});
  ASSERT_TRUE(vllm.ok());
  EXPECT_FLOAT_EQ(vllm.request.params.repetition_penalty, 1.1f);
  EXPECT_EQ(vllm.request.params.repetition_last_n, 0);
  EXPECT_FLOAT_EQ(vllm.request.params.min_p, 0.05f);
  auto llama = completion({{"prompt", "x"}, {"repeat_penalty", 1.3}});
  ASSERT_TRUE(llama.ok());
  EXPECT_FLOAT_EQ(llama.request.params.repetition_penalty, 1.3f);
  EXPECT_EQ(llama.request.params.repetition_last_n, 64);
  auto window = completion({{"prompt", "x"}, {"repeat_penalty", 1.3}, {"repeat_last_n", 16}});
  ASSERT_TRUE(window.ok());
  EXPECT_EQ(window.request.params.repetition_last_n, 16);
  auto whole = completion({{"prompt", "x"}, {"repeat_penalty", 1.3}, {"repeat_last_n", -1}});
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole.request.params.repetition_last_n, 0);
  auto none = completion({{"prompt", "x"}, {"repeat_penalty", 1.3}, {"repeat_last_n", 0}});
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none.request.params.adjusts_logits()) << "llama.cpp: a window of 0 turns it off";
  // Both names with one value: vLLM's window (helper-71); 1 (off, llama.cpp's default) beside the other is no conflict.
  auto both = completion({{"prompt", "x"}, {"repetition_penalty", 1.2}, {"repeat_penalty", 1.2}});
  ASSERT_TRUE(both.ok());
  EXPECT_EQ(both.request.params.repetition_last_n, 0);
  for (const json& b : {json{{"prompt", "x"}, {"repetition_penalty", 1.3}, {"repeat_penalty", 1.0}},
                        json{{"prompt", "x"}, {"repetition_penalty", 1.0}, {"repeat_penalty", 1.3}}}) {
    auto one = completion(b);
    ASSERT_TRUE(one.ok()) << b.dump();
    EXPECT_FLOAT_EQ(one.request.params.repetition_penalty, 1.3f) << b.dump();
    EXPECT_EQ(one.request.params.repetition_last_n, b["repetition_penalty"] == 1.3 ? 0 : 64) << b.dump();
  }
  expect_error(completion({{"prompt", "x"}, {"repetition_penalty", 1.2}, {"repeat_penalty", 1.1}}), "repeat_penalty", "give one");
  expect_error(completion({{"prompt", "x"}, {"repetition_penalty", 0}}), "repetition_penalty", "between 0.001 and 100");
  expect_error(completion({{"prompt", "x"}, {"repeat_penalty", 1e9}}), "repeat_penalty", "between 0.001 and 100");
  expect_error(completion({{"prompt", "x"}, {"repeat_last_n", -2}}), "repeat_last_n", "-1");
  expect_error(completion({{"prompt", "x"}, {"min_p", 1.5}}), "min_p", "between 0 and 1");
  expect_error(completion({{"prompt", "x"}, {"min_p", "0.1"}}), "min_p", "expected a number");
  expect_error(completion({{"prompt", "x"}, {"typical_p", 0.9}}), "typical_p", "not supported");
  auto neutral = completion({{"prompt", "x"}, {"min_p", 0}, {"repetition_penalty", 1}, {"typical_p", 1.0}});
  ASSERT_TRUE(neutral.ok());
  EXPECT_FALSE(neutral.request.params.adjusts_logits());
  EXPECT_TRUE(completion({{"prompt", "x"}, {"logit_bias", json::object()}}).ok());
  EXPECT_TRUE(completion({{"prompt", "x"}, {"logit_bias", {{"5", 0}, {"7", 0.0}}}}).ok());
  expect_error(completion({{"prompt", "x"}, {"logit_bias", {{"5", "0"}}}}), "logit_bias", "between -100 and 100");
}

TEST(ServerProtocol, StopStrings) {
  auto one = completion({{"prompt", "x"}, {"stop", "END"}});
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one.request.params.stop, std::vector<std::string>{"END"});
  auto none = completion({{"prompt", "x"}, {"stop", nullptr}});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none.request.params.stop.empty());
  auto empty_dropped = completion({{"prompt", "x"}, {"stop", json::array({"", "a"})}});
  ASSERT_TRUE(empty_dropped.ok());
  EXPECT_EQ(empty_dropped.request.params.stop, std::vector<std::string>{"a"});
  expect_error(completion({{"prompt", "x"}, {"stop", json::array({"a", "b", "c", "d", "e"})}}), "stop",
               "maximum length 4");
  expect_error(completion({{"prompt", "x"}, {"stop", json::array({"a", 1})}}), "stop", "Invalid type");
  expect_error(completion({{"prompt", "x"}, {"stop", 3}}), "stop", "Invalid type");
}

TEST(ServerProtocol, CompletionLogprobsEchoN) {
  expect_error(completion({{"prompt", "x"}, {"logprobs", 6}}), "logprobs", "between 0 and 5");
  expect_error(completion({{"prompt", "x"}, {"logprobs", -1}}), "logprobs", "between 0 and 5");
  expect_error(completion({{"prompt", "x"}, {"logprobs", true}}), "logprobs", "expected an integer");
  auto zero = completion({{"prompt", "x"}, {"logprobs", 0}});
  ASSERT_TRUE(zero.ok());
  EXPECT_EQ(zero.request.params.top_logprobs, 0);
  auto null_lp = completion({{"prompt", "x"}, {"logprobs", nullptr}});
  ASSERT_TRUE(null_lp.ok());
  EXPECT_EQ(null_lp.request.params.top_logprobs, -1);

  expect_error(completion({{"prompt", "x"}, {"echo", true}}), "echo", "not supported");
  expect_error(completion({{"prompt", "x"}, {"suffix", "s"}}), "suffix", "not supported");
  expect_error(completion({{"prompt", "x"}, {"best_of", 3}}), "best_of", "not supported");
  // Chat refuses them too (they were ignored there: a vLLM client asking chat to echo got
  // another answer and no error); at their neutral values they pass.
  expect_error(chat({{"messages", user_messages()}, {"echo", true}}), "echo", "not supported");
  expect_error(chat({{"messages", user_messages()}, {"suffix", "s"}}), "suffix", "not supported");
  expect_error(chat({{"messages", user_messages()}, {"best_of", 2}}), "best_of", "not supported");
  EXPECT_TRUE(chat({{"messages", user_messages()}, {"echo", false}, {"suffix", ""}, {"best_of", 1}}).ok());
  expect_error(completion({{"prompt", "x"}, {"n", 0}}), "n", "between 1 and 16");
  expect_error(completion({{"prompt", "x"}, {"n", 17}}), "n", "between 1 and 16");
  json many = json::array();
  for (int i = 0; i < 5; ++i) many.push_back("p");
  expect_error(completion({{"prompt", many}, {"n", 16}}), "n", "at most 64");
  expect_error(completion({{"prompt", "x"}, {"stream_options", {{"include_usage", true}}}}),
               "stream_options", "only allowed when 'stream' is enabled");
  expect_error(completion({{"prompt", "x"}, {"stream", true}, {"stream_options", 1}}),
               "stream_options", "expected an object");
  expect_error(completion({{"prompt", "x"}, {"stream", true}, {"stream_options", {{"include_usage", 1}}}}),
               "stream_options.include_usage", "expected a boolean");
}

TEST(ServerProtocol, ModelCheck) {
  auto absent = completion({{"prompt", "x"}});
  EXPECT_FALSE(check_model(absent.request, "stories").has_value());
  auto same = completion({{"prompt", "x"}, {"model", "stories"}});
  EXPECT_FALSE(check_model(same.request, "stories").has_value());
  auto other = completion({{"prompt", "x"}, {"model", "gpt-4"}});
  auto err = check_model(other.request, "stories");
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->status, 404);
  EXPECT_EQ(err->code.value_or(""), "model_not_found");
  EXPECT_EQ(err->param.value_or(""), "model");
  EXPECT_NE(err->message.find("'gpt-4'"), std::string::npos);
}

// ---- /v1/chat/completions parsing -----------------------------------------------------

TEST(ServerProtocol, ChatDefaults) {
  auto p = chat({{"messages", user_messages("hello")}});
  ASSERT_TRUE(p.ok()) << p.error->message;
  const auto& r = p.request;
  EXPECT_EQ(r.endpoint, Endpoint::ChatCompletions);
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(r.messages[0].role, "user");
  EXPECT_EQ(r.messages[0].content, "hello");
  EXPECT_EQ(r.params.max_tokens, -1);
  EXPECT_EQ(r.params.top_logprobs, -1);
  EXPECT_FLOAT_EQ(r.params.temperature, 1.0f);
  EXPECT_EQ(r.num_choices(), 1);
  EXPECT_STREQ(r.prompt_param(), "messages");
}

TEST(ServerProtocol, ChatMaxTokens) {
  auto a = chat({{"messages", user_messages()}, {"max_tokens", 5}});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a.request.params.max_tokens, 5);
  auto b = chat({{"messages", user_messages()}, {"max_tokens", 5}, {"max_completion_tokens", 9}});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b.request.params.max_tokens, 9);
  auto c = chat({{"messages", user_messages()}, {"max_completion_tokens", nullptr}});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c.request.params.max_tokens, -1);
  expect_error(chat({{"messages", user_messages()}, {"max_tokens", 0}}), "max_tokens", ">= 1");
  expect_error(chat({{"messages", user_messages()}, {"max_completion_tokens", 0}}),
               "max_completion_tokens", ">= 1");
}

TEST(ServerProtocol, ChatLogprobs) {
  auto on = chat({{"messages", user_messages()}, {"logprobs", true}});
  ASSERT_TRUE(on.ok());
  EXPECT_EQ(on.request.params.top_logprobs, 0);
  auto top = chat({{"messages", user_messages()}, {"logprobs", true}, {"top_logprobs", 5}});
  ASSERT_TRUE(top.ok());
  EXPECT_EQ(top.request.params.top_logprobs, 5);
  auto off = chat({{"messages", user_messages()}, {"logprobs", false}});
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off.request.params.top_logprobs, -1);
  expect_error(chat({{"messages", user_messages()}, {"top_logprobs", 2}}), "top_logprobs",
               "requires 'logprobs' to be true");
  expect_error(chat({{"messages", user_messages()}, {"logprobs", true}, {"top_logprobs", 6}}),
               "top_logprobs", "between 0 and 5");
  expect_error(chat({{"messages", user_messages()}, {"logprobs", 2}}), "logprobs", "expected a boolean");
}

TEST(ServerProtocol, ChatMessages) {
  expect_error(chat(json::object()), "messages", "Missing required parameter: 'messages'");
  expect_error(chat({{"messages", "hi"}}), "messages", "expected an array");
  expect_error(chat({{"messages", json::array()}}), "messages", "empty array");
  expect_error(chat({{"messages", json::array({"hi"})}}), "messages[0]", "expected an object");
  expect_error(chat({{"messages", json::array({{{"content", "x"}}})}}), "messages[0].role",
               "Missing required parameter");
  expect_error(chat({{"messages", json::array({{{"role", "robot"}, {"content", "x"}}})}}),
               "messages[0].role", "Invalid value");
  expect_error(chat({{"messages", json::array({{{"role", "function"}, {"content", "x"}}})}}),
               "messages[0].role", "not supported");
  expect_error(chat({{"messages", json::array({{{"role", "user"}}})}}), "messages[0].content",
               "Missing required parameter");
  expect_error(chat({{"messages", json::array({{{"role", "user"}, {"content", 3}}})}}),
               "messages[0].content", "Invalid type");
  json image = {{"role", "user"},
                {"content", json::array({{{"type", "image_url"}, {"image_url", {{"url", "x"}}}}})}};
  expect_error(chat({{"messages", json::array({image})}}), "messages[0].content[0].type",
               "only 'text' content parts");
  json no_text = {{"role", "user"}, {"content", json::array({{{"type", "text"}}})}};
  expect_error(chat({{"messages", json::array({no_text})}}), "messages[0].content[0].text", "Missing");

  json parts = {{"role", "user"},
                {"content", json::array({{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}})}};
  auto p = chat({{"messages", json::array({{{"role", "developer"}, {"content", "sys"}},
                                           parts,
                                           {{"role", "assistant"}, {"content", nullptr}}})}});
  ASSERT_TRUE(p.ok()) << p.error->message;
  ASSERT_EQ(p.request.messages.size(), 3u);
  EXPECT_EQ(p.request.messages[0].role, "system");
  EXPECT_EQ(p.request.messages[1].content, "a\nb");
  EXPECT_EQ(p.request.messages[2].role, "assistant");
  EXPECT_EQ(p.request.messages[2].content, "");

  // An assistant turn with tool_calls may leave content out (as OpenAI's API): the same
  // prompt as with content null. Without tool_calls, or for another role, it is missing.
  json call = json::array({{{"id", "1"}, {"type", "function"}, {"function", {{"name", "f"}, {"arguments", "{}"}}}}});
  json result = {{"role", "tool"}, {"tool_call_id", "1"}, {"content", "ok"}};
  auto absent = chat({{"messages", json::array({{{"role", "user"}, {"content", "hi"}}, {{"role", "assistant"}, {"tool_calls", call}}, result})}});
  auto null = chat({{"messages", json::array({{{"role", "user"}, {"content", "hi"}},
                                              {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", call}}, result})}});
  ASSERT_TRUE(absent.ok()) << absent.error->message;
  ASSERT_TRUE(null.ok()) << null.error->message;
  ASSERT_EQ(absent.request.messages.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(absent.request.messages[i].role, null.request.messages[i].role) << i;
    EXPECT_EQ(absent.request.messages[i].content, null.request.messages[i].content) << i;
  }
  EXPECT_NE(absent.request.messages[1].content.find("\"name\":\"f\""), std::string::npos) << absent.request.messages[1].content;
  expect_error(chat({{"messages", json::array({{{"role", "user"}, {"content", "hi"}}, {{"role", "assistant"}}})}}),
               "messages[1].content", "Missing");
  expect_error(chat({{"messages", json::array({{{"role", "user"}, {"content", "hi"}}, {{"role", "assistant"}, {"tool_calls", nullptr}}})}}),
               "messages[1].content", "Missing");
  expect_error(chat({{"messages", json::array({{{"role", "user"}, {"tool_calls", call}}})}}), "messages[0].content", "Missing");
  // A malformed tool_calls is named as such (not as a missing content).
  expect_error(chat({{"messages", json::array({{{"role", "user"}, {"content", "hi"}}, {{"role", "assistant"}, {"tool_calls", "x"}}})}}),
               "messages[1].tool_calls", "");
  for (const json& calls : {json::array(), json::object()})
    expect_error(chat({{"messages", json::array({{{"role", "user"}, {"content", "hi"}}, {{"role", "assistant"}, {"content", "x"}, {"tool_calls", calls}}})}}),
                 "messages[1].tool_calls", "expected a non-empty array");

  // Tools are supported (#17): a malformed function is refused, naming the field.
  expect_error(chat({{"messages", user_messages()}, {"tools", json::array({{{"type", "function"}}})}}),
               "tools[0].function", "missing");
  // Structured output is supported (#17): json_object is accepted; what the grammar layer
  // cannot enforce is refused, naming the field (more in server_structured_output_test).
  EXPECT_FALSE(chat({{"messages", user_messages()}, {"response_format", {{"type", "json_object"}}}}).request.params.grammar.empty());
  expect_error(chat({{"messages", user_messages()}, {"response_format", {{"type", "json_schema"},
               {"json_schema", {{"name", "x"}, {"schema", {{"type", "integer"}, {"minimum", 1}}}}}}}}),
               "response_format.json_schema.schema", "unsupported keyword 'minimum'");
  EXPECT_TRUE(chat({{"messages", user_messages()}, {"response_format", {{"type", "text"}}}}).ok());
}

// ---- prompt encoding ---------------------------------------------------------------------

TEST(ServerProtocol, PromptEncoderCompletions) {
  testing::FakeTokenizer tok;
  PromptEncoder enc(tok, tokenizer::ChatTemplateKind::Plain);
  auto p = completion({{"prompt", json::array({"ab", "<s>"})}});
  ASSERT_TRUE(p.ok());
  std::vector<std::vector<int32_t>> out;
  ASSERT_FALSE(enc.encode(p.request, 100, out).has_value());
  ASSERT_EQ(out.size(), 2u);
  // BOS added; special-token text is NOT parsed in completions prompts.
  EXPECT_EQ(out[0], (std::vector<int32_t>{1, 3 + 'a', 3 + 'b'}));
  EXPECT_EQ(out[1], (std::vector<int32_t>{1, 3 + '<', 3 + 's', 3 + '>'}));

  auto ids = completion({{"prompt", json::array({5, 6})}});
  ASSERT_FALSE(enc.encode(ids.request, 100, out).has_value());
  EXPECT_EQ(out[0], (std::vector<int32_t>{5, 6}));  // token prompts are sent as given

  auto oov = completion({{"prompt", json::array({5, 100000})}});
  auto err = enc.encode(oov.request, 100, out);
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->status, 400);
  EXPECT_EQ(err->param.value_or(""), "prompt");
  EXPECT_NE(err->message.find("outside the vocabulary"), std::string::npos);

  auto long_prompt = completion({{"prompt", std::string(10, 'x')}});
  err = enc.encode(long_prompt.request, 11, out);  // 11 tokens with BOS: no room left
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->status, 400);
  EXPECT_EQ(err->param.value_or(""), "prompt");
  EXPECT_EQ(err->code.value_or(""), "context_length_exceeded");
  EXPECT_NE(err->message.find("maximum context length is 11 tokens"), std::string::npos);
  EXPECT_FALSE(enc.encode(long_prompt.request, 12, out).has_value());
}

TEST(ServerProtocol, PromptEncoderChat) {
  testing::FakeTokenizer tok;
  PromptEncoder enc(tok, tokenizer::ChatTemplateKind::Plain);
  auto p = chat({{"messages", user_messages("hi </s>")}});
  ASSERT_TRUE(p.ok());
  std::vector<std::vector<int32_t>> out;
  ASSERT_FALSE(enc.encode(p.request, 1000, out).has_value());
  ASSERT_EQ(out.size(), 1u);
  const std::string rendered = enc.render(p.request.messages);
  // Chat prompts start with exactly one BOS; special-token text inside message content is
  // plain text (issue #20: only the template's own text may hold control tokens, and the
  // plain template adds none), so "</s>" in the content is not an EOS.
  EXPECT_EQ(out[0], tok.encode(rendered, rendered.rfind("<s>", 0) != 0, false));
  EXPECT_EQ(out[0][0], testing::FakeTokenizer::kBos);
  EXPECT_NE(out[0][1], testing::FakeTokenizer::kBos);
  EXPECT_EQ(std::find(out[0].begin(), out[0].end(), testing::FakeTokenizer::kEos), out[0].end());

  auto err = enc.encode(p.request, 3, out);
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->param.value_or(""), "messages");
  EXPECT_EQ(err->code.value_or(""), "context_length_exceeded");
}

// ---- responses ---------------------------------------------------------------------------

PieceFn byte_pieces() {
  testing::FakeTokenizer tok;
  return [tok = std::make_shared<testing::FakeTokenizer>()](int32_t id) { return tok->token_to_piece(id); };
}

int32_t byte_id(unsigned char c) { return testing::FakeTokenizer::kByteBase + c; }

TEST(ServerProtocol, ErrorJsonShape) {
  json j = bad_request("bad thing", std::string("max_tokens")).to_json();
  EXPECT_EQ(j, json::parse(R"({"error":{"message":"bad thing","type":"invalid_request_error",
                                        "param":"max_tokens","code":null}})"));
  json s = server_error("boom").to_json();
  EXPECT_EQ(s["error"]["type"], "server_error");
  EXPECT_TRUE(s["error"]["param"].is_null());
  EXPECT_EQ(route_not_found("GET", "/nope").status, 404);
  EXPECT_EQ(method_not_allowed("GET", "/v1/completions").status, 405);
  EXPECT_EQ(unauthorized("x").status, 401);
  EXPECT_EQ(unauthorized("x").code.value_or(""), "invalid_api_key");
}

TEST(ServerProtocol, StatusCodesMapToHttpAndOpenAiTypes) {
  const struct {
    StatusCode code;
    int http;
    const char* type;
  } cases[] = {
      {StatusCode::InvalidArgument, 400, "invalid_request_error"},
      {StatusCode::FailedPrecondition, 400, "invalid_request_error"},
      {StatusCode::ResourceExhausted, 400, "invalid_request_error"},
      {StatusCode::NotFound, 404, "invalid_request_error"},
      {StatusCode::Unavailable, 503, "server_error"},
      {StatusCode::Cancelled, 503, "server_error"},
      {StatusCode::DeadlineExceeded, 504, "server_error"},
      {StatusCode::DataLoss, 500, "server_error"},
      {StatusCode::Internal, 500, "server_error"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(http_status(c.code), c.http) << name(c.code);
    EXPECT_STREQ(openai_error_type(c.code), c.type) << name(c.code);
    const ApiError e = api_error(Status(c.code, "why"), std::string("prompt"));
    EXPECT_EQ(e.status, c.http) << name(c.code);
    EXPECT_EQ(e.type, c.type) << name(c.code);
    EXPECT_EQ(e.message, "why");
    // The request field at fault is named only when the request is at fault.
    EXPECT_EQ(e.param.has_value(), c.http < 500) << name(c.code);
  }
}

TEST(ServerProtocol, CompletionResponseShape) {
  ResponseMeta meta{"cmpl-abc", 1700000000, "stories"};
  ChoiceResult c;
  c.index = 0;
  c.text = "hello";
  c.finish = FinishReason::Length;
  UsageCounts u{5, 3, 2};
  json j = completion_response(meta, {c}, u, false, byte_pieces());
  EXPECT_EQ(j["id"], "cmpl-abc");
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["created"], 1700000000);
  EXPECT_EQ(j["model"], "stories");
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["choices"][0]["text"], "hello");
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"], json::parse(R"({"prompt_tokens":5,"completion_tokens":3,"total_tokens":8,
                                         "prompt_tokens_details":{"cached_tokens":2}})"));
}

TEST(ServerProtocol, CompletionLogprobsShape) {
  std::vector<TokenLogprob> lps(2);
  lps[0].token = byte_id('a');
  lps[0].logprob = -0.5f;
  lps[0].top = {{byte_id('a'), -0.5f}, {byte_id('b'), -1.5f}};
  lps[1].token = byte_id(0xe2);  // a lone lead byte: not valid UTF-8 on its own
  lps[1].logprob = -std::numeric_limits<float>::infinity();
  lps[1].top = {{byte_id(0xe2), -0.1f}};
  Utf8CharCounter offset;
  offset.push("0123456789");
  json j = completion_logprobs_json(lps, byte_pieces(), &offset);
  EXPECT_EQ(j["tokens"], json::array({"a", "bytes:\\xe2"}));
  EXPECT_EQ(j["token_logprobs"], json::array({-0.5, -9999.0}));
  ASSERT_EQ(j["top_logprobs"].size(), 2u);
  EXPECT_DOUBLE_EQ(j["top_logprobs"][0]["a"].get<double>(), -0.5);
  EXPECT_DOUBLE_EQ(j["top_logprobs"][0]["b"].get<double>(), -1.5);
  EXPECT_TRUE(j["top_logprobs"][1].contains("bytes:\\xe2"));
  EXPECT_EQ(j["text_offset"], json::array({10, 11}));
  EXPECT_EQ(offset.offset(), 11);  // the lone lead byte's character is not complete

  ChoiceResult c;
  c.text = "a";
  c.logprobs = lps;
  c.finish = FinishReason::Stop;
  json full = completion_response({"cmpl-x", 1, "m"}, {c}, {}, true, byte_pieces());
  EXPECT_EQ(full["choices"][0]["logprobs"]["text_offset"], json::array({0, 1}));
  EXPECT_NO_THROW(dump_json(full));
}

// text_offset indexes the choice's text as dump_json shows it: a character split across
// byte tokens is one character, where each of its tokens starts (also when the split falls
// between two streamed chunks: the counter carries over); an invalid byte, or a sequence
// broken off, is one U+FFFD.
TEST(ServerProtocol, CompletionTextOffsetIndexesTheTextAsShown) {
  auto lp = [](int byte) {
    TokenLogprob t;
    t.token = byte_id(byte);
    t.logprob = -0.5f;
    return t;
  };
  auto offsets = [&](std::initializer_list<int> bytes) {
    std::vector<TokenLogprob> lps;
    for (int b : bytes) lps.push_back(lp(b));
    return completion_logprobs_json(lps, byte_pieces(), nullptr)["text_offset"];
  };
  // "a€b": '€' is e2 82 ac.
  EXPECT_EQ(offsets({'a', 0xe2, 0x82, 0xac, 'b'}), json::array({0, 1, 1, 1, 2}));
  // A stray continuation byte after 's' is a U+FFFD of its own (it was given the 's''s offset).
  EXPECT_EQ(offsets({'s', 0x9b, 'x'}), json::array({0, 1, 2}));
  // A sequence broken off by 'b' is one U+FFFD, then 'b'; e0 80 is not a sequence (e0 needs a0..bf).
  EXPECT_EQ(offsets({0xe2, 0x82, 'b', 'c'}), json::array({0, 0, 1, 2}));
  EXPECT_EQ(offsets({0xe0, 0x80, 'z'}), json::array({0, 1, 2}));
  Utf8CharCounter streamed;
  json first = completion_logprobs_json({lp('a'), lp(0xe2)}, byte_pieces(), &streamed);
  json second = completion_logprobs_json({lp(0x82), lp(0xac), lp('b')}, byte_pieces(), &streamed);
  EXPECT_EQ(first["text_offset"], json::array({0, 1}));
  EXPECT_EQ(second["text_offset"], json::array({1, 1, 2}));
  EXPECT_EQ(streamed.offset(), 3);
  // Against nlohmann's own replacement: random bytes (no JSON escapes) in random parts count
  // as many characters as dump_json shows (+1 for a sequence still open at the end).
  std::mt19937 rng(7);
  for (int round = 0; round < 2000; ++round) {
    std::string text;
    const int n = 1 + static_cast<int>(rng() % 24);
    for (int i = 0; i < n; ++i) {
      int b = static_cast<int>(rng() % 256);
      if (b < 0x20 || b == '"' || b == '\\') b = 'q';
      if (rng() % 3 == 0) b = 0x80 + static_cast<int>(rng() % 0x40);  // more continuation bytes
      text.push_back(static_cast<char>(b));
    }
    Utf8CharCounter c;
    for (size_t at = 0; at < text.size();) {
      const size_t len = std::min(text.size() - at, size_t{1} + rng() % 3);
      c.push(std::string_view(text).substr(at, len));
      at += len;
    }
    Utf8CharCounter open_check;  // does the text end inside a sequence?
    open_check.push(text);
    open_check.push("x");
    const std::string shown = dump_json(json(text));
    int chars = 0;
    for (unsigned char ch : shown) chars += (ch & 0xC0) != 0x80;
    const int open = open_check.offset() - c.offset() - 1;  // 1 when a sequence was still open
    EXPECT_EQ(c.offset() + open, chars - 2) << round;  // - the two quotes
  }
}

TEST(ServerProtocol, ChatResponseAndLogprobsShape) {
  std::vector<TokenLogprob> lps(1);
  lps[0].token = byte_id('h');
  lps[0].logprob = -0.25f;
  lps[0].top = {{byte_id('h'), -0.25f}, {byte_id(0xc3), -2.0f}};
  ChoiceResult c;
  c.text = "h";
  c.logprobs = lps;
  c.finish = FinishReason::Stop;
  json j = chat_response({"chatcmpl-1", 2, "m"}, {c}, {4, 1, 0}, true, byte_pieces());
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"], json::parse(R"({"role":"assistant","content":"h"})"));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  const json& content = j["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 1u);
  EXPECT_EQ(content[0]["token"], "h");
  EXPECT_DOUBLE_EQ(content[0]["logprob"].get<double>(), -0.25);
  EXPECT_EQ(content[0]["bytes"], json::array({104}));
  ASSERT_EQ(content[0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(content[0]["top_logprobs"][1]["token"], "bytes:\\xc3");
  EXPECT_EQ(content[0]["top_logprobs"][1]["bytes"], json::array({195}));
  EXPECT_EQ(j["usage"]["total_tokens"], 5);

  json no_lp = chat_response({"chatcmpl-1", 2, "m"}, {c}, {}, false, byte_pieces());
  EXPECT_TRUE(no_lp["choices"][0]["logprobs"].is_null());
}

TEST(ServerProtocol, ChunkShapes) {
  ResponseMeta meta{"id1", 3, "m"};
  json cc = completion_chunk(meta, 1, "xy", nullptr, FinishReason::None, false);
  EXPECT_EQ(cc["object"], "text_completion");
  EXPECT_EQ(cc["choices"][0]["index"], 1);
  EXPECT_EQ(cc["choices"][0]["text"], "xy");
  EXPECT_TRUE(cc["choices"][0]["finish_reason"].is_null());
  EXPECT_FALSE(cc.contains("usage"));
  json cu = completion_chunk(meta, 0, "", nullptr, FinishReason::Stop, true);
  EXPECT_EQ(cu["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(cu.contains("usage") && cu["usage"].is_null());

  json ch = chat_chunk(meta, 0, json{{"content", "z"}}, nullptr, FinishReason::None, false);
  EXPECT_EQ(ch["object"], "chat.completion.chunk");
  EXPECT_EQ(ch["choices"][0]["delta"]["content"], "z");
  EXPECT_TRUE(ch["choices"][0]["finish_reason"].is_null());
  json fin = chat_chunk(meta, 0, json::object(), nullptr, FinishReason::Length, false);
  EXPECT_TRUE(fin["choices"][0]["delta"].empty());
  EXPECT_EQ(fin["choices"][0]["finish_reason"], "length");

  json usage = usage_chunk(meta, "chat.completion.chunk", {3, 4, 1});
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["total_tokens"], 7);
  EXPECT_EQ(usage["usage"]["prompt_tokens_details"]["cached_tokens"], 1);

  EXPECT_EQ(sse_data(json{{"a", 1}}), "data: {\"a\":1}\n\n");
  EXPECT_EQ(sse_done(), "data: [DONE]\n\n");
  EXPECT_TRUE(finish_reason_json(FinishReason::None).is_null());
  EXPECT_EQ(finish_reason_json(FinishReason::Abort), "abort");
}

TEST(ServerProtocol, JsonUtilities) {
  EXPECT_NO_THROW(dump_json(json{{"t", std::string("\xff\xfe")}}));
  EXPECT_NE(dump_json(json{{"t", std::string("a\xff")}}).find("\xef\xbf\xbd"), std::string::npos);
  EXPECT_TRUE(is_valid_utf8("héllo €"));
  EXPECT_FALSE(is_valid_utf8("\xe2\x82"));
  EXPECT_FALSE(is_valid_utf8("\xc0\xaf"));         // overlong
  EXPECT_FALSE(is_valid_utf8("\xed\xa0\x80"));     // surrogate
  EXPECT_EQ(token_display("ok"), "ok");
  EXPECT_EQ(token_display("\xe2\x82"), "bytes:\\xe2\\x82");
  EXPECT_EQ(token_bytes("\xe2"), std::vector<int>{226});
  EXPECT_TRUE(make_response_id("cmpl-").rfind("cmpl-", 0) == 0);
  EXPECT_NE(make_response_id("x"), make_response_id("x"));
}

TEST(ServerProtocol, InfoJson) {
  json m = models_json("stories", 5, 512);
  EXPECT_EQ(m["object"], "list");
  ASSERT_EQ(m["data"].size(), 1u);
  EXPECT_EQ(m["data"][0], json::parse(R"({"id":"stories","object":"model","created":5,
                                            "owned_by":"pdserve","max_model_len":512})"));
  engine::EngineStats s;
  s.kv_blocks_total = 10;
  s.kv_blocks_used = 3;
  s.kv_blocks_cached = 2;
  s.kv_blocks_free = 5;
  s.requests_running = 2;
  s.requests_waiting = 1;
  json h = health_json(s, false);
  // Member order is not part of the contract: compare as unordered objects.
  EXPECT_EQ(nlohmann::json(h), nlohmann::json::parse(R"({"status":"ok","kv_blocks_used":3,"kv_blocks_total":10,"kv_blocks_cached":2,
                               "kv_blocks_free":5,"requests_running":2,"requests_waiting":1})"));
}

TEST(ServerProtocol, ApiKeyCheck) {
  EXPECT_FALSE(check_api_key("", "").has_value());
  EXPECT_FALSE(check_api_key("", "Bearer whatever").has_value());
  EXPECT_FALSE(check_api_key("sekret", "Bearer sekret").has_value());
  EXPECT_FALSE(check_api_key("sekret", "bearer sekret ").has_value());
  auto missing = check_api_key("sekret", "");
  ASSERT_TRUE(missing.has_value());
  EXPECT_EQ(missing->status, 401);
  EXPECT_NE(missing->message.find("didn't provide an API key"), std::string::npos);
  EXPECT_TRUE(check_api_key("sekret", "Bearer sekre").has_value());
  EXPECT_TRUE(check_api_key("sekret", "Bearer sekret2").has_value());
  EXPECT_TRUE(check_api_key("sekret", "Basic sekret").has_value());
  EXPECT_TRUE(check_api_key("sekret", "sekret").has_value());
  EXPECT_TRUE(path_requires_auth("/v1/models"));
  EXPECT_FALSE(path_requires_auth("/health"));
}

}  // namespace
}  // namespace pdserve::server
