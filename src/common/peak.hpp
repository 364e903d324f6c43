// peak.hpp — this machine's fp32 FMA peak, measured now.
#pragma once

#include <cstdint>

#include "sdpa/attention.hpp"  // Isa

namespace sdpa::peak {

struct Result {
  double gflops = 0;     // fp32 FLOP/s / 1e9 over all threads (an FMA counts 2)
  const char* isa = "";  // the instruction set measured: sdpa::isa_name(sdpa::active_isa())
  int threads = 0;
};

/// Runs `threads` threads, each a loop of 12 independent vector FMA chains written in
/// inline assembly (so the compiler can neither merge nor spill them), for about
/// `seconds`, best of three; on the ISA the kernels run, sdpa::active_isa() (SDPA_ISA or
/// the best this CPU has) unless `isa` names one: avx512 zmm FMAs, avx2 ymm FMAs, scalar
/// the portable build's SSE2 (4-float multiplies and adds, no FMA); on aarch64 the scalar
/// path's meter is 12 scalar FMA chains in plain C++. Throws sdpa::Error for an ISA this CPU
/// cannot run.
Result measure(int threads, double seconds = 0.2, Isa isa = Isa::automatic);

/// Whether this CPU runs `vdpbf16ps` (AVX512_BF16, on top of the avx512 path's extensions).
bool bf16_dot_supported();

/// The same loop as `measure` on `vdpbf16ps` (12 chains of zmm): bf16 pairs multiplied and
/// added into fp32 lanes, two products per lane, counted as 4 FLOPs per lane, so the figure
/// compares with the fp32 FMA peak FLOP for FLOP: above it, a bf16 GEMM on this
/// instruction could beat the fp32 one; at or below, it cannot. Throws sdpa::Error where
/// !bf16_dot_supported().
Result measure_bf16_dot(int threads, double seconds = 0.2);

/// Read bandwidth from memory in GB/s (1e9 bytes/s): `threads` threads stream disjoint
/// parts of a `bytes` buffer (far larger than the last-level cache) into vector sums,
/// best of five passes after one that faults the pages in.
double read_bandwidth_gbs(int threads, double bytes = 1024.0 * 1024 * 1024);

/// A run of floats to read (any alignment).
struct Span {
  const float* data = nullptr;
  std::int64_t n = 0;
};

/// Seconds for `threads` threads (OpenMP, like the kernels) to read every float of the
/// spans once into vector sums, each thread a contiguous share of each span: the plain
/// read of exactly these bytes, to time alternately with a kernel that must read them.
double read_seconds(const Span* spans, int count, int threads);

}  // namespace sdpa::peak
