// `pdserve serve` on stories260K over real HTTP: the reference through /v1/completions
// (JSON and SSE, with logprobs), concurrency without cross-talk, and every KV block back
// in the pool after requests finish, stop, or disconnect mid-stream; requests cut by
// SIGTERM end with the shutdown error (an SSE event and [DONE], or the JSON body).
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <set>
#include <tuple>
#include <thread>

#include <nlohmann/json.hpp>

#include "gguf/gguf.h"
#include "support/pool_free.h"
#include "support/raw_http.h"
#include "support/reference.h"
#include "support/server_process.h"
#include "support/wait.h"
#include "tokenizer/tokenizer.h"

namespace pdserve {
namespace {

using json = nlohmann::json;

class ServeE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new testing::ServerProcess(std::vector<std::string>{});
    ASSERT_TRUE(server_->ready()) << server_->error();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static testing::ServerProcess* server_;

  httplib::Client client() {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(120, 0);
    return c;
  }

  json post(const std::string& path, const json& body, int expect_status = 200) {
    auto c = client();
    auto res = c.Post(path, body.dump(), "application/json");
    EXPECT_TRUE(res) << "no response";
    if (!res) return json();
    EXPECT_EQ(res->status, expect_status) << res->body;
    return json::parse(res->body);
  }

  /// POSTs `body` and hands each received piece of the response body to `on_data`
  /// (returning false hangs up).
  void post_streaming(const json& body, std::function<bool(const char*, size_t)> on_data) {
    auto c = client();
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) { return on_data(data, n); };
    httplib::Response res;
    httplib::Error err;
    c.send(req, res, err);
  }

  /// Streams a request and returns the joined text and the final finish_reason (and, with
  /// `tokens`, the logprobs' tokens of every chunk).
  std::pair<std::string, std::string> stream(const json& body, std::vector<std::string>* tokens = nullptr) {
    std::string buf, text, finish;
    bool done = false;
    json b = body;
    b["stream"] = true;
    post_streaming(b, [&](const char* data, size_t n) {
                        buf.append(data, n);
                        size_t pos;
                        while ((pos = buf.find("\n\n")) != std::string::npos) {
                          std::string ev = buf.substr(0, pos);
                          buf.erase(0, pos + 2);
                          EXPECT_EQ(ev.rfind("data: ", 0), 0u) << ev;
                          std::string payload = ev.substr(6);
                          if (payload == "[DONE]") {
                            done = true;
                            continue;
                          }
                          json j = json::parse(payload);
                          text += j["choices"][0]["text"].get<std::string>();
                          if (tokens && j["choices"][0]["logprobs"].is_object())
                            for (const json& t : j["choices"][0]["logprobs"]["tokens"]) tokens->push_back(t);
                          if (!j["choices"][0]["finish_reason"].is_null()) finish = j["choices"][0]["finish_reason"];
                        }
                        return true;
                      });
    EXPECT_TRUE(done) << "no data: [DONE]";
    return {text, finish};
  }

  json health() {
    auto c = client();
    auto res = c.Get("/health");
    EXPECT_TRUE(res && res->status == 200);
    return res ? json::parse(res->body) : json();
  }

  /// Polls /health until no KV block is in use and the prefix cache holds none either
  /// (free == total); false after `timeout`.
  bool wait_blocks_free(std::chrono::milliseconds timeout) {
    return testing::wait_until([&] {
      const auto s = testing::health_pool_state(server_->port());
      return s && testing::pool_free(*s) && s->free == s->total;
    }, timeout);
  }
};

testing::ServerProcess* ServeE2E::server_ = nullptr;

TEST_F(ServeE2E, CompletionsMatchReferenceWithLogprobsStreamedAndNot) {
  auto f = gguf::GgufFile::open("../shared/models/stories260K.gguf");
  ASSERT_TRUE(f.ok());
  auto tok = tokenizer::Tokenizer::from_gguf(*f.value());
  ASSERT_TRUE(tok.ok());
  for (const auto& c : testing::load_reference("../shared/reference/stories260K.json")) {
    json body = {{"prompt", c.prompt}, {"max_tokens", c.tokens.size()}, {"temperature", 0}, {"logprobs", 5}};
    json r = post("/v1/completions", body);
    EXPECT_EQ(r["choices"][0]["text"], c.text) << c.prompt;
    EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(r["usage"]["prompt_tokens"], c.prompt_tokens.size());
    EXPECT_EQ(r["usage"]["completion_tokens"], c.tokens.size());
    const json& lp = r["choices"][0]["logprobs"];
    ASSERT_EQ(lp["tokens"].size(), c.tokens.size());
    for (size_t step = 0; step < c.tokens.size(); ++step) {
      EXPECT_EQ(lp["tokens"][step].get<std::string>(), c.token_bytes[step]);
      const json& top = lp["top_logprobs"][step];
      EXPECT_EQ(top.size(), 5u);
      for (auto [id, ref_lp] : c.top_logprobs[step]) {
        const std::string piece = tok.value()->token_to_piece(id);
        ASSERT_TRUE(top.contains(piece)) << "step " << step << " token " << id;
        EXPECT_NEAR(top[piece].get<double>(), ref_lp, 1e-3) << c.prompt << " step " << step << " token " << id;
      }
    }
    auto [text, finish] = stream(body);
    EXPECT_EQ(text, r["choices"][0]["text"].get<std::string>());
    EXPECT_EQ(finish, "length");
  }
  EXPECT_TRUE(wait_blocks_free(std::chrono::seconds(10)));
}

// A stop string cuts the text, and the logprobs of its tokens go with it (llama.cpp's
// server trims them too): the logprob tokens spell the text returned, the last one perhaps
// reaching into the cut part, every text_offset inside the text — streamed and not. They
// used to run on past the text (the stop string's tokens, offsets past its end).
TEST_F(ServeE2E, LogprobsEndWithTheTextAStopStringCut) {
  const json base = {{"prompt", "Once upon a time"}, {"max_tokens", 32}, {"temperature", 0}, {"logprobs", 1}};
  const std::string full = post("/v1/completions", base)["choices"][0]["text"];
  ASSERT_GT(full.size(), 40u);
  int cut_inside_a_token = 0;
  for (size_t at : {9ul, 17ul, 26ul, 35ul}) {
    const std::string stop = full.substr(at, 4);
    json body = base;
    body["stop"] = stop;
    const json r = post("/v1/completions", body);
    const std::string text = r["choices"][0]["text"];
    SCOPED_TRACE("stop '" + stop + "', text '" + text + "'");
    EXPECT_EQ(text, full.substr(0, full.find(stop)));
    EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
    const json& lp = r["choices"][0]["logprobs"];
    std::string spelled, before_last;
    for (const json& t : lp["tokens"]) {
      before_last = spelled;
      spelled += t.get<std::string>();
    }
    EXPECT_EQ(spelled.rfind(text, 0), 0u) << "the tokens spell the text: '" << spelled << "'";
    EXPECT_LT(before_last.size(), text.size()) << "no token lies wholly in the stop string: '" << spelled << "'";
    cut_inside_a_token += spelled.size() > text.size();
    for (const json& o : lp["text_offset"]) EXPECT_LT(o.get<size_t>(), text.size());
    EXPECT_EQ(lp["tokens"].size(), lp["token_logprobs"].size());
    EXPECT_EQ(lp["tokens"].size(), lp["top_logprobs"].size());
    std::vector<std::string> streamed;
    auto [stext, finish] = stream(body, &streamed);
    EXPECT_EQ(stext, text);
    EXPECT_EQ(json(streamed), lp["tokens"]) << "streamed and not give the same logprobs";
  }
  EXPECT_GT(cut_inside_a_token, 0) << "no stop string began inside a token: the case is not covered";
}

// OpenAI's presence / frequency penalties and logit_bias act on the sampled tokens: a
// frequency penalty cuts repetition, a negative presence penalty adds to it, a +100 bias
// makes greedy decoding write that token only, a -100 bias on the greedy first token
// removes it; the repetition penalty and min_p (vLLM, llama.cpp) act as theirs; and a
// penalised, seeded request gives its standalone output in a batch.
TEST_F(ServeE2E, PenaltiesAndLogitBiasShapeTheOutputAndStayBatchInvariant) {
  auto f = gguf::GgufFile::open("../shared/models/stories260K.gguf");
  ASSERT_TRUE(f.ok());
  auto tok = tokenizer::Tokenizer::from_gguf(*f.value());
  ASSERT_TRUE(tok.ok());
  const json base = {{"prompt", "Lily and Ben. Lily and Ben. Lily and"}, {"max_tokens", 48}, {"temperature", 0}, {"logprobs", 0}};
  auto tokens_of = [&](json body) {
    const json r = post("/v1/completions", body);
    return std::make_pair(r["choices"][0]["text"].get<std::string>(), r["choices"][0]["logprobs"]["tokens"]);
  };
  auto repeats = [](const json& toks) {
    std::set<std::string> seen;
    for (const json& t : toks) seen.insert(t.get<std::string>());
    return toks.size() - seen.size();
  };
  const auto [plain, plain_toks] = tokens_of(base);
  json freq = base;
  freq["frequency_penalty"] = 2.0;
  const auto [ftext, ftoks] = tokens_of(freq);
  EXPECT_NE(ftext, plain);
  EXPECT_LT(repeats(ftoks), repeats(plain_toks)) << "plain: " << plain << "\npenalised: " << ftext;
  json pres = base;
  pres["presence_penalty"] = -2.0;
  const auto [ptext, ptoks] = tokens_of(pres);
  EXPECT_GE(repeats(ptoks), repeats(plain_toks)) << "plain: " << plain << "\nencouraged: " << ptext;

  json forced = base;
  forced["max_tokens"] = 6;
  forced["logit_bias"] = {{"400", 100}};
  std::string six;
  for (int i = 0; i < 6; ++i) six += tok.value()->token_to_piece(400);
  EXPECT_EQ(tokens_of(forced).first, six);
  const std::string first = plain_toks[0];
  int32_t first_id = -1;
  for (int32_t id = 0; id < tok.value()->vocab().size(); ++id)
    if (tok.value()->token_to_piece(id) == first) first_id = id;
  ASSERT_GE(first_id, 0);
  json banned = base;
  banned["logit_bias"] = {{std::to_string(first_id), -100}};
  EXPECT_NE(tokens_of(banned).second[0], first);
  // An id outside the vocabulary (512 tokens) is a 400 naming logit_bias, whatever its bias.
  for (const json& b : {json{{"512", 1}}, json{{"999999999", 0}}}) {
    json outside = base;
    outside["logit_bias"] = b;
    const json err = post("/v1/completions", outside, 400);
    EXPECT_EQ(err["error"]["param"], "logit_bias") << err.dump();
    EXPECT_NE(err["error"]["message"].get<std::string>().find("not in the vocabulary"), std::string::npos) << err.dump();
  }

  // The repetition penalty (vLLM's name: the whole prompt and output): at 100 no token of
  // the prompt or the output so far comes again; llama.cpp's name with a window of 1 token
  // only stops the last one from repeating, so it gives another text.
  json rep = base;
  rep["repetition_penalty"] = 100;
  const auto [rtext, rtoks] = tokens_of(rep);
  EXPECT_GT(repeats(plain_toks), 0u);
  EXPECT_EQ(repeats(rtoks), 0u) << rtext;
  for (const json& t : rtoks) EXPECT_EQ(std::string(base["prompt"]).find(t.get<std::string>() + " "), std::string::npos) << rtext;
  json window = base;
  window["repeat_penalty"] = 100;
  window["repeat_last_n"] = 1;
  const auto [wtext, wtoks] = tokens_of(window);
  EXPECT_NE(wtext, rtext);
  for (size_t i = 1; i < wtoks.size(); ++i) EXPECT_NE(wtoks[i], wtoks[i - 1]) << wtext;
  // min_p = 1 leaves only the most likely token: sampling at any temperature is greedy.
  for (const json& b : {base, rep}) {
    json hot = b;
    hot["temperature"] = 1.5;
    hot["seed"] = 3;
    hot["min_p"] = 1;
    EXPECT_EQ(tokens_of(hot).first, tokens_of(b).first) << hot.dump();
    hot["min_p"] = 0;
    EXPECT_NE(tokens_of(hot).first, tokens_of(b).first) << "temperature 1.5 without min_p should differ from greedy";
  }

  // Seeded, penalised, biased: each alone, then all at once.
  std::vector<json> bodies;
  for (int i = 0; i < 6; ++i)
    bodies.push_back({{"prompt", i % 2 ? "Once upon a time" : "The little dog"}, {"max_tokens", 32}, {"temperature", 0.9},
                      {"seed", 40 + i}, {"presence_penalty", 0.3 * i - 0.6}, {"frequency_penalty", 0.25 * i},
                      {"logit_bias", {{"400", i}, {"13", -i}}}, {"repetition_penalty", 0.9 + 0.1 * i}, {"min_p", 0.02 * i}});
  std::vector<std::string> alone;
  for (const json& b : bodies) alone.push_back(post("/v1/completions", b)["choices"][0]["text"]);
  std::vector<std::future<std::string>> together;
  for (const json& b : bodies)
    together.push_back(std::async(std::launch::async, [this, b] { return post("/v1/completions", b)["choices"][0]["text"].get<std::string>(); }));
  for (size_t i = 0; i < bodies.size(); ++i) EXPECT_EQ(together[i].get(), alone[i]) << bodies[i].dump();
  EXPECT_TRUE(wait_blocks_free(std::chrono::seconds(10)));
}

// vLLM's stop extensions on stories260K: stop_token_ids end at the id (its text returned only
// with include_stop_str_in_output, as a matched stop string is), and min_tokens keeps EOS and
// the stop ids out until that many tokens were generated — even against a +100 bias.
TEST_F(ServeE2E, StopTokenIdsMinTokensAndIncludeStopStr) {
  auto f = gguf::GgufFile::open("../shared/models/stories260K.gguf");
  ASSERT_TRUE(f.ok());
  auto tok = tokenizer::Tokenizer::from_gguf(*f.value());
  ASSERT_TRUE(tok.ok());
  const std::string piece = tok.value()->token_to_piece(400);
  const json base = {{"prompt", "Once upon a time"}, {"max_tokens", 40}, {"temperature", 0}};
  auto with = [&](const json& extra) {
    json b = base;
    b.update(extra);
    return b;
  };
  auto run = [&](json extra) {
    json b = base;
    b.update(extra);
    const json r = post("/v1/completions", b);
    return std::make_tuple(r["choices"][0]["text"].get<std::string>(), r["choices"][0]["finish_reason"].get<std::string>(),
                           r["usage"]["completion_tokens"].get<int>());
  };
  const json forced = {{"logit_bias", {{"400", 100}}}, {"stop_token_ids", {400}}};
  EXPECT_EQ(run(forced), std::make_tuple(std::string(), std::string("stop"), 1));
  json with_text = forced;
  with_text["include_stop_str_in_output"] = true;
  EXPECT_EQ(run(with_text), std::make_tuple(piece, std::string("stop"), 1));
  // min_tokens 3: token 400 is banned for three tokens (they are greedy's first three, the
  // bias touching only 400), then the bias makes it the fourth, which stops.
  const std::string greedy3 = post("/v1/completions", with({{"max_tokens", 3}}), 200)["choices"][0]["text"];
  json min3 = forced;
  min3["min_tokens"] = 3;
  EXPECT_EQ(run(min3), std::make_tuple(greedy3, std::string("stop"), 4));
  // EOS (id 2) forced by a bias: the first token ends it, unless min_tokens holds it off.
  EXPECT_EQ(run({{"logit_bias", {{"2", 100}}}}), std::make_tuple(std::string(), std::string("stop"), 1));
  const std::string greedy10 = post("/v1/completions", with({{"max_tokens", 10}}), 200)["choices"][0]["text"];
  EXPECT_EQ(run({{"logit_bias", {{"2", 100}}}, {"min_tokens", 10}}), std::make_tuple(greedy10, std::string("stop"), 11));
  // A stop string returned with include_stop_str_in_output; the text before it either way.
  const std::string plain = std::get<0>(run(json::object()));
  ASSERT_GT(plain.size(), 30u);
  const std::string stop = plain.substr(20, 4);
  const size_t at = plain.find(stop);
  EXPECT_EQ(std::get<0>(run({{"stop", {stop}}})), plain.substr(0, at));
  EXPECT_EQ(std::get<0>(run({{"stop", {stop}}, {"include_stop_str_in_output", true}})), plain.substr(0, at + stop.size()));
  // Checked: min_tokens above max_tokens, ids outside the vocabulary, a negative id.
  EXPECT_EQ(post("/v1/completions", with({{"min_tokens", 41}}), 400)["error"]["param"], "min_tokens");
  EXPECT_EQ(post("/v1/completions", with({{"stop_token_ids", {512}}}), 400)["error"]["param"], "stop_token_ids");
  EXPECT_EQ(post("/v1/completions", with({{"stop_token_ids", {-1}}}), 400)["error"]["param"], "stop_token_ids");
  EXPECT_TRUE(wait_blocks_free(std::chrono::seconds(10)));
}

// /tokenize and /detokenize (vLLM's and llama.cpp's shapes): a text's count is what
// /v1/completions reports as prompt_tokens, a chat's what /v1/chat/completions reports, and
// the ids are those the model was given (the completion of the ids equals that of the text);
// detokenize gives the text back; bad input is a 400 and the server keeps serving.
TEST_F(ServeE2E, TokenizeCountsWhatTheEndpointsFeedTheModel) {
  const std::string text = "Once upon a time, Lily saw a big dog.";
  const json tk = post("/tokenize", {{"prompt", text}});
  const json comp = post("/v1/completions", {{"prompt", text}, {"max_tokens", 8}, {"temperature", 0}});
  EXPECT_EQ(tk["count"], comp["usage"]["prompt_tokens"]);
  EXPECT_EQ(tk["count"], tk["tokens"].size());
  EXPECT_GT(tk["max_model_len"].get<int>(), 0);
  const json by_ids = post("/v1/completions", {{"prompt", tk["tokens"]}, {"max_tokens", 8}, {"temperature", 0}});
  EXPECT_EQ(by_ids["choices"][0]["text"], comp["choices"][0]["text"]);
  // llama.cpp's shape: no BOS unless add_special; the pieces spell the text.
  const json lk = post("/tokenize", {{"content", text}, {"with_pieces", true}});
  ASSERT_EQ(lk["tokens"].size() + 1, tk["tokens"].size()) << "stories260K adds BOS";
  std::string spelled;
  for (const json& t : lk["tokens"]) spelled += t["piece"].get<std::string>();
  EXPECT_EQ(spelled, " " + text) << "SPM's leading space";
  std::vector<int> plain;
  for (const json& t : lk["tokens"]) plain.push_back(t["id"]);
  EXPECT_EQ(post("/detokenize", {{"tokens", plain}})["content"], " " + text);
  EXPECT_EQ(post("/detokenize", {{"tokens", tk["tokens"]}})["prompt"], "<s> " + text) << "control tokens as their text";
  EXPECT_EQ(post("/tokenize", {{"content", text}, {"add_special", true}})["tokens"], tk["tokens"]);
  EXPECT_EQ(post("/tokenize", {{"prompt", ""}, {"add_special_tokens", false}})["count"], 0);
  // A chat's prompt, as the chat endpoint renders it.
  const json msgs = json::array({{{"role", "system"}, {"content", "Be kind."}}, {{"role", "user"}, {"content", text}}});
  const json chat = post("/v1/chat/completions", {{"messages", msgs}, {"max_tokens", 1}});
  EXPECT_EQ(post("/tokenize", {{"messages", msgs}})["count"], chat["usage"]["prompt_tokens"]);
  EXPECT_LT(post("/tokenize", {{"messages", msgs}, {"add_generation_prompt", false}})["count"], chat["usage"]["prompt_tokens"]);
  // add_generation_prompt false: the chat endpoint renders as /tokenize does (helper-72).
  const json no_opening = post("/v1/chat/completions", {{"messages", msgs}, {"max_tokens", 1}, {"add_generation_prompt", false}});
  EXPECT_EQ(no_opening["usage"]["prompt_tokens"], post("/tokenize", {{"messages", msgs}, {"add_generation_prompt", false}})["count"]);
  // A text longer than the context can hold is refused as /v1/completions refuses it,
  // before it is tokenized (helper-72: 7.5 MB with pieces took 400 MB).
  const std::string huge(300000, 'a');
  EXPECT_EQ(post("/tokenize", {{"content", huge}, {"with_pieces", true}}, 400)["error"]["code"], "context_length_exceeded");
  EXPECT_EQ(post("/v1/completions", {{"prompt", huge}}, 400)["error"]["code"], "context_length_exceeded");
  const json chat_strs = post("/tokenize", {{"messages", msgs}, {"return_token_strs", true}});
  EXPECT_EQ(chat_strs["token_strs"].size(), chat_strs["tokens"].size()) << "helper-73: the messages form took no return_token_strs";
  EXPECT_EQ(post("/tokenize", {{"messages", msgs}, {"prompt", text}}, 400)["error"]["type"], "invalid_request_error");
  for (const json& bad : {json{{"tokens", {1, 512}}}, json{{"tokens", "1 2"}}, json{{"tokens", {1.5}}}})
    EXPECT_EQ(post("/detokenize", bad, 400)["error"]["param"], "tokens") << bad.dump();
  EXPECT_EQ(post("/tokenize", {{"prompt", 7}}, 400)["error"]["param"], "prompt");
  EXPECT_EQ(post("/tokenize", json::object(), 400)["error"]["param"], "prompt");
  EXPECT_EQ(post("/tokenize", {{"messages", "hi"}}, 400)["error"]["param"], "messages");
  EXPECT_EQ(post("/tokenize", {{"content", "x"}, {"with_pieces", "yes"}}, 400)["error"]["param"], "with_pieces");
  EXPECT_EQ(post("/tokenize", {{"model", "gpt-4"}, {"prompt", "x"}}, 404)["error"]["code"], "model_not_found");
  EXPECT_EQ(post("/detokenize", {{"model", 5}, {"tokens", {1}}}, 400)["error"]["param"], "model");
  EXPECT_EQ(post("/tokenize", {{"prompt", text}}), tk) << "still serving";
}

TEST_F(ServeE2E, SixteenConcurrentRequestsGiveTheirStandaloneOutput) {
  const std::vector<std::string> prompts = {"Once upon a time", "The little dog", "Lily and Ben went to the park.",
                                            "One day, a bird", "Tom had a big red ball. He", ""};
  std::vector<json> bodies;
  for (int i = 0; i < 16; ++i) {
    json b = {{"prompt", prompts[i % prompts.size()]}, {"max_tokens", 8 + 5 * i}};
    if (i % 3 == 0) {
      b["temperature"] = 0.9;
      b["seed"] = 100 + i;
      b["top_p"] = 0.9;
    } else {
      b["temperature"] = 0;
    }
    if (i % 4 == 1) b["stop"] = json::array({"."});
    bodies.push_back(b);
  }
  std::vector<std::string> alone;
  for (const auto& b : bodies) alone.push_back(post("/v1/completions", b)["choices"][0]["text"]);
  std::vector<std::future<std::string>> futs;
  for (int i = 0; i < 16; ++i) {
    futs.push_back(std::async(std::launch::async, [&, i] {
      if (i % 2 == 0) return stream(bodies[i]).first;
      return post("/v1/completions", bodies[i])["choices"][0]["text"].get<std::string>();
    }));
  }
  for (int i = 0; i < 16; ++i) EXPECT_EQ(futs[i].get(), alone[i]) << "request " << i;
  EXPECT_TRUE(wait_blocks_free(std::chrono::seconds(10)));
}

TEST_F(ServeE2E, DisconnectMidStreamFreesBlocks) {
  // A slower model (~2k tokens/s here) so that the request below would run for seconds
  // if the disconnect were not noticed.
  testing::ServerProcess::Options o;
  o.model = "../shared/models/synth-llama-small-f16.gguf";
  o.extra_args = {"--max-seqs", "4"};
  testing::ServerProcess slow(o);
  ASSERT_TRUE(slow.ready()) << slow.error();
  httplib::Client c("127.0.0.1", slow.port());
  c.set_read_timeout(120, 0);
  auto health = [&] { return json::parse(c.Get("/health")->body); };

  json body = {{"prompt", "Once upon a time"}, {"max_tokens", 4000}, {"stream", true}, {"ignore_eos", true}};
  httplib::Client streamer("127.0.0.1", slow.port());
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  int chunks = 0;
  int64_t used_while_streaming = -1;
  req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
    if (++chunks == 5) used_while_streaming = health()["kv_blocks_used"];
    return chunks < 5;  // hang up
  };
  httplib::Response res;
  httplib::Error err;
  streamer.send(req, res, err);
  EXPECT_GT(used_while_streaming, 0);
  // Freed long before the 4,000 tokens (tens of seconds) would have been generated.
  bool freed = testing::wait_pool_free(slow.port());
  EXPECT_TRUE(freed) << "blocks still in use 10 s after the client hung up: " << health().dump();

  // A non-streamed request whose client gives up: heartbeats reveal the disconnect.
  httplib::Request full;
  full.method = "POST";
  full.path = "/v1/completions";
  full.body = json{{"prompt", "Once upon a time"}, {"max_tokens", 4000}, {"ignore_eos", true}}.dump();
  full.set_header("Content-Type", "application/json");
  std::string received;
  full.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    received.append(data, n);
    return false;  // give up at the first byte (a heartbeat, after about a second)
  };
  httplib::Client impatient("127.0.0.1", slow.port());
  httplib::Response full_res;
  impatient.send(full, full_res, err);
  EXPECT_EQ(received.find("choices"), std::string::npos) << "the request finished before the client gave up";
  freed = testing::wait_pool_free(slow.port());
  EXPECT_TRUE(freed) << "a non-streamed request kept running after its client left: " << health().dump();
  // A client that half-closes (shutdown(SHUT_WR)) after its request: the request is
  // aborted as a disconnect, and what the client can still read says so. It is not told
  // that the server is shutting down (a 503, which invites a retry).
  {
    testing::RawConnection half(slow.port());
    ASSERT_TRUE(half.ok());
    ASSERT_TRUE(half.send(testing::http_post(
        "/v1/completions", json{{"prompt", "Once upon a time"}, {"max_tokens", 4000}, {"ignore_eos", true}}.dump())));
    half.shutdown_write();
    const std::string reply = half.read_all(std::chrono::seconds(30));
    EXPECT_EQ(reply.find("shutting down"), std::string::npos) << reply;
    EXPECT_NE(reply.find("client_closed_request"), std::string::npos) << reply;
    EXPECT_TRUE(testing::wait_pool_free(slow.port())) << health().dump();
  }
  // The same for a streamed request, while its tokens flow (~2k a second, so no gap in them
  // to notice it by): aborted within a fraction of a second, and the client reads the error
  // event, [DONE] and the chunked body's end, not a cut stream (it was cut, at the first gap).
  {
    testing::RawConnection half(slow.port());
    ASSERT_TRUE(half.ok());
    ASSERT_TRUE(half.send(testing::http_post(
        "/v1/completions", json{{"prompt", "Once upon a time"}, {"max_tokens", 4000}, {"ignore_eos", true}, {"stream", true}}.dump())));
    ASSERT_NE(half.read_until("\"text_completion\"", std::chrono::seconds(30)).find("\"text_completion\""), std::string::npos);
    half.shutdown_write();
    const std::string reply = half.read_until("\r\n0\r\n\r\n", std::chrono::seconds(30));
    const size_t error_at = reply.find("data: {\"error\"");
    ASSERT_NE(error_at, std::string::npos) << reply.substr(reply.size() > 2000 ? reply.size() - 2000 : 0);
    EXPECT_NE(reply.find("client_closed_request", error_at), std::string::npos);
    EXPECT_NE(reply.find("data: [DONE]", error_at), std::string::npos);
    EXPECT_EQ(reply.find("\"finish_reason\":\"length\""), std::string::npos) << "the stream ran to its end";
    EXPECT_EQ(reply.compare(reply.size() - 5, 5, "0\r\n\r\n"), 0) << reply.substr(reply.size() - 200);
    EXPECT_TRUE(testing::wait_pool_free(slow.port())) << health().dump();
  }
  // The server still answers.
  auto ok = c.Post("/v1/completions", json{{"prompt", "Hi"}, {"max_tokens", 2}}.dump(), "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(json::parse(ok->body)["usage"]["completion_tokens"], 2);
}

TEST_F(ServeE2E, SigtermGivesEveryRunningRequestItsErrorAndItsEnd) {
  // Long requests cut by SIGTERM: each stream reads an OpenAI-style error event and the
  // stream's [DONE], each non-streamed request already past its status line (keep-alive
  // spaces) reads the error object as its body — none a dropped connection — and the
  // server exits cleanly. Several at once: the server must not stop writing before the
  // last one has ended.
  testing::ServerProcess::Options o;
  o.model = "../shared/models/synth-llama-small-f16.gguf";
  o.extra_args = {"--max-batched-tokens", "1024"};
  testing::ServerProcess slow(o);
  ASSERT_TRUE(slow.ready()) << slow.error();
  constexpr int kStreams = 3, kFull = 5, kAll = kStreams + kFull;
  std::atomic<int> started{0};
  std::promise<void> all_started;
  struct Outcome {
    bool sent = false;
    int status = 0;
    std::string body;
  };
  std::vector<Outcome> out(kAll);
  std::vector<std::thread> clients;
  for (int i = 0; i < kAll; ++i) {
    clients.emplace_back([&, i] {
      const bool stream = i < kStreams;
      httplib::Client c("127.0.0.1", slow.port());
      c.set_read_timeout(120, 0);
      httplib::Request req;
      req.method = "POST";
      req.path = "/v1/completions";
      req.body = json{{"prompt", "Once upon a time " + std::to_string(i)}, {"max_tokens", 4000},
                      {"stream", stream}, {"ignore_eos", true}}.dump();
      req.set_header("Content-Type", "application/json");
      bool counted = false;
      req.content_receiver = [&, stream](const char* data, size_t n, uint64_t, uint64_t) {
        out[i].body.append(data, n);
        // A stream once it has tokens; a non-streamed request at its first keep-alive space.
        if (!counted && (!stream || out[i].body.find("\"text\"") != std::string::npos)) {
          counted = true;
          if (started.fetch_add(1) + 1 == kAll) all_started.set_value();
        }
        return true;
      };
      httplib::Response res;
      httplib::Error err;
      out[i].sent = c.send(req, res, err);
      out[i].status = res.status;
    });
  }
  const bool ready = all_started.get_future().wait_for(std::chrono::seconds(60)) == std::future_status::ready;
  // The signal comes while a long prompt is prefilled in chunks of up to 1,024 tokens:
  // right after its first chunk's step (its blocks show in /health), so the aborts wait for
  // the next chunk's step — longer than a keep-alive interval, which is when a server that
  // stopped its HTTP side at once cut the non-streamed bodies short.
  httplib::Client probe("127.0.0.1", slow.port());
  const auto blocks_used = [&]() -> int64_t {
    auto h = probe.Get("/health");
    return h && h->status == 200 ? json::parse(h->body)["kv_blocks_used"].get<int64_t>() : -1;
  };
  const int64_t before = blocks_used();
  std::thread long_prefill([&] {
    httplib::Client c("127.0.0.1", slow.port());
    c.set_read_timeout(120, 0);
    std::string prompt;
    for (int k = 0; k < 3900; ++k) prompt += " hello";
    c.Post("/v1/completions", json{{"prompt", prompt}, {"max_tokens", 16}}.dump(), "application/json");
  });
  // A 1,024-token chunk is 64 blocks; the 8 decodes add at most a few in that time.
  const bool in_prefill =
      testing::wait_until([&] { return blocks_used() > before + 40; }, std::chrono::seconds(30), std::chrono::milliseconds(1));
  slow.signal(SIGTERM);
  for (auto& t : clients) t.join();
  long_prefill.join();
  ASSERT_TRUE(ready) << started.load() << " of " << kAll << " requests started";
  EXPECT_TRUE(in_prefill) << "the long prompt's first chunk never showed in /health";
  const auto is_shutdown_error = [](const json& e) {
    return e.contains("error") && e["error"]["type"] == "server_error" &&
           e["error"]["message"].get<std::string>().find("shutting down") != std::string::npos;
  };
  for (int i = 0; i < kAll; ++i) {
    const std::string& body = out[i].body;
    const std::string tail_of_body = body.substr(body.size() > 600 ? body.size() - 600 : 0);
    EXPECT_TRUE(out[i].sent) << "request " << i << " lost its connection: " << tail_of_body;
    EXPECT_EQ(out[i].status, 200) << "request " << i;
    if (i < kStreams) {
      const size_t error_at = body.find("data: {\"error\"");
      ASSERT_NE(error_at, std::string::npos) << "stream " << i << ": " << tail_of_body;
      const std::string tail = body.substr(error_at);
      EXPECT_TRUE(is_shutdown_error(json::parse(tail.substr(6, tail.find('\n') - 6)))) << tail;
      EXPECT_EQ(tail.substr(tail.size() - std::string("data: [DONE]\n\n").size()), "data: [DONE]\n\n") << tail;
    } else {
      const json e = json::parse(body, nullptr, false);  // leading spaces are JSON white space
      ASSERT_FALSE(e.is_discarded()) << "request " << i << " body is not JSON: " << tail_of_body;
      EXPECT_TRUE(is_shutdown_error(e)) << e.dump();
    }
    EXPECT_EQ(body.find("\"finish_reason\":\"length\""), std::string::npos) << "request " << i << " finished first";
  }
  EXPECT_EQ(slow.wait_exit(std::chrono::seconds(20)), 0) << slow.log();  // one signal: a clean exit
}

TEST_F(ServeE2E, StopsAndErrorsLeaveNoBlocksInUse) {
  json r = post("/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 64}, {"temperature", 0}, {"stop", "Lily"}});
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(r["choices"][0]["text"], ", there was a little girl named ");
  for (const json& bad : {json{{"prompt", "x"}, {"max_tokens", 0}}, json{{"prompt", "x"}, {"temperature", -1}},
                          json{{"prompt", "x"}, {"top_p", 0}}, json{{"prompt", "x"}, {"top_p", 1.5}},
                          json{{"max_tokens", 3}}, json{{"prompt", "x"}, {"model", "nope"}},
                          json{{"prompt", std::string(3000, 'a') + " b c d e f g h i j k l m n o p q r s t u v w x y z"}}}) {
    auto c = client();
    auto res = c.Post("/v1/completions", bad.dump(), "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, bad.contains("model") ? 404 : 400) << res->body;  // model_not_found is a 404
    json e = json::parse(res->body);
    EXPECT_TRUE(e["error"].contains("message") && e["error"].contains("type") && e["error"].contains("param") &&
                e["error"].contains("code"))
        << res->body;
  }
  auto c = client();
  auto res = c.Post("/v1/completions", "{not json", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  EXPECT_TRUE(wait_blocks_free(std::chrono::seconds(10)));
}

}  // namespace
}  // namespace pdserve
