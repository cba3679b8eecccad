// kernels/cpu_features: ISA names, the cap on kAuto (force_isa, PDSERVE_ISA) and the
// fallback of forced paths, and swiglu's per-ISA kernels against its scalar path, bit for bit.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/ops.h"
#include "support/pdserve_bin.h"

namespace pdserve {
namespace {

using kernels::Isa;

constexpr Isa kPaths[] = {Isa::kScalar, Isa::kAvx2, Isa::kAvx512Vnni};

Isa lower(Isa a, Isa b) { return static_cast<int>(a) < static_cast<int>(b) ? a : b; }

/// The CPU's best path (force_isa(kAuto) lifts every cap).
Isa cpu_best() { return kernels::force_isa(Isa::kAuto); }

/// Restores the cap PDSERVE_ISA set when a test ends.
class CpuFeatures : public ::testing::Test {
 protected:
  void TearDown() override {
    const char* env = std::getenv("PDSERVE_ISA");
    const auto cap = env ? kernels::parse_isa(env) : std::nullopt;
    kernels::force_isa(cap.value_or(Isa::kAuto));
  }
};

TEST_F(CpuFeatures, NamesRoundTrip) {
  for (Isa isa : {Isa::kAuto, Isa::kScalar, Isa::kAvx2, Isa::kAvx512Vnni}) EXPECT_EQ(kernels::parse_isa(kernels::isa_name(isa)), isa);
  EXPECT_EQ(kernels::parse_isa("avx512"), Isa::kAvx512Vnni);
  EXPECT_EQ(kernels::parse_isa("sse2"), std::nullopt);
  EXPECT_EQ(kernels::parse_isa(""), std::nullopt);
}

TEST_F(CpuFeatures, ForceIsaCapsAutoAtWhatTheCpuHas) {
  const Isa best = cpu_best();
  EXPECT_TRUE(kernels::isa_available(best));
  for (Isa isa : kPaths) {
    const Isa got = kernels::force_isa(isa);
    EXPECT_EQ(got, lower(isa, best)) << kernels::isa_name(isa);
    EXPECT_EQ(kernels::best_isa(), got);
    EXPECT_EQ(kernels::resolve_isa(Isa::kAuto), got);
  }
  EXPECT_EQ(kernels::force_isa(Isa::kAuto), best);
}

TEST_F(CpuFeatures, ForcedPathFallsToTheNextOneTheCpuHas) {
  kernels::force_isa(Isa::kScalar);  // the cap is on kAuto only
  for (Isa isa : kPaths) {
    Isa want = isa;
    while (!kernels::isa_available(want)) want = static_cast<Isa>(static_cast<int>(want) - 1);
    EXPECT_EQ(kernels::resolve_isa(isa), want) << kernels::isa_name(isa);
  }
}

// Under ctest's PDSERVE_ISA runs (tests/CMakeLists.txt) this shows the variable took effect.
TEST_F(CpuFeatures, PdserveIsaCapsAuto) {
  const char* env = std::getenv("PDSERVE_ISA");
  if (env == nullptr || !kernels::parse_isa(env)) GTEST_SKIP() << "PDSERVE_ISA unset or invalid";
  const Isa cap = *kernels::parse_isa(env);
  const Isa best = cpu_best();
  EXPECT_EQ(kernels::force_isa(cap), cap == Isa::kAuto ? best : lower(cap, best));
  std::printf("PDSERVE_ISA=%s: kernels run %s\n", env, kernels::isa_name(kernels::best_isa()));
}

// env_isa() is PDSERVE_ISA as read at start (kAuto when unset or not a path's name), what
// the start log's "(PDSERVE_ISA)" rests on; force_isa() does not change it. Runs plain and
// under ctest's PDSERVE_ISA runs.
TEST_F(CpuFeatures, EnvIsaIsThePdserveIsaReadAtStart) {
  const char* env = std::getenv("PDSERVE_ISA");
  const Isa want = env && *env ? kernels::parse_isa(env).value_or(Isa::kAuto) : Isa::kAuto;
  EXPECT_EQ(kernels::env_isa(), want);
  kernels::force_isa(Isa::kScalar);
  EXPECT_EQ(kernels::env_isa(), want);
  // The start log credits PDSERVE_ISA only for a path this CPU has.
  EXPECT_EQ(kernels::isa_set_by_env(), want != Isa::kAuto && kernels::isa_available(want));
}

/// stderr of `PDSERVE_ISA=<value> pdserve --help`.
std::string pdserve_stderr(const std::string& value) {
  const std::string cmd = "PDSERVE_ISA=" + value + " " + testing::pdserve_bin() + " --help 2>&1 >/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 256> buf;
  while (p && std::fgets(buf.data(), buf.size(), p)) out += buf.data();
  if (p) {
    EXPECT_EQ(pclose(p), 0) << cmd;
  }
  return out;
}

TEST_F(CpuFeatures, PdserveIsaUnknownOrUnsupportedValueWarnsAtStart) {
  EXPECT_NE(pdserve_stderr("sse9").find("PDSERVE_ISA='sse9' is not one of auto, avx512, avx2, scalar"), std::string::npos);
  EXPECT_EQ(pdserve_stderr("scalar").find("PDSERVE_ISA"), std::string::npos);
  EXPECT_EQ(pdserve_stderr("avx512vnni").find("is not one of"), std::string::npos);  // the start log's name (README)
  if (!kernels::isa_available(Isa::kAvx512Vnni)) {
    EXPECT_NE(pdserve_stderr("avx512").find("PDSERVE_ISA=avx512: this CPU lacks it, running"), std::string::npos);
  }
}

/// Gate values over the whole range of swiglu's exp: normal, the flush of exp(-x) to 0
/// (x > 103.97) and its subnormal results (87.3 < x < 104), overflow (x < -88.7), ±0, ±inf.
std::vector<float> gate_values() {
  std::mt19937 rng(11);
  std::vector<float> v;
  for (float s : {0.5f, 4.f, 40.f, 200.f}) {
    std::normal_distribution<float> d(0.f, s);
    for (int i = 0; i < 4096; ++i) v.push_back(d(rng));
  }
  for (float x = 80.f; x < 110.f; x += 0.0137f) v.insert(v.end(), {x, -x});
  v.insert(v.end(), {0.f, -0.f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                     std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(), 1e-30f, -1e-30f});
  while (v.size() % 16 != 5) v.push_back(1.f);  // a tail
  return v;
}

TEST_F(CpuFeatures, SwigluEveryPathEqualsTheScalarPathBitForBit) {
  const std::vector<float> g = gate_values();
  std::vector<float> u(g.size());
  std::mt19937 rng(12);
  std::normal_distribution<float> d(0.f, 2.f);
  for (float& x : u) x = d(rng);
  std::vector<float> want = g;
  kernels::swiglu(want.data(), u.data(), static_cast<int>(g.size()), Isa::kScalar);
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512Vnni}) {
    if (!kernels::isa_available(isa)) {
      std::printf("(%s: not on this CPU)\n", kernels::isa_name(isa));
      continue;
    }
    std::vector<float> got = g;
    kernels::swiglu(got.data(), u.data(), static_cast<int>(g.size()), isa);
    int bad = 0;
    for (size_t i = 0; i < g.size(); ++i)
      if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0 && !(std::isnan(got[i]) && std::isnan(want[i])) && ++bad <= 5)
        ADD_FAILURE() << kernels::isa_name(isa) << " gate " << g[i] << " up " << u[i] << ": " << got[i] << " vs scalar " << want[i];
    EXPECT_EQ(bad, 0) << kernels::isa_name(isa);
  }
}

}  // namespace
}  // namespace pdserve
