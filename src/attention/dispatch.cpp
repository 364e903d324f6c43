// dispatch.cpp — the CPU's features, the one selection rule (sdpa/dispatch.hpp), resolved
// once per process.
#include "sdpa/dispatch.hpp"

#if defined(__x86_64__)
#include <cpuid.h>
#elif defined(__aarch64__) && defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#include <sys/prctl.h>
#endif
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "sdpa/error.hpp"

namespace sdpa {

namespace {

#if defined(__x86_64__)
// AMX's tile registers are 8 KiB of state that Linux (5.16 on) gives a process only on
// request: until arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) succeeds, the first tile
// instruction faults. The request is per process and is made once, here, before any tile is
// touched.
bool amx_granted() {
#if defined(__linux__) && defined(SYS_arch_prctl)
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}
#endif

#if defined(__x86_64__)
constexpr const char* kNoVectorPath = " (no AVX2)";
#elif defined(__aarch64__)
constexpr const char* kNoVectorPath = " (no AdvSIMD)";
#else
constexpr const char* kNoVectorPath = " (the scalar path: no vector path is built for this CPU)";
#endif
#if defined(SDPA_NO_AVX512)
constexpr const char* kNoAvx512 = "no AVX-512 path in this build (the SDPA_AVX512 option left it out)";
#else
constexpr const char* kNoAvx512 = "no AVX-512 on this CPU";
#endif

CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__)
  __builtin_cpu_init();
  // Exactly the extensions src/CMakeLists.txt compiles each path with (SDPA_*_FLAGS).
  // F16C: CPUID leaf 1 ECX bit 29 (clang's __builtin_cpu_supports does not take "f16c").
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx >> 29 & 1u) != 0;
  f.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
  f.avx512 = f.avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
#if defined(SDPA_NO_AVX512)
  // This build left out the AVX-512 path and its engines (CMake's SDPA_AVX512): the features
  // below are what a path of this build can use, so to the dispatch the CPU has none of theirs.
  f.avx512 = false;
#endif
  f.avx512_bf16 = f.avx512 && __builtin_cpu_supports("avx512bf16");
  // CPUID leaf 7 EDX: bit 22 AMX-BF16, bit 24 AMX-TILE (GCC 12's __builtin_cpu_supports does
  // not know them). The tile loops also use vcvtneps2bf16 (AVX512_BF16).
  const bool amx = __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && (edx >> 22 & 1u) != 0 && (edx >> 24 & 1u) != 0;
  f.amx_bf16 = amx && f.avx512_bf16 && amx_granted();
  f.amd = __builtin_cpu_is("amd");
  f.intel = __builtin_cpu_is("intel");
#elif defined(__aarch64__) && defined(__linux__)
  // AdvSIMD is in every ARMv8-A application core, but Linux says so (HWCAP_ASIMD), and a
  // kernel built without it would run the scalar path rather than fault.
  f.neon = (getauxval(AT_HWCAP) & HWCAP_ASIMD) != 0;
  // SVE's vector length is the hardware's (or less, where Linux was asked for less): this
  // thread's, in bytes, in the low 16 bits of PR_SVE_GET_VL.
  if ((getauxval(AT_HWCAP) & HWCAP_SVE) != 0) {
    const int vl = prctl(PR_SVE_GET_VL);
    if (vl > 0) f.sve_bits = (vl & PR_SVE_VL_LEN_MASK) * 8;
  }
  f.arm_bf16 = f.neon && (getauxval(AT_HWCAP2) & HWCAP2_BF16) != 0;
#endif
  // Elsewhere every feature stays false and the scalar path runs.
  return f;
}

bool supported_by(const CpuFeatures& cpu, Isa isa) {
  switch (isa) {
    case Isa::automatic:
    case Isa::scalar: return true;
    case Isa::avx2: return cpu.avx2;
    case Isa::avx512: return cpu.avx512;
    case Isa::neon: return cpu.neon;
    case Isa::sve: return cpu.neon && (cpu.sve_bits == 256 || cpu.sve_bits == 512);  // the widths built
  }
  return false;
}

// A 0 | 1 | auto variable: its value, "auto" when unset; another value throws.
std::string switch_value(const std::string& value, const char* name) {
  if (value.empty() || value == "auto") return "auto";
  if (value == "0" || value == "1") return value;
  throw Error(std::string(name) + ": expected 0, 1 or auto, not '" + value + "'");
}

std::string variable(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

}  // namespace

Dispatch select_dispatch(const CpuFeatures& cpu, const DispatchSettings& settings) {
  Dispatch d;
  const std::string amx = switch_value(settings.amx, "SDPA_AMX");
  const std::string dot = switch_value(settings.bf16_dot, "SDPA_BF16_DOT");

  if (settings.isa.empty() || parse_isa(settings.isa.c_str(), "SDPA_ISA") == Isa::automatic) {
    // SVE at 128 bits holds AdvSIMD's 4 floats: neon is kept there; at a length no build has
    // (384, 1024, 2048 bits) too.
    const bool sve = supported_by(cpu, Isa::sve);
    d.isa = cpu.avx512 ? Isa::avx512 : cpu.avx2 ? Isa::avx2 : sve ? Isa::sve : cpu.neon ? Isa::neon : Isa::scalar;
    const std::string sve_note =
        cpu.sve_bits == 0     ? ""
        : cpu.sve_bits == 128 ? "; SVE at 128 bits is no wider"
                              : "; SVE at " + std::to_string(cpu.sve_bits) + " bits has no build (256 and 512 do)";
    d.isa_reason = std::string("the widest path this CPU has") +
                   (cpu.avx512 ? " (AVX-512 F, DQ, BW, VL)"
                    : cpu.avx2 ? std::string(" (AVX2, FMA, F16C; ") + kNoAvx512 + ")"
                    : sve ? " (SVE at " + std::to_string(cpu.sve_bits) + " bits: " + std::to_string(cpu.sve_bits / 32) +
                                " floats a register)"
                    : cpu.neon ? " (AdvSIMD: 4 floats a register" + sve_note + ")"
                               : kNoVectorPath);
  } else {
    d.isa = parse_isa(settings.isa.c_str(), "SDPA_ISA");
    if (!supported_by(cpu, d.isa))
      throw Error(std::string("SDPA_ISA: this CPU cannot run the ") + isa_name(d.isa) + " kernel");
    d.isa_reason = "SDPA_ISA=" + settings.isa;
  }

  if (cpu.neon) {
    // aarch64: BFDOT for the neon path where asked. Not by default: no Arm CPU has measured it
    // against widening yet, and on Intel's AVX512_BF16 the same kind of engine lost.
    if (cpu.arm_bf16 && dot == "1") {
      d.engine = Engine16::dot;
      d.engine_reason = "SDPA_BF16_DOT=1 and the CPU has BF16 (BFDOT), for the neon path";
    } else {
      d.engine_reason = !cpu.arm_bf16 ? "no BF16 (BFDOT) on this CPU: 16-bit operands are widened"
                        : dot == "0"  ? "SDPA_BF16_DOT=0: 16-bit operands are widened"
                                      : "BFDOT is taken only with SDPA_BF16_DOT=1 (not yet measured against "
                                        "widening on an Arm CPU): 16-bit operands are widened";
    }
  } else if (!cpu.avx512) {
    d.engine_reason = std::string(kNoAvx512) + ": 16-bit operands are widened to fp32";
  } else if (cpu.amx_bf16 && amx != "0") {
    d.engine = Engine16::amx;
    d.engine_reason = "the CPU has AMX-BF16 and Linux granted the tile state (SDPA_AMX=0 widens)";
  } else if (cpu.avx512_bf16 && dot != "0" && (dot == "1" || cpu.amd)) {
    d.engine = Engine16::dot;
    d.engine_reason = std::string(dot == "1" ? "SDPA_BF16_DOT=1" : "an AMD CPU with AVX512_BF16") +
                      (cpu.amx_bf16 ? " and SDPA_AMX=0" : ", no AMX") + " (SDPA_BF16_DOT=0 widens)";
  } else {
    d.engine_reason = cpu.amx_bf16       ? "SDPA_AMX=0, and SDPA_BF16_DOT is not 1: 16-bit operands are widened"
                      : !cpu.avx512_bf16 ? "no AMX-BF16 or AVX512_BF16 on this CPU: 16-bit operands are widened"
                      : dot == "0"       ? "SDPA_BF16_DOT=0: 16-bit operands are widened"
                                         : "no AMX, and vdpbf16ps is taken by default on AMD's CPUs only "
                                           "(SDPA_BF16_DOT=1 forces it): 16-bit operands are widened";
  }
  return d;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

DispatchSettings dispatch_settings_from_environment() {
  return {variable("SDPA_ISA"), variable("SDPA_AMX"), variable("SDPA_BF16_DOT")};
}

const Dispatch& active_dispatch() {
  // Once; a bad variable throws here at each call (a static's initialiser that throws is retried).
  static const Dispatch resolved = select_dispatch(cpu_features(), dispatch_settings_from_environment());
  return resolved;
}

Isa active_isa() { return active_dispatch().isa; }

bool isa_supported(Isa isa) { return supported_by(cpu_features(), isa); }

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::automatic: return "automatic";
    case Isa::scalar: return "scalar";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
    case Isa::neon: return "neon";
    case Isa::sve: return "sve";
  }
  return "unknown";
}

const char* engine_name(Engine16 engine) {
  switch (engine) {
    case Engine16::widened: return "widened";
    case Engine16::amx: return "amx";
    case Engine16::dot: return "dot";
  }
  return "unknown";
}

const char* isa_choices() { return "auto | scalar | avx2 | avx512 (x86-64) | neon | sve (aarch64)"; }

Isa parse_isa(const char* name, const char* what) {
  const std::string s = name ? name : "";
  if (s == "auto" || s == "automatic") return Isa::automatic;
  if (s == "scalar") return Isa::scalar;
  if (s == "avx2") return Isa::avx2;
  if (s == "avx512") return Isa::avx512;
  if (s == "neon") return Isa::neon;
  if (s == "sve") return Isa::sve;
  throw Error(std::string(what) + ": unknown instruction set '" + s + "' (expected " + isa_choices() + ")");
}

Engine16 engine_for(Isa isa) {
#if defined(__aarch64__)
  constexpr Isa kEnginePath = Isa::neon;  // the path whose 16-bit products the dispatch's engine runs
#else
  constexpr Isa kEnginePath = Isa::avx512;
#endif
  return (isa == Isa::automatic ? active_isa() : isa) == kEnginePath ? active_dispatch().engine : Engine16::widened;
}
bool amx_bf16_active(Isa isa) { return engine_for(isa) == Engine16::amx; }
bool bf16_dot_active(Isa isa) { return engine_for(isa) == Engine16::dot; }

}  // namespace sdpa
