// sdpa/dispatch.hpp — which compiled path runs a call, and the one rule that picks it.
//
// Every per-ISA piece of the project (the attention kernel, the 16-bit conversions, the
// training lab's GEMM and GELU, the peak meters) is compiled once per instruction set and
// chosen by the same rule, resolved once per process:
//
//   what the CPU has (CpuFeatures)  +  SDPA_ISA, SDPA_AMX, SDPA_BF16_DOT (DispatchSettings)
//        -> select_dispatch() ->  Dispatch { isa, engine }
//
// select_dispatch() is a pure function, so the rule is tested as a table of (features,
// variables) -> (isa, engine) on any machine (tests/kernel/test_dispatch.cpp).
#pragma once

#include <string>

namespace sdpa {

/// Instruction set of the fast kernels. `automatic` is resolved once per process:
/// the SDPA_ISA environment variable (scalar | avx2 | avx512 | neon | sve) if set, else the
/// best the CPU supports. Forcing an ISA the CPU lacks throws sdpa::Error. avx2 and avx512 are
/// x86-64's paths, neon (AdvSIMD) and sve aarch64's; a build holds its own architecture's only
/// (and an x86-64 build configured with SDPA_AVX512=OFF no avx512).
/// sve runs at the CPU's vector length, 256 or 512 bits (one build of the kernel for each).
enum class Isa { automatic, scalar, avx2, avx512, neon, sve };

/// What runs the avx512 (x86-64) or neon (aarch64) path's 16-bit (bf16, fp16) products:
///   widened  each operand widened to fp32 on load, fp32 FMAs (every other path too)
///   amx      AMX-BF16 tiles: bf16 as it is, fp16 split into bf16 hi + lo (x86-64)
///   dot      bf16 pair dot products, AVX512_BF16's vdpbf16ps or aarch64's BFDOT: bf16 only,
///            fp16 widened
enum class Engine16 { widened, amx, dot };

/// What the dispatch reads of a CPU. In a build without the avx512 path (SDPA_AVX512=OFF) the
/// CPU's avx512, avx512_bf16 and amx_bf16 read false: the features a path of the build can use.
struct CpuFeatures {
  bool avx2 = false;         // AVX2, FMA and F16C: the avx2 path's extensions
  bool avx512 = false;       // AVX-512 F, DQ, BW and VL on top of those: the avx512 path's
  bool avx512_bf16 = false;  // AVX512_BF16 (vdpbf16ps, vcvtneps2bf16)
  bool amx_bf16 = false;     // AMX-TILE and AMX-BF16, and Linux granted the tile data state
  bool amd = false;          // the vendor is AMD (the dot engine's default: see select_dispatch)
  bool neon = false;         // aarch64's AdvSIMD (the hwcap ASIMD): the neon path's
  int sve_bits = 0;          // SVE's vector length in bits (the hwcap SVE, then Linux's prctl); 0: no SVE
  bool arm_bf16 = false;     // aarch64's BF16 (the hwcap2 BF16: BFDOT, BFMMLA, BFCVT)
  bool intel = false;        // the vendor is Intel (a paged cache's heads read together: api.cpp)
};

/// The environment variables the dispatch reads, as their text ("" when unset).
///   SDPA_ISA       auto | scalar | avx2 | avx512 | neon | sve
///   SDPA_AMX       0 (never AMX tiles) | 1 | auto (where the CPU has them; the default)
///   SDPA_BF16_DOT  0 (never vdpbf16ps or BFDOT) | 1 (wherever the CPU has it and AMX is not
///                  taken) | auto (vdpbf16ps on AMD's CPUs only, BFDOT nowhere; the default)
struct DispatchSettings {
  std::string isa, amx, bf16_dot;
};

/// The outcome: the ISA `Isa::automatic` resolves to, and the engine of the avx512 path's
/// (aarch64: the neon path's) 16-bit products (a call that runs another path widens), each
/// with the reason in words.
struct Dispatch {
  Isa isa = Isa::scalar;
  Engine16 engine = Engine16::widened;
  std::string isa_reason, engine_reason;
};

/// The rule. The ISA: SDPA_ISA's if set (an ISA the CPU lacks throws), else the widest the
/// CPU has. The engine, where the CPU runs the avx512 path: AMX tiles where the CPU has
/// them unless SDPA_AMX=0; else vdpbf16ps where the CPU has AVX512_BF16 and either
/// SDPA_BF16_DOT=1 or (unset or auto) the CPU is AMD's — on Intel's Sapphire Rapids the
/// instruction runs at half the FMA's flop rate and the engine lost to widening
/// (docs/performance.md); else widened. On aarch64 the neon path's engine: BFDOT where the
/// CPU has BF16 and SDPA_BF16_DOT=1 (opt-in until an Arm CPU has measured it), else widened.
/// A value outside a variable's list throws sdpa::Error naming the variable, whichever ISA is
/// chosen.
Dispatch select_dispatch(const CpuFeatures& cpu, const DispatchSettings& settings);

/// This CPU, read once (x86-64: CPUID, and for AMX Linux is asked once for the tile state;
/// aarch64: the kernel's hwcaps, getauxval(AT_HWCAP)).
const CpuFeatures& cpu_features();
/// The three variables as this process's environment has them now.
DispatchSettings dispatch_settings_from_environment();
/// select_dispatch(cpu_features(), the environment), once per process; a bad variable
/// throws at each call.
const Dispatch& active_dispatch();

/// The ISA `automatic` resolves to in this process: active_dispatch().isa.
Isa active_isa();
/// Whether this CPU can run the given ISA's kernel.
bool isa_supported(Isa isa);
/// "scalar", "avx2", "avx512", "neon", "sve", "automatic".
const char* isa_name(Isa isa);
/// "widened", "amx", "dot".
const char* engine_name(Engine16 engine);
/// The names parse_isa takes, for help and error texts:
/// "auto | scalar | avx2 | avx512 (x86-64) | neon | sve (aarch64)".
const char* isa_choices();
/// Parses an ISA name; throws sdpa::Error naming `what` for an unknown one.
Isa parse_isa(const char* name, const char* what = "isa");
/// The engine a call on `isa` (automatic: active_isa()) runs its 16-bit products on:
/// active_dispatch().engine on the avx512 and neon paths, widened elsewhere.
Engine16 engine_for(Isa isa = Isa::automatic);
/// engine_for(isa) == Engine16::amx: bf16 and fp16 forward and backward products on AMX-BF16
/// tiles (docs/contract.md). Decoding and fp32 are unaffected.
bool amx_bf16_active(Isa isa = Isa::automatic);
/// engine_for(isa) == Engine16::dot: bf16's forward and backward products on vdpbf16ps
/// (aarch64: BFDOT); fp16 widens on that path. Decoding and fp32 are unaffected.
bool bf16_dot_active(Isa isa = Isa::automatic);

}  // namespace sdpa
