#include "kernels/cpu_features.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace pdserve::kernels {
namespace {

CpuFeatures detect() {
  __builtin_cpu_init();
  CpuFeatures f;
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  // F16C from CPUID leaf 1, ECX bit 29 (clang's __builtin_cpu_supports has no "f16c"); its
  // YMM state is the OS support AVX2's check already implies.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  f.f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  f.avx512dq = __builtin_cpu_supports("avx512dq");
  f.avx512vnni = __builtin_cpu_supports("avx512vnni");
  f.avx512bf16 = __builtin_cpu_supports("avx512bf16");
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) {
    f.amx_tile = (edx & (1u << 24)) != 0;
    f.amx_int8 = (edx & (1u << 25)) != 0;
    f.gfni = (ecx & (1u << 8)) != 0;
  }
  f.amd = __builtin_cpu_is("amd");
  return f;
}

// The best path of this CPU.
Isa cpu_isa() {
  static const Isa best = isa_available(Isa::kAvx512Vnni) ? Isa::kAvx512Vnni
                          : isa_available(Isa::kAvx2)     ? Isa::kAvx2
                                                          : Isa::kScalar;
  return best;
}

Isa lower(Isa a, Isa b) { return static_cast<int>(a) < static_cast<int>(b) ? a : b; }

// PDSERVE_ISA's cap (kAuto: none), with its warnings (on stderr: read at static
// initialisation, before any logger is set up).
Isa env_cap() {
  const char* v = std::getenv("PDSERVE_ISA");
  if (v == nullptr || *v == '\0') return Isa::kAuto;
  const std::optional<Isa> isa = parse_isa(v);
  if (!isa) {
    std::fprintf(stderr, "pdserve: warning: PDSERVE_ISA='%s' is not one of auto, avx512, avx2, scalar: ignored (running %s)\n", v,
                 isa_name(cpu_isa()));
    return Isa::kAuto;
  }
  if (!isa_available(*isa))
    std::fprintf(stderr, "pdserve: warning: PDSERVE_ISA=%s: this CPU lacks it, running %s\n", v, isa_name(cpu_isa()));
  return *isa;
}

// The cap on kAuto (kAuto: none); starts as PDSERVE_ISA's.
std::atomic<Isa>& cap() {
  static std::atomic<Isa> c{env_isa()};
  return c;
}

// Reads PDSERVE_ISA at program start, so that its warnings come first.
[[maybe_unused]] const bool kEnvRead = (cap(), true);

// Asks Linux for the AMX tile data state (XFEATURE_XTILEDATA = 18) for this process.
bool request_amx_permission() {
  constexpr int kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

// False when the environment variable `name` is "0", "off" or "false".
bool env_on(const char* name) {
  const char* v = std::getenv(name);
  const std::string_view s = v ? v : "";
  return !(s == "0" || s == "off" || s == "false");
}

// AMX's switch: starts off when PDSERVE_AMX is "0" / "off" / "false".
std::atomic<bool>& amx_switch() {
  static std::atomic<bool> on{env_on("PDSERVE_AMX")};
  return on;
}

// GFNI's switch: starts off when PDSERVE_GFNI is "0" / "off" / "false".
std::atomic<bool>& gfni_switch() {
  static std::atomic<bool> on{env_on("PDSERVE_GFNI")};
  return on;
}

}  // namespace

Isa env_isa() {
  static const Isa e = env_cap();  // once: its warnings are printed once
  return e;
}

bool isa_set_by_env() { return env_isa() != Isa::kAuto && isa_available(env_isa()); }

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

bool isa_available(Isa isa) {
  const CpuFeatures& f = cpu_features();
  const bool avx2 = f.avx2 && f.fma && f.f16c;
  switch (isa) {
    case Isa::kAuto: case Isa::kScalar: return true;
    case Isa::kAvx2: return avx2;
    case Isa::kAvx512Vnni: return avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512vnni;
  }
  return false;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAuto: return "auto";
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512Vnni: return "avx512vnni";
  }
  return "?";
}

std::optional<Isa> parse_isa(std::string_view name) {
  for (Isa isa : {Isa::kAuto, Isa::kScalar, Isa::kAvx2, Isa::kAvx512Vnni})
    if (name == isa_name(isa)) return isa;
  if (name == "avx512") return Isa::kAvx512Vnni;
  return std::nullopt;
}

Isa best_isa() {
  const Isa c = cap().load(std::memory_order_relaxed);
  return c == Isa::kAuto ? cpu_isa() : lower(c, cpu_isa());
}

Isa force_isa(Isa isa) {
  cap().store(isa, std::memory_order_relaxed);
  return best_isa();
}

bool amx_available() {
  static const bool ok = [] {
    const CpuFeatures& f = cpu_features();
    // GFNI too: the AMX file is built with it (every AMX CPU so far has it).
    return f.amx_tile && f.amx_int8 && f.gfni && isa_available(Isa::kAvx512Vnni) && request_amx_permission();
  }();
  return ok;
}

bool amx_enabled() { return amx_switch().load(std::memory_order_relaxed) && amx_available(); }

bool force_amx(bool on) {
  amx_switch().store(on, std::memory_order_relaxed);
  return amx_enabled();
}

bool gfni_enabled() {
  static const bool has = cpu_features().gfni && isa_available(Isa::kAvx512Vnni);
  return has && gfni_switch().load(std::memory_order_relaxed);
}

bool force_gfni(bool on) {
  gfni_switch().store(on, std::memory_order_relaxed);
  return gfni_enabled();
}

namespace {
std::atomic<bool>& vpermt2w_switch() {
  static std::atomic<bool> on{cpu_features().amd};
  return on;
}
}  // namespace

bool prefer_vpermt2w() { return vpermt2w_switch().load(std::memory_order_relaxed); }
void force_vpermt2w(bool on) { vpermt2w_switch().store(on, std::memory_order_relaxed); }

Isa resolve_isa(Isa isa) {
  if (isa == Isa::kAuto) return best_isa();
  while (!isa_available(isa)) isa = static_cast<Isa>(static_cast<int>(isa) - 1);
  return isa;
}

}  // namespace pdserve::kernels
