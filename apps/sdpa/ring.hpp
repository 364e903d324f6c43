// ring.hpp — what the CLI runs under mpirun (cmd_ring.cpp): the --ring modes of `sdpa
// attention` and `sdpa bench`, and `sdpa sweep` over ranks; built only where MPI is
// (sdpa_distributed), else they refuse with a message (ring_disabled.cpp).
#pragma once

#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "common.hpp"
#include "nn/sweep.hpp"

namespace sdpa::cli {

/// The files of `sdpa attention --ring`; every rank gets the same command line.
struct RingFiles {
  std::string q, k, v, out, lse, grad_out, dq, dk, dv;
  std::string mask;  // the whole sequence's; every rank reads it whole and the ring cuts it per block
  std::string layout = "zigzag";
  std::vector<float> sinks;  // --sinks' logits (Hq), empty for none; the same on every rank (checked)
  std::string dsinks;        // --dsinks: the backward writes ∂L/∂sinks (Hq) here
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

/// Whether a launcher started this process as one rank of several (Open MPI's mpirun sets
/// OMPI_COMM_WORLD_SIZE, MPICH's PMI_SIZE): then `sdpa sweep` shares its grid.
inline bool launched_by_mpirun() { return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE"); }

/// Runs body with this rank's share of a sweep (dist::sweep_share) between MPI_Init and
/// MPI_Finalize; an error on any rank: its message, then MPI_Abort (every rank exits
/// non-zero). Every rank waits (without spinning) for rank 0's report before exiting.
int run_sweep_ranks(const std::function<int(const nn::SweepShare&)>& body);

}  // namespace sdpa::cli
