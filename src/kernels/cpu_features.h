// The CPU's instruction sets, detected once, and the choice of SIMD path: the one place
// that decides which per-ISA kernel file runs. Generic code is compiled for the build
// baseline (x86-64-v3: AVX2, FMA, F16C, BMI2); each *_avx2.cc / *_avx512*.cc file for its
// own ISA, called only when best_isa() / resolve_isa() allow it.
#pragma once

#include <optional>
#include <string_view>

namespace pdserve::kernels {

/// Instruction-set paths, lowest first after kAuto. kAuto picks best_isa() (checked at run
/// time); the others force one path (tests, benchmarks). Every path computes the same
/// bits (each kernel family's header says against which reference).
enum class Isa { kAuto, kScalar, kAvx2, kAvx512Vnni };

/// The x86 features the kernel families look at (cpuid, read once).
struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false, avx512vnni = false, avx512bf16 = false;
  bool amx_tile = false, amx_int8 = false;  // CPUID leaf 7 EDX bits 24, 25 (the OS's part: amx_available())
  bool gfni = false;                        // GF2P8AFFINEQB and kin (CPUID leaf 7 ECX bit 8)
  bool amd = false;                         // vendor AuthenticAMD (some kernels pick an instruction by it)
};
const CpuFeatures& cpu_features();

/// True when this CPU can run `isa`: kAvx2 = AVX2 + FMA + F16C; kAvx512Vnni = AVX-512
/// F/BW/VL/DQ + VNNI (and AVX2's); kAuto and kScalar always.
bool isa_available(Isa isa);
/// "auto", "scalar", "avx2", "avx512vnni".
const char* isa_name(Isa isa);
/// The Isa named `name`: isa_name()'s names, plus "avx512" for kAvx512Vnni; nullopt if unknown.
std::optional<Isa> parse_isa(std::string_view name);

/// The path kAuto resolves to: the best this CPU has, lowered by the environment variable
/// PDSERVE_ISA (auto | avx512 | avx2 | scalar, read once at start; an unknown value or one
/// the CPU lacks logs a warning and is ignored / lowered to what the CPU has) or by
/// force_isa().
Isa best_isa();

/// PDSERVE_ISA's cap as read at start: kAuto when unset, "auto" or not a path's name (then
/// ignored); force_isa() does not change it.
Isa env_isa();

/// True when PDSERVE_ISA set the path kAuto started with: it names a path this CPU has (a
/// path the CPU lacks is ignored, as is an unknown value). For logs that say why a path runs.
bool isa_set_by_env();

/// Caps the path kAuto resolves to at `isa` from now on (in process: tests, benchmarks);
/// kAuto lifts the cap (PDSERVE_ISA's cap included). A path above the CPU's is lowered to
/// the CPU's best. Returns the path kAuto now resolves to. Kernel calls already running
/// finish on the path they started with.
Isa force_isa(Isa isa);

/// True when this process may run AMX-INT8 tile instructions: the CPU has AMX-TILE,
/// AMX-INT8 (and GFNI, which qgemm_avx512_amx.cc also uses) and Linux granted the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM, asked
/// once, process-wide; see the kernel's Documentation/arch/x86/xstate.rst).
bool amx_available();
/// True when the AVX-512 VNNI kernels may hand their GEMMs to AMX tiles (qgemm_avx512_amx.cc):
/// amx_available(), not turned off by the environment variable PDSERVE_AMX=0 (read once
/// at start) or by force_amx(false). AMX gives the same bits (the same exact int32 sums).
bool amx_enabled();
/// Turns the AMX GEMMs on (when available) or off from now on, in process (tests,
/// benchmarks); returns amx_enabled(). Not while a matmul runs on another thread: a matmul
/// reads the setting when it sizes its packed activations, when it packs them and in its
/// kernels (the AMX copies of Q4_0 and Q6_K), which must agree.
bool force_amx(bool on);

/// True when the AVX-512 VNNI K-quant row kernels may unpack with GFNI's GF2P8AFFINEQB
/// (qgemm_avx512_krows_gfni.cc): the CPU has GFNI and AVX-512 VNNI, not turned off by the
/// environment variable PDSERVE_GFNI=0 (read once at start) or by force_gfni(false). The
/// same bits either way.
bool gfni_enabled();
/// Turns the GFNI kernels on (when the CPU has GFNI) or off from now on, in process
/// (tests, benchmarks); returns gfni_enabled().
bool force_gfni(bool on);

/// True when the K-quant row kernels pack two int16 sums with one VPERMT2W rather than a
/// shift and a VPBLENDMW (qgemm_avx512_krows.inc): VPERMT2W is the faster on AMD, three
/// micro-ops on Intel. Starts as cpu_features().amd; force_vpermt2w() (tests) sets it. The
/// same bits either way.
bool prefer_vpermt2w();
void force_vpermt2w(bool on);

/// The path a kernel family runs for a request: kAuto → best_isa(); a forced path the CPU
/// lacks → the next one down it has (AVX-512 VNNI → AVX2 → scalar).
Isa resolve_isa(Isa isa);

}  // namespace pdserve::kernels
