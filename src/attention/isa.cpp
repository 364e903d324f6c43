// isa.cpp — run-time instruction-set dispatch, resolved once per process.
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "attention/amx.hpp"
#include "sdpa/attention.hpp"

namespace sdpa {

bool isa_supported(Isa isa) {
  switch (isa) {
    case Isa::automatic:
    case Isa::scalar: return true;
    // Exactly the extensions src/CMakeLists.txt compiles each path with (SDPA_*_FLAGS).
    case Isa::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    case Isa::avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("fma") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  }
  return false;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::automatic: return "automatic";
    case Isa::scalar: return "scalar";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
  }
  return "unknown";
}

Isa parse_isa(const char* name, const char* what) {
  const std::string s = name ? name : "";
  if (s == "auto" || s == "automatic") return Isa::automatic;
  if (s == "scalar") return Isa::scalar;
  if (s == "avx2") return Isa::avx2;
  if (s == "avx512") return Isa::avx512;
  throw Error(std::string(what) + ": unknown instruction set '" + s + "' (expected auto, scalar, avx2 or avx512)");
}

namespace {
Isa best_supported() {
  if (isa_supported(Isa::avx512)) return Isa::avx512;
  if (isa_supported(Isa::avx2)) return Isa::avx2;
  return Isa::scalar;
}

Isa resolve_from_environment() {
  const char* env = std::getenv("SDPA_ISA");
  if (env == nullptr || *env == '\0') return best_supported();
  const Isa want = parse_isa(env, "SDPA_ISA");
  if (want == Isa::automatic) return best_supported();
  if (!isa_supported(want)) throw Error(std::string("SDPA_ISA: this CPU cannot run the ") + isa_name(want) + " kernel");
  return want;
}
}  // namespace

Isa active_isa() {
  static const Isa resolved = resolve_from_environment();  // once; a bad SDPA_ISA throws each call
  return resolved;
}

bool amx_bf16_active(Isa isa) {
  return (isa == Isa::automatic ? active_isa() : isa) == Isa::avx512 && detail::amx_bf16_enabled();
}

bool bf16_dot_active(Isa isa) {
  return (isa == Isa::automatic ? active_isa() : isa) == Isa::avx512 && !detail::amx_bf16_enabled() &&
         detail::bf16_dot_enabled();
}

namespace detail {

// AMX's tile registers are 8 KiB of state that Linux (5.16 on) gives a process only on
// request: until arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) succeeds, the first tile
// instruction faults. The request is per process and is made once, here, before any tile is
// touched (kernels_for asks amx_bf16_enabled before it hands out the AMX table).
bool amx_bf16_usable() {
  static const bool usable = [] {
    // CPUID leaf 7 EDX: bit 22 AMX-BF16, bit 24 AMX-TILE (GCC 12's __builtin_cpu_supports
    // does not know them). vcvtneps2bf16 (AVX512_BF16) packs P.
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    const bool amx = (edx >> 22 & 1u) != 0 && (edx >> 24 & 1u) != 0;
    if (!amx || !isa_supported(Isa::avx512) || !__builtin_cpu_supports("avx512bf16")) return false;
#if defined(__linux__) && defined(SYS_arch_prctl)
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
    return false;
#endif
  }();
  return usable;
}

bool amx_bf16_enabled() {
  static const bool enabled = [] {
    const char* env = std::getenv("SDPA_AMX");
    if (env != nullptr && std::strcmp(env, "0") == 0) return false;
    return amx_bf16_usable();
  }();
  return enabled;
}

bool bf16_dot_usable() {
  static const bool usable = isa_supported(Isa::avx512) && __builtin_cpu_supports("avx512bf16");
  return usable;
}

// By default only on AMD's cores (Zen 4 on): on Intel's Sapphire Rapids vdpbf16ps issues at a
// quarter of the FMA's rate, half its flops, and the dot engine ran at 0.63-0.71 × the widening
// path (docs/performance.md, "The vdpbf16ps engine"): an Intel CPU whose AMX is hidden or
// refused widens, as before. SDPA_BF16_DOT=1 takes it wherever the CPU has it, 0 never.
bool bf16_dot_enabled() {
  static const bool enabled = [] {
    const char* env = std::getenv("SDPA_BF16_DOT");
    const std::string want = env != nullptr ? env : "";
    if (want == "0") return false;
    if (want == "1") return bf16_dot_usable();
    if (!want.empty() && want != "auto") throw Error("SDPA_BF16_DOT: expected 0, 1 or auto, not '" + want + "'");
    return bf16_dot_usable() && __builtin_cpu_is("amd");
  }();
  return enabled;
}

}  // namespace detail

}  // namespace sdpa
