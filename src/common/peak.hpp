// peak.hpp — this machine's fp32 FMA peak, measured now.
#pragma once

#include <cstdint>

namespace sdpa::peak {

struct Result {
  double gflops = 0;     // fp32 FLOP/s / 1e9 over all threads (an FMA counts 2)
  const char* isa = "";  // the instruction set measured ("avx512", "avx2", or "none")
  int threads = 0;
};

/// Runs `threads` threads, each a loop of 12 independent vector FMA chains written in
/// inline assembly (so the compiler can neither merge nor spill them), for about
/// `seconds`, best of three; uses the widest FMA this CPU has.
Result measure(int threads, double seconds = 0.2);

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
