// Speculative decoding through the server: `serve --speculative ...` answers exactly what
// a server without it answers (streamed and not, greedy and seeded, with stop strings and
// max_tokens), on a monolithic server and on the decode worker of a PD cluster; the pool
// is free afterwards; the spec_decode counters count; bad settings fail at start with a
// one-line error.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "support/cluster.h"
#include "support/pool_free.h"
#include "support/prometheus.h"
#include "support/server_process.h"
#include "support/pdserve_bin.h"

namespace pdserve {
namespace {

using json = nlohmann::json;
using testing::Cluster;
using testing::ClusterOptions;
using testing::Role;
using testing::ServerProcess;

/// Request bodies for /v1/completions: greedy and seeded, stops and max_tokens edges.
std::vector<json> bodies() {
  std::vector<json> out;
  const char* prompts[] = {"Once upon a time", "Lily and Ben. Lily and Ben. Lily and", "The cat sat on the mat. The cat"};
  int i = 0;
  for (const char* p : prompts)
    for (int variant = 0; variant < 4; ++variant, ++i) {
      json b = {{"prompt", p}, {"max_tokens", variant == 2 ? 3 : 40}};
      if (variant % 2 == 0) b["temperature"] = 0;
      else {
        b["temperature"] = 0.8;
        b["seed"] = 100 + i;
      }
      if (variant == 3) b["stop"] = json::array({".", " the"});
      if (variant == 1) b["logprobs"] = 2;
      out.push_back(b);
    }
  // Penalties count the tokens generated so far, drafts accepted included; a bias moves
  // the first token too (sampled on a prefill worker in a PD cluster).
  out.push_back({{"prompt", prompts[1]}, {"max_tokens", 40}, {"temperature", 0}, {"frequency_penalty", 1.5}});
  out.push_back({{"prompt", prompts[2]}, {"max_tokens", 40}, {"temperature", 0.8}, {"seed", 7}, {"presence_penalty", 1.0},
                 {"frequency_penalty", -0.5}, {"logit_bias", {{"400", 4}, {"13", -100}}}});
  // The repetition penalty's window (here the last 16 tokens) slides over accepted drafts.
  out.push_back({{"prompt", prompts[0]}, {"max_tokens", 40}, {"temperature", 0}, {"repetition_penalty", 1.3}});
  out.push_back({{"prompt", prompts[1]}, {"max_tokens", 40}, {"temperature", 0.9}, {"seed", 8}, {"repeat_penalty", 1.5},
                 {"repeat_last_n", 16}, {"min_p", 0.1}});
  // min_tokens holds off a biased EOS across accepted drafts; a stop id and a stop string
  // returned with the text.
  out.push_back({{"prompt", prompts[2]}, {"max_tokens", 40}, {"temperature", 0}, {"logit_bias", {{"2", 12}}}, {"min_tokens", 17}});
  out.push_back({{"prompt", prompts[0]}, {"max_tokens", 40}, {"temperature", 0}, {"stop_token_ids", {400, 13}},
                 {"stop", {" the"}}, {"include_stop_str_in_output", true}});
  return out;
}

/// The text (and token logprobs, when asked) of `body`'s completion, streamed or not.
std::string complete(httplib::Client& cli, json body, bool stream) {
  body["stream"] = stream;
  auto res = cli.Post("/v1/completions", body.dump(), "application/json");
  if (!res || res->status != 200) return "HTTP error: " + (res ? res->body : std::string("no answer"));
  if (!stream) {
    const json j = json::parse(res->body);
    return j["choices"][0]["text"].get<std::string>() + "|" + j["choices"][0]["finish_reason"].dump() + "|" +
           j["choices"][0]["logprobs"].dump();
  }
  std::string text, finish, logprobs;
  size_t at = 0;
  while ((at = res->body.find("data: ", at)) != std::string::npos) {
    const size_t end = res->body.find("\n", at);
    const std::string data = res->body.substr(at + 6, end - at - 6);
    at = end;
    if (data == "[DONE]") break;
    const json j = json::parse(data, nullptr, false);
    if (!j.is_object() || j["choices"].empty()) continue;
    text += j["choices"][0].value("text", "");
    if (!j["choices"][0]["finish_reason"].is_null()) finish = j["choices"][0]["finish_reason"].dump();
    if (j["choices"][0].contains("logprobs") && !j["choices"][0]["logprobs"].is_null())
      for (const auto& t : j["choices"][0]["logprobs"]["token_logprobs"]) logprobs += t.dump() + ",";
  }
  return text + "|" + finish + "|" + logprobs;
}

std::vector<std::string> complete_all(httplib::Client& cli, bool stream) {
  std::vector<std::string> out;
  for (const json& b : bodies()) out.push_back(complete(cli, b, stream));
  return out;
}

TEST(SpecDecodeServer, EveryProposerAnswersWhatPlainDecodingAnswers) {
  ServerProcess off;
  ASSERT_TRUE(off.ready()) << off.error();
  auto off_cli = off.client();
  const auto want = complete_all(off_cli, false);
  const auto want_stream = complete_all(off_cli, true);
  for (const std::vector<std::string>& flags :
       {std::vector<std::string>{"--speculative", "ngram", "--spec-k", "5"},
        std::vector<std::string>{"--speculative", "layerskip", "--draft-layers", "3"},
        std::vector<std::string>{"--speculative", "draft", "--draft-model", testing::kStoriesModel}}) {
    ServerProcess on(flags);
    ASSERT_TRUE(on.ready()) << on.error();
    auto cli = on.client();
    EXPECT_EQ(complete_all(cli, false), want) << flags[1];
    EXPECT_EQ(complete_all(cli, true), want_stream) << flags[1];
    EXPECT_TRUE(testing::wait_pool_free(on.port())) << flags[1];
    auto m = cli.Get("/metrics");
    ASSERT_TRUE(m && m->status == 200);
    const auto samples = testing::parse_prometheus_text(m->body);
    EXPECT_GT(testing::sum_samples(samples, "pdserve_spec_decode_num_draft_tokens_total", "", ""), 0) << flags[1];
    EXPECT_GT(testing::sum_samples(samples, "pdserve_spec_decode_num_accepted_tokens_total", "", ""), 0) << flags[1];
    EXPECT_GT(testing::sum_samples(samples, "pdserve_spec_decode_num_accepted_tokens_per_pos", "position", "0"), 0)
        << flags[1];
  }
}

TEST(SpecDecodeServer, DecodeWorkerOfAPdClusterSpeculatesExactly) {
  ServerProcess off;
  ASSERT_TRUE(off.ready()) << off.error();
  auto off_cli = off.client();
  const auto want = complete_all(off_cli, false);
  const auto want_stream = complete_all(off_cli, true);
  // Every proposer on the decode worker; the prompt KV comes from the prefill worker (the
  // draft model computes its own KV of the prompt).
  for (const std::vector<std::string>& flags :
       {std::vector<std::string>{"--speculative", "ngram"},
        std::vector<std::string>{"--speculative", "layerskip", "--draft-layers", "3"},
        std::vector<std::string>{"--speculative", "draft", "--draft-model", testing::kStoriesModel}}) {
    ClusterOptions o;
    o.decode_args = {"--remote-prefill-threshold", "0"};
    o.decode_args.insert(o.decode_args.end(), flags.begin(), flags.end());
    Cluster c(o);
    ASSERT_TRUE(c.ready()) << c.error();
    auto cli = c.router_client();
    EXPECT_EQ(complete_all(cli, false), want) << flags[1] << "\n" << c.logs();
    EXPECT_EQ(complete_all(cli, true), want_stream) << flags[1];
    EXPECT_TRUE(testing::wait_pool_free(c.node(Role::Decode, 0).http_port())) << flags[1] << "\n" << c.logs();
    const auto m = c.metrics(Role::Decode, 0);
    ASSERT_TRUE(m);
    EXPECT_GT(testing::sum_samples(*m, "pdserve_spec_decode_num_accepted_tokens_total", "", ""), 0) << flags[1];
    EXPECT_GT(testing::sum_samples(*m, "pdserve_remote_prefill_total", "", ""), 0) << flags[1];
  }
}

/// stderr of `pdserve generate ...` that is expected to fail at start.
std::string start_error(const std::string& args, int* code) {
  const std::string cmd = testing::pdserve_bin() + " generate -m " + testing::kStoriesModel + " -p hi " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while (p && (n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = p ? pclose(p) : -1;
  *code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

TEST(SpecDecodeServer, BadDraftSettingsFailAtStartWithOneLine) {
  for (const std::string& args : {std::string("--speculative draft --draft-model ../shared/models/synth-llama-small-q8_0.gguf"),
                                  std::string("--speculative draft --draft-model /nonexistent.gguf"),
                                  std::string("--speculative draft"),
                                  std::string("--speculative layerskip --draft-layers 0"),
                                  std::string("--speculative layerskip --draft-layers 99")}) {
    int code = 0;
    const std::string err = start_error(args, &code);
    EXPECT_NE(code, 0) << args;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << args << ": " << err;
    EXPECT_NE(err.find("draft"), std::string::npos) << args << ": " << err;
  }
}

}  // namespace
}  // namespace pdserve
