// ring.hpp — ring attention over MPI (context parallelism): each rank holds a shard of
// the sequence's queries and of its keys and values; K and V travel round the ring by
// non-blocking sends and receives while each rank computes its queries against the block
// it holds, merging the partial results by log-sum-exp (sdpa/blocks.hpp). The backward
// sends dK and dV round after K and V, so each block comes home with every rank's share.
//
// Shapes on each rank (n_q, n_k its shard lengths, sdpa::shard_length):
//   q (B, Hq, n_q, Dk)   k (B, Hkv, n_k, Dk)   v (B, Hkv, n_k, Dv)   out (B, Hq, n_q, Dv)   lse (B, Hq, n_q)
// Every rank passes the same options and the whole sequence's lengths nq, nk; they are
// checked collectively (every rank throws the same sdpa::Error when one differs).
// Explicit masks (Options::mask, keep) are the whole sequence's, (B or 1, Hq or 1, nq or 1,
// nk or 1), on every rank; each block reads its part (block_options). Their shapes are
// checked across ranks, their contents are the caller's to agree on (the CLI hashes them).
// Attention sinks (Options::sinks, (Hq)) are the same on every rank (checked); the forward
// merges each row's sink once after the last block (merge_sinks), and the backward writes
// Options::dsinks on every rank: the ranks' shares summed in rank order.
// An error raised on one rank only (bad local shapes caught by validation, allocation)
// cannot be seen by the others: call MPI_Abort then, as the CLI does.
#pragma once

#include <mpi.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "sdpa/blocks.hpp"

namespace sdpa::dist {

using i64 = std::int64_t;

// The shard layouts and their segments are the core library's (sdpa/blocks.hpp).
using Layout = ShardLayout;

/// Rank's shard of a whole (B, H, n, D) tensor, as a contiguous (B, H, n_local, D) buffer.
std::vector<float> take_shard(View4<const float> whole, int ranks, int rank, Layout layout);
/// Writes a contiguous (B, H, n_local, D) shard back into the whole tensor.
void put_shard(View4<float> whole, const float* shard, int ranks, int rank, Layout layout);

/// Rank 0 receives every rank's contiguous shard and assembles the whole tensor of shape
/// `whole` into `whole_at_root` (ignored elsewhere). Collective.
void gather_to_root(MPI_Comm comm, Layout layout, const float* shard, std::array<i64, 4> whole, float* whole_at_root);

/// Every rank passes its value of `what`; if any differs, every rank throws the same
/// sdpa::Error naming `what` and the ranks that differ from rank 0. Collective.
void require_agreement(MPI_Comm comm, const std::string& what, const std::string& value);

/// MPI_Barrier without spinning: polls an MPI_Ibarrier with 1 ms sleeps, so that a rank
/// that waits takes no core from those still working (MPI_Barrier busy-polls).
void idle_barrier(MPI_Comm comm);

/// Where a rank's time went in one ring pass.
struct RingStats {
  double compute_s = 0;  // block attention and merges (forward) or block backward and sums
  double wait_s = 0;     // blocked in MPI_Wait*: communication the compute did not hide
  double total_s = 0;
  i64 bytes_sent = 0;
};

struct RingOptions {
  Layout layout = Layout::zigzag;
  i64 nq = 0, nk = 0;  // the whole sequence's lengths
  // false: send the blocks round without computing (how long the communication alone
  // takes, for `sdpa bench --ring`); the outputs are then not written.
  bool compute = true;
};

/// Forward: writes the local out and lse, equal to the rows of single-process attention
/// within the merge's bound (docs/scaling.md). Deterministic for a given P.
void ring_forward(MPI_Comm comm, View4<const float> q, View4<const float> k, View4<const float> v, View4<float> out,
                  View3<float> lse, const Options& opt, const RingOptions& ring, RingStats* stats = nullptr);

/// Backward: given the forward's local out and lse and the local dout, overwrites the
/// local dq, dk, dv (and, with sinks, opt.dsinks: the whole sequence's, on every rank).
/// Deterministic for a given P.
void ring_backward(MPI_Comm comm, View4<const float> q, View4<const float> k, View4<const float> v,
                   View4<const float> out, View3<const float> lse, View4<const float> dout, View4<float> dq,
                   View4<float> dk, View4<float> dv, const Options& opt, const RingOptions& ring,
                   RingStats* stats = nullptr);

}  // namespace sdpa::dist
