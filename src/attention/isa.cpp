// isa.cpp — run-time instruction-set dispatch, resolved once per process.
#include <cstdlib>
#include <cstring>
#include <string>

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

}  // namespace sdpa
