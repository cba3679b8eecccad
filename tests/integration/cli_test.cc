// The pdserve binary as a user runs it: `generate` reproduces the reference, `tokenize`
// and `info` work, and bad model files give a non-zero exit and a one-line error.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "support/reference.h"
#include "support/pdserve_bin.h"
#include "support/ports.h"

namespace pdserve {
namespace {

struct RunResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

/// Runs `pdserve ARGS`; with `timeout_s` > 0 the process is killed after that many seconds
/// (exit code 124), for commands that would otherwise serve forever.
RunResult run(const std::string& args, int timeout_s = 0) {
  // One file per call: ctest runs the tests of this binary in parallel processes.
  static int calls = 0;
  const std::string err_path =
      ::testing::TempDir() + "pds_cli_stderr_" + std::to_string(::getpid()) + "_" + std::to_string(calls++) + ".txt";
  const std::string cmd = (timeout_s > 0 ? "timeout " + std::to_string(timeout_s) + " " : std::string()) +
                          testing::pdserve_bin() + " " + args + " 2>" + err_path;
  RunResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream e(err_path);
  std::stringstream ss;
  ss << e.rdbuf();
  r.err = ss.str();
  std::remove(err_path.c_str());
  return r;
}

std::vector<int32_t> parse_ids(const std::string& line) {
  std::vector<int32_t> ids;
  std::istringstream in(line);
  int32_t x;
  while (in >> x) ids.push_back(x);
  return ids;
}

TEST(Cli, GenerateMatchesReferenceTokensAndText) {
  for (const auto& c : testing::load_reference("../shared/reference/stories260K.json")) {
    const std::string base = "generate --model ../shared/models/stories260K.gguf --log-level warn -n " +
                             std::to_string(c.tokens.size()) + " --prompt " + shell_quote(c.prompt);
    RunResult ids = run(base + " --ids");
    ASSERT_EQ(ids.exit_code, 0) << ids.err;
    EXPECT_EQ(parse_ids(ids.out), c.tokens) << "prompt '" << c.prompt << "'";
    RunResult text = run(base);
    ASSERT_EQ(text.exit_code, 0) << text.err;
    EXPECT_EQ(text.out, c.text + "\n") << "prompt '" << c.prompt << "'";
  }
}

TEST(Cli, TokenizeMatchesReferencePromptTokens) {
  for (const auto& c : testing::load_reference("../shared/reference/stories260K.json")) {
    RunResult r = run("tokenize --model ../shared/models/stories260K.gguf --add-bos --text " + shell_quote(c.prompt));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(parse_ids(r.out), c.prompt_tokens) << "prompt '" << c.prompt << "'";
  }
}

TEST(Cli, InfoPrintsMetadataAndTensors) {
  RunResult r = run("info --model ../shared/models/stories260K.gguf");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("llama.context_length"), std::string::npos);
  EXPECT_NE(r.out.find("blk.4.ffn_down.weight"), std::string::npos);
  EXPECT_NE(r.out.find("tensors (48)"), std::string::npos);
}

void expect_one_line_error(const RunResult& r, const std::string& needle) {
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
}

TEST(Cli, AWorkerWhosePortIsInUseExitsWithAnError) {
  // Another socket listening with SO_REUSEPORT, as a gRPC server does by default: a worker
  // used to bind beside it and share its connections (two workers, maybe of two models, on
  // one port). And a worker whose --metrics-port is taken kept running without /health.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  const int one = 1;
  ASSERT_EQ(::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one), 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(fd, 4), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string taken = std::to_string(ntohs(addr.sin_port));
  const std::string model = " --model ../shared/models/stories260K.gguf";
  RunResult r = run("prefill" + model + " --port " + taken, 60);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("error: cannot listen on 127.0.0.1:" + taken + " (gRPC)"), std::string::npos) << r.err;
  r = run("prefill" + model + " --port " + std::to_string(testing::free_port()) + " --metrics-port " + taken, 60);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("error: cannot listen on 127.0.0.1:" + taken + " (--metrics-port)"), std::string::npos) << r.err;
  ::close(fd);
}

TEST(Cli, SizesTheMachineCannotGiveAreOneLineErrorsNotAborts) {
  // std::bad_alloc escaped main (an abort, exit 134); --threads 40000 could not start its
  // threads, and the half-built pool's destructor aborted.
  const std::string model = " --model ../shared/models/stories260K.gguf";
  expect_one_line_error(run("generate" + model + " -p hi -n 2 --max-batched-tokens 1000000000"), "out of memory");
  expect_one_line_error(run("bench-model" + model + " -p 0 -n 0 --batch 2000000000"), "out of memory");
  const RunResult t = run("generate" + model + " -p hi -n 2 --threads 40000");
  EXPECT_EQ(t.exit_code, 2) << t.err;
  EXPECT_NE(t.err.find("--threads: Value 40000 not in range 0 to 1024"), std::string::npos) << t.err;
}

// NaN and infinities are refused by every floating-point flag (CLI11's range checks alone
// let NaN through), before any model is loaded.
TEST(Cli, NonFiniteNumbersAreRefused) {
  for (const char* args : {"generate --model ../shared/models/stories260K.gguf -p hi --temperature nan",
                           "generate --model ../shared/models/stories260K.gguf -p hi --top-p inf",
                           "serve --model ../shared/models/stories260K.gguf --request-timeout nan",
                           "bench --url http://127.0.0.1:1 --model m --rate -inf"}) {
    const RunResult r = run(args);
    EXPECT_NE(r.exit_code, 0) << args;
    EXPECT_NE(r.err.find("not a finite number"), std::string::npos) << args << ": " << r.err;
  }
}

// Enum flags are parsed at the CLI edge: another value is refused before anything loads,
// naming the flag, the value and every valid choice; names match in any case.
TEST(Cli, EnumFlagsRefuseOtherValuesAndNameTheChoices) {
  const std::string model = " --model ../shared/models/stories260K.gguf";
  const struct {
    std::string args, expect;
  } cases[] = {
      {"serve" + model + " --kv-dtype q9_0", "--kv-dtype: q9_0 not in {f16,f32,bf16,q8_0,q4_0}"},
      {"serve" + model + " --eviction mru", "--eviction: mru not in {lru,lfu}"},
      {"serve" + model + " --scheduling-policy edf", "--scheduling-policy: edf not in {fcfs,priority}"},
      {"router" + model + " --decode 127.0.0.1:1 --policy random",
       "--policy: random not in {round_robin,least_load,prefix_affinity,length}"},
  };
  for (const auto& c : cases) {
    const RunResult r = run(c.args);
    EXPECT_NE(r.exit_code, 0) << c.args;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << c.args << ": " << r.err;
  }
  const RunResult upper = run("generate" + model + " -p hi -n 2 --ids --kv-dtype F32 --eviction LFU --scheduling-policy Priority");
  EXPECT_EQ(upper.exit_code, 0) << upper.err;
  EXPECT_EQ(parse_ids(upper.out).size(), 2u) << upper.out;
}

// Every usage error has the same shape as the other start-up errors: one line on stderr,
// "error: <what> (see 'pdserve <subcommand> --help')", exit code 2; --help exits 0.
TEST(Cli, UsageErrorsAreOneLineWithExitCodeTwo) {
  const std::string model = " --model ../shared/models/stories260K.gguf";
  const struct {
    std::string args, expect;
  } cases[] = {
      {"serve" + model + " --spec-k 0", "error: --spec-k: "},
      // A proposer's knob without a proposer is not silently ignored.
      {"serve" + model + " --spec-k 3", "error: --spec-k requires --speculative"},
      {"serve" + model + " --draft-layers 2", "error: --draft-layers requires --speculative"},
      {"serve" + model + " --no-such-flag", "error: The following argument was not expected: --no-such-flag"},
      {"serve", "error: --model is required"},
      {"decode" + model, "error: --port is required"},
      {"bench --url http://127.0.0.1:1 --model m --rate -inf", "error: --rate: "},
      {"no-such-command", "error: unknown command 'no-such-command' (see 'pdserve --help')"},
      {"bench --url http://127.0.0.1:1 --tokenizer ../shared/models/stories260K.gguf --class 'a:share=x'", "error: bad --class 'a:share=x'"},
      {"bench --url http://127.0.0.1:1 --tokenizer ../shared/models/stories260K.gguf --class a --class a", "error: --class 'a' given twice"},
      {"quantize in.gguf out.gguf Q9_9", "error: type: unknown quantisation type 'Q9_9'"},
  };
  for (const auto& c : cases) {
    const RunResult r = run(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << ": " << r.err;
    EXPECT_EQ(r.err.rfind(c.expect, 0), 0u) << c.args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << c.args << ": " << r.err;
    const std::string sub = c.args.substr(0, c.args.find(' '));
    if (sub != "no-such-command") {
      EXPECT_NE(r.err.find("(see 'pdserve " + sub + " --help')"), std::string::npos) << r.err;
    }
  }
  const RunResult help = run("serve --help");
  EXPECT_EQ(help.exit_code, 0) << help.err;
  EXPECT_NE(help.out.find("--model"), std::string::npos);
  // The top-level --log-level is named in every subcommand's help.
  for (const char* sub : {"serve", "generate", "decode", "router", "bench"}) {
    const RunResult h = run(std::string(sub) + " --help");
    EXPECT_EQ(h.exit_code, 0) << sub << h.err;
    EXPECT_NE(h.out.find("--log-level"), std::string::npos) << sub << ": " << h.out;
  }
}

TEST(Cli, WorkerAddressesAreCheckedAtStart) {
  // A decode worker took any --prefill text and retried it for ever ("nonsense", port 0 or
  // 99999), serving every prompt locally without a word; the router refused only some.
  const std::string model = " --model ../shared/models/stories260K.gguf";
  const std::string ports = " --port " + std::to_string(testing::free_port()) + " --metrics-port " + std::to_string(testing::free_port());
  for (const std::string bad : {"nonsense", "host:0", "127.0.0.1:99999", ":8080"}) {
    RunResult r = run("decode" + model + ports + " --prefill " + bad, 60);
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.err;
    EXPECT_EQ(r.err.rfind("error: --prefill: '" + bad + "'", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    r = run("router" + model + " --port " + std::to_string(testing::free_port()) + " --decode " + bad, 60);
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.err;
    EXPECT_EQ(r.err.rfind("error: --decode: '" + bad + "'", 0), 0u) << r.err;
  }
}

// A KV dtype whose 32-value blocks do not fit the model's head_dim (stories260K: 8) is
// refused at start, in one line naming both.
TEST(Cli, KvDtypeThatDoesNotFitTheHeadDimIsRefused) {
  for (const char* dt : {"q8_0", "q4_0"}) {
    for (const std::string cmd : {"serve --port 1", "generate -p hi"}) {
      expect_one_line_error(run(cmd + " --model ../shared/models/stories260K.gguf --log-level warn --kv-dtype " + dt),
                            std::string("--kv-dtype ") + dt +
                                " needs a head dimension that is a multiple of 32; this model's head_dim is 8");
    }
  }
}

TEST(Cli, KvBudgetFlags) {
  const std::string gen = "generate --model ../shared/models/stories260K.gguf -p 'Once upon a time' --ids";
  expect_one_line_error(run(gen + " --kv-budget 3"), "--kv-budget 3 is below --kv-sinks + --kv-recent");
  expect_one_line_error(run(gen + " --kv-budget 10 --kv-sinks 4 --kv-recent 8"), "--kv-budget 10");
  EXPECT_NE(run(gen + " --kv-budget 64 --kv-recent 1.5").exit_code, 0);
  EXPECT_NE(run(gen + " --kv-evict lru").err.find("--kv-evict: lru not in {h2o,streaming}"), std::string::npos);
  // Budget 0 is today's output, bit for bit.
  const RunResult plain = run(gen + " -n 40");
  const RunResult zero = run(gen + " -n 40 --kv-budget 0 --kv-evict streaming --kv-sinks 2");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(zero.out, plain.out);
  // A pool of 16 tokens cannot hold 100 more without a budget; with one it generates them.
  const std::string tiny = gen + " -n 100 --block-size 4 --num-kv-blocks 4";
  EXPECT_NE(run(tiny).exit_code, 0);
  const RunResult budget = run(tiny + " --kv-budget 8 --kv-sinks 2 --kv-recent 2");
  ASSERT_EQ(budget.exit_code, 0) << budget.err;
  EXPECT_GT(parse_ids(budget.out).size(), 16u);  // past the pool (EOS may end it before 100)
}

// bench-model's batched runs under --kv-budget evict as the engine does: at the end each
// sequence attends to exactly the budget, in budget / block-size blocks; without a budget
// it holds its whole context. Prompt K/V computed or written at random: same KV state.
TEST(Cli, BenchModelBatchedDecodeKeepsTheKvBudget) {
  const std::string bm = "bench-model --model ../shared/models/synth-llama-small-f16.gguf -p 0 -n 0 -t 1 --batch 2 "
                         "--batch-prompt 100 --batch-steps 20";
  for (const char* fill : {"prefill", "random"}) {
    const RunResult full = run(bm + " --batch-kv " + fill);
    ASSERT_EQ(full.exit_code, 0) << full.err;
    EXPECT_NE(full.out.find("batch 2: context 120, 120 KV entries per sequence at the end, 16 blocks in use"),
              std::string::npos) << full.out;
    for (const char* policy : {"h2o", "streaming"}) {
      const RunResult kept = run(bm + " --batch-kv " + fill + " --kv-budget 64 --kv-evict " + policy);
      ASSERT_EQ(kept.exit_code, 0) << kept.err;
      EXPECT_NE(kept.out.find("batch 2: context 120, 64 KV entries per sequence at the end, 8 blocks in use"),
                std::string::npos) << fill << " " << policy << "\n" << kept.out;
    }
  }
  expect_one_line_error(run(bm + " --kv-budget 3"), "--kv-budget 3 is below --kv-sinks + --kv-recent");
}

TEST(Cli, BadModelFilesGiveOneLineErrors) {
  for (const char* cmd : {"generate --prompt hi --model ", "serve --port 1 --model ", "info --model "}) {
    expect_one_line_error(run(std::string(cmd) + "/nonexistent/model.gguf"), "cannot open");
    expect_one_line_error(run(std::string(cmd) + "README.md"), "not a GGUF file");
    const std::string trunc = ::testing::TempDir() + "pds_truncated_" + std::to_string(::getpid()) + ".gguf";
    {
      std::ifstream in("../shared/models/stories260K.gguf", std::ios::binary);
      std::string head(200000, '\0');
      in.read(head.data(), head.size());
      std::ofstream(trunc, std::ios::binary).write(head.data(), head.size());
    }
    expect_one_line_error(run(std::string(cmd) + trunc), "outside the file");
    std::remove(trunc.c_str());
  }
}

}  // namespace
}  // namespace pdserve
