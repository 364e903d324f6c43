// ring_bench.hpp — where ring attention's time goes on each rank (`sdpa bench --ring`):
// compute, waiting on messages after the compute, and the same messages sent with no
// compute at all, against one process on the same problem. docs/scaling.md models these.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <vector>

#include "distributed/ring.hpp"

namespace sdpa::dist {

struct RingBenchOptions {
  i64 B = 1, Hq = 8, Hkv = 8, Nq = 4096, Nk = 4096, Dk = 64, Dv = 64;
  Options opt{};
  Layout layout = Layout::zigzag;
  bool backward = false;
  int repeat = 5;  // timed runs of each kind, alternated; medians reported
};

struct RankTimes {
  int rank = 0;
  double compute_s = 0, wait_s = 0, comm_s = 0, total_s = 0;
  double hidden_s() const { return std::max(0.0, comm_s - wait_s); }
  double hidden_fraction() const { return comm_s > 0 ? hidden_s() / comm_s : 0.0; }
};

struct RingBenchResult {
  std::vector<RankTimes> ranks;  // on rank 0: every rank's medians
  double ring_s = 0;             // median over runs of the slowest rank's total
  double single_s = 0;           // median of one process (rank 0, the same threads) on the whole problem
  int threads = 0;
};

/// Collective. Random inputs; the ranks' results are gathered on rank 0.
RingBenchResult ring_bench(MPI_Comm comm, const RingBenchOptions& o);

}  // namespace sdpa::dist
