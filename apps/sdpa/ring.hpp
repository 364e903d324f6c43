// ring.hpp — the --ring modes of `sdpa attention` and `sdpa bench` (cmd_ring.cpp), run
// under mpirun; built only where MPI is (SDPA_HAVE_MPI), else they refuse with a message.
#pragma once

#include <string>

#include "common.hpp"

namespace sdpa::cli {

/// The files of `sdpa attention --ring`; every rank gets the same command line.
struct RingFiles {
  std::string q, k, v, out, lse, grad_out, dq, dk, dv;
  std::string layout = "zigzag";
};

/// Each rank reads the whole files, checks that every rank read the same bytes and options,
/// keeps its shard; rank 0 writes the whole outputs, all or nothing. Any error: the message
/// on stderr, then MPI_Abort, so every rank exits non-zero and none hangs.
int run_ring_attention(const RingFiles& files, const Options& opt);

/// `sdpa bench --ring`: per rank, the compute time, the time waiting on communication, the
/// communication alone, and one process on the same problem (bench::TimerRule medians).
struct RingBenchArgs {
  ShapeOptions::Sizes sizes;
  Options opt;
  std::string layout = "zigzag";
  bool backward = false;
  int repeat = 5;
};
int run_ring_bench(const RingBenchArgs& a);

}  // namespace sdpa::cli
