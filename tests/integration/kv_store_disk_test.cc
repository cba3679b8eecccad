// The disk tier (--kv-offload-dir / --kv-offload-gb) through `pdserve serve`: a restarted
// server serves earlier prompts as prefix hits with bit-identical output; blocks evicted
// from a small pool come back from disk; the directory stays within its bound; bad
// flags are one-line errors at start.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "support/kv_store_util.h"
#include "support/server_process.h"
#include "support/pdserve_bin.h"

namespace pdserve {
namespace {

namespace fs = std::filesystem;
using testing::complete;
using testing::Completion;
using testing::long_prompt;
using testing::ServerProcess;
using testing::tier_metric;

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/pdserve-kvdisk-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

int64_t dir_bytes(const std::string& d) {
  int64_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(d)) n += e.is_regular_file() ? static_cast<int64_t>(e.file_size()) : 0;
  return n;
}

// Waits until `srv` wrote at least `blocks` blocks to `tier`.
bool wait_writes(ServerProcess& srv, const char* tier, double blocks) {
  return testing::wait_until([&] { return tier_metric(srv.port(), "pdserve_kv_store_writes_total", tier) >= blocks; },
                             std::chrono::seconds(20), std::chrono::milliseconds(20));
}

TEST(KvStoreDisk, WarmRestartServesEarlierPromptsAsHitsBitIdentical) {
  TempDir dir;
  const std::vector<std::string> flags = {"--kv-offload-dir", dir.path, "--kv-snapshot-interval", "1"};
  Completion cold;
  {
    ServerProcess a(flags);
    ASSERT_TRUE(a.ready()) << a.error();
    cold = complete(a.port(), long_prompt(0));
    ASSERT_EQ(cold.status, 200) << cold.body;
    ASSERT_GE(cold.prompt_tokens, 160);
    EXPECT_EQ(cold.cached_tokens, 0);
    ASSERT_TRUE(wait_writes(a, "disk", cold.prompt_tokens / 16)) << a.log();
    a.stop();  // SIGTERM: the engine finishes its queued writes and snapshots
  }
  EXPECT_TRUE(fs::exists(dir.path + "/index"));  // the snapshot
  ServerProcess b(flags);
  ASSERT_TRUE(b.ready()) << b.error();
  const Completion warm = complete(b.port(), long_prompt(0));
  ASSERT_EQ(warm.status, 200) << warm.body;
  EXPECT_GE(warm.cached_tokens, cold.prompt_tokens * 9 / 10);
  EXPECT_TRUE(warm.same_output(cold)) << warm.text << "\nvs\n" << cold.text;
  EXPECT_GE(tier_metric(b.port(), "pdserve_kv_store_hits_total", "disk"), cold.prompt_tokens / 16 - 1);

  // --kv-restore false starts the tier empty: nothing cached, same output.
  b.stop();
  std::vector<std::string> no_restore = flags;
  no_restore.insert(no_restore.end(), {"--kv-restore", "false"});
  ServerProcess c(no_restore);
  ASSERT_TRUE(c.ready()) << c.error();
  const Completion fresh = complete(c.port(), long_prompt(0));
  EXPECT_EQ(fresh.cached_tokens, 0);
  EXPECT_TRUE(fresh.same_output(cold));
}

TEST(KvStoreDisk, BlocksEvictedFromASmallPoolComeBackFromDisk) {
  TempDir dir;
  // 40 blocks: one long prompt (13 blocks) plus its generation fits, four do not.
  ServerProcess srv({"--kv-offload-dir", dir.path, "--num-kv-blocks", "40"});
  ASSERT_TRUE(srv.ready()) << srv.error();
  ServerProcess ref({"--num-kv-blocks", "40", "--no-prefix-cache"});
  ASSERT_TRUE(ref.ready()) << ref.error();
  const Completion first = complete(srv.port(), long_prompt(1));
  ASSERT_EQ(first.status, 200) << first.body;
  for (int v = 2; v < 6; ++v) ASSERT_EQ(complete(srv.port(), long_prompt(v)).status, 200);  // evict prompt 1 from the pool
  ASSERT_TRUE(wait_writes(srv, "disk", 5 * (first.prompt_tokens / 16)));
  const double hits0 = tier_metric(srv.port(), "pdserve_kv_store_hits_total", "disk");
  const Completion again = complete(srv.port(), long_prompt(1));
  EXPECT_GE(again.cached_tokens, first.prompt_tokens * 9 / 10);
  EXPECT_GT(tier_metric(srv.port(), "pdserve_kv_store_hits_total", "disk"), hits0);  // from disk, not the pool
  EXPECT_TRUE(again.same_output(first));
  EXPECT_TRUE(complete(ref.port(), long_prompt(1)).same_output(first));  // and equal to an uncached run
}

TEST(KvStoreDisk, DirectoryStaysWithinKvOffloadGb) {
  TempDir dir;
  const double gb = 100e3 / (1 << 30);  // 100 kB: a handful of stories260K blocks
  ServerProcess srv({"--kv-offload-dir", dir.path, "--kv-offload-gb", std::to_string(gb)});
  ASSERT_TRUE(srv.ready()) << srv.error();
  double written = 0;
  for (int v = 0; v < 6; ++v) {
    const Completion c = complete(srv.port(), long_prompt(v));
    ASSERT_EQ(c.status, 200) << c.body;
    written += c.prompt_tokens / 16;
  }
  ASSERT_TRUE(wait_writes(srv, "disk", written));
  auto m = testing::scrape(srv.port());
  const double held = m["pdserve_kv_store_held_bytes{tier=\"disk\"}"];
  EXPECT_GT(m["pdserve_kv_store_blocks{tier=\"disk\"}"], 0);
  EXPECT_LE(held, 100e3);
  EXPECT_LE(dir_bytes(dir.path), 100e3);
  EXPECT_GT(m["pdserve_kv_store_bytes_total{tier=\"disk\",direction=\"write\"}"], 100e3);  // more went through than stayed
}

struct Run {
  int exit_code = -1;
  std::string err;
};

Run run_serve(const std::string& args) {
  const std::string err_path = ::testing::TempDir() + "pds_kvstore_err_" + std::to_string(::getpid()) + ".txt";
  const std::string cmd = testing::pdserve_bin() + " serve --model " + testing::kStoriesModel + " --port 1 " + args +
                          " >/dev/null 2>" + err_path;
  Run r;
  const int status = std::system(cmd.c_str());
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream e(err_path);
  std::stringstream ss;
  ss << e.rdbuf();
  r.err = ss.str();
  std::remove(err_path.c_str());
  return r;
}

// The error line: exactly one line starts with "error:", and it names the flag. Exit code
// 1 for a start-up failure, 2 for a usage error (a malformed flag value).
void expect_one_line_error(const Run& r, const std::string& flag, int exit_code = 1) {
  EXPECT_EQ(r.exit_code, exit_code) << r.err;
  std::istringstream in(r.err);
  int errors = 0;
  for (std::string line; std::getline(in, line);)
    if (line.rfind("error:", 0) == 0) {
      ++errors;
      EXPECT_NE(line.find(flag), std::string::npos) << line;
    }
  EXPECT_EQ(errors, 1) << r.err;
}

TEST(KvStoreDisk, BadTierFlagsAreOneLineErrorsAtStart) {
  expect_one_line_error(run_serve("--kv-offload-dir /proc/pdserve-kv"), "--kv-offload-dir");
  for (const char* url : {"http://127.0.0.1:6379", "redis://127.0.0.1:99999", "redis://:6379", "redis://h:1/db"})
    expect_one_line_error(run_serve(std::string("--kv-store '") + url + "'"), "--kv-store", 2);
}

// Checked before the model loads: with a model file that does not exist, the malformed
// URL (not the missing model) is the one error, for every command with engine flags.
TEST(KvStoreDisk, MalformedStoreUrlIsReportedBeforeTheModelLoads) {
  const std::string err_path = ::testing::TempDir() + "pds_kvstore_early_" + std::to_string(::getpid()) + ".txt";
  for (const char* cmd : {"serve --port 1", "decode --port 1", "prefill --port 1", "generate -p hi"}) {
    const std::string line = testing::pdserve_bin() + " " + cmd + " --model /nonexistent/pdserve-model.gguf" +
                             " --kv-store 'http://127.0.0.1:6379' >/dev/null 2>" + err_path;
    pdserve::Run r;
    const int status = std::system(line.c_str());
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::ifstream e(err_path);
    std::stringstream ss;
    ss << e.rdbuf();
    r.err = ss.str();
    SCOPED_TRACE(cmd);
    expect_one_line_error(r, "--kv-store", 2);
    EXPECT_EQ(r.err.find("pdserve-model.gguf"), std::string::npos) << r.err;
  }
  std::remove(err_path.c_str());
}

}  // namespace
}  // namespace pdserve
