// per_isa.hpp — the one choice among a set of functions compiled once per ISA (the attention
// kernel's tables, the 16-bit conversions, the training lab's GEMM and GELU, the peak meters),
// as Highway's HWY_DYNAMIC_DISPATCH chooses from an HWY_EXPORT table: each caller declares its
// set once as a PerIsa, and per_isa() resolves Isa::automatic by the dispatch rule
// (sdpa/dispatch.hpp), refuses an ISA this CPU lacks and returns that ISA's entry.
#pragma once

#include <string>

#include "sdpa/dispatch.hpp"
#include "sdpa/error.hpp"

namespace sdpa {

// An x86 path's entry in a PerIsa table: the entry where those paths are compiled in (x86-64),
// an empty one elsewhere (aarch64), where their translation units are not built and per_isa()
// never returns the entry, since isa_supported() is false for them. SDPA_ARM_ENTRY likewise
// for the aarch64 paths.
#if defined(__x86_64__)
#define SDPA_X86_ENTRY(...) __VA_ARGS__
#else
#define SDPA_X86_ENTRY(...) \
  {}
#endif
// SDPA_AVX512_ENTRY: an entry of the avx512 path, whose translation units a build with
// SDPA_AVX512=OFF leaves out (it defines SDPA_NO_AVX512); isa_supported() is then false for it.
#if defined(__x86_64__) && !defined(SDPA_NO_AVX512)
#define SDPA_AVX512_ENTRY(...) __VA_ARGS__
#else
#define SDPA_AVX512_ENTRY(...) \
  {}
#endif
#if defined(__aarch64__)
#define SDPA_ARM_ENTRY(...) __VA_ARGS__
#else
#define SDPA_ARM_ENTRY(...) \
  {}
#endif

// sve has one build per vector length (256 and 512 bits, src/CMakeLists.txt): per_isa() takes
// the one of this CPU's length, the one place that choice is made.
template <class T>
struct PerIsa {
  T scalar, avx2, avx512, neon, sve256, sve512;
};

/// set's entry for `isa` (Isa::automatic: active_isa()); throws sdpa::Error naming `what` for an
/// ISA this CPU cannot run.
template <class T>
const T& per_isa(const PerIsa<T>& set, Isa isa, const char* what) {
  if (isa == Isa::automatic) isa = active_isa();
  if (!isa_supported(isa)) throw Error(std::string(what) + ": this CPU cannot run the " + isa_name(isa) + " kernel");
  switch (isa) {
    case Isa::avx512: return set.avx512;
    case Isa::avx2: return set.avx2;
    case Isa::neon: return set.neon;
    case Isa::sve: return cpu_features().sve_bits == 512 ? set.sve512 : set.sve256;
    default: return set.scalar;
  }
}

}  // namespace sdpa
