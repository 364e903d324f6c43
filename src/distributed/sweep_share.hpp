// sweep_share.hpp — a training sweep spread over MPI ranks (`mpirun -np P sdpa sweep`):
// the hooks of nn::SweepShare (src/nn/sweep.hpp) over a communicator, so that sdpa_nn
// itself needs no MPI. docs/training.md, "A sweep over several ranks".
#pragma once

#include <mpi.h>

#include "nn/sweep.hpp"

namespace sdpa::dist {

/// This rank's share of a sweep on `comm`: its rank and size, the ranks on its machine
/// (MPI_COMM_TYPE_SHARED), `agree` by require_agreement and `gather` to rank 0. The
/// gather first waits for every rank without spinning (idle_barrier), so that a rank
/// done early takes no core from those still training.
nn::SweepShare sweep_share(MPI_Comm comm);

}  // namespace sdpa::dist
