// peaks.hpp — this machine's peaks, measured in the benchmark's own run (the meters are
// common/peak.hpp), kept per thread count as the largest of the measurements taken.
//
// Benchmarks measure before and after their timings and keep the larger: on a shared
// machine a neighbour can depress one measurement, and a depressed peak would flatter
// the kernel (fractions of the larger err on the side of understating it).
#pragma once

#include <map>
#include <string>

#include "sdpa/attention.hpp"

namespace sdpa::bench {

struct Peaks {
  Isa isa = Isa::automatic;          // the ISA whose FMA peak to measure (automatic: the one in use)
  std::map<int, double> fma_gflops;  // threads -> fp32 FMA peak, GFLOP/s
  std::map<int, double> read_gbs;    // threads -> read bandwidth of a 1 GiB buffer, GB/s (best pass)
  std::map<int, double>
      bf16_dot_gflops;  // threads -> vdpbf16ps peak, GFLOP/s (measured for bf16 rows, where the CPU has it)
  std::string fma_isa;  // the vector width the FMA peak was measured on

  /// Measures (again) and keeps the larger.
  void measure_fma(int threads);
  void measure_read(int threads);
  void measure_bf16_dot(int threads);

  /// 0 when not measured for this thread count.
  double fma(int threads) const;
  double read(int threads) const;
  double bf16_dot(int threads) const;

  /// Cores' worth the `threads`-thread FMA peak shows: its ratio to the one-thread peak
  /// (0 when either is not measured). On a host shared with other work it reads well below
  /// `threads`.
  double cores_worth(int threads) const;
  /// Whether the `threads`-thread peak shows less than kSharedHostShare of `threads` cores:
  /// the threads then share cores with other work, and a fraction of that depressed peak
  /// flatters the kernel (false when not measured, or for one thread).
  bool shared_host(int threads) const;
  static constexpr double kSharedHostShare = 0.75;
};

}  // namespace sdpa::bench

namespace sdpa::bench {

/// The threads a run with `requested` threads uses: `requested`, or for 0 every hardware
/// thread (what the kernel's OpenMP default takes), so its peak is measured on as many.
int resolve_threads(int requested);

/// This process's peak resident memory so far, MiB (getrusage's ru_maxrss).
double peak_rss_mib();

}  // namespace sdpa::bench
