// sdpa/blocks.hpp — attention of a long sequence computed block by block.
//
// Cut the queries into shards and the keys into blocks; for a query shard, attention
// over all keys equals the merge, by log-sum-exp, of its attention over each key block
// (the merge is exact in real arithmetic; its fp32 rounding is bounded in
// docs/scaling.md). Ring attention (src/distributed/) and anything else that splits a sequence
// use these three pieces; none needs MPI:
//   forward:  sdpa::forward(q_shard, k_block, v_block, out_part, lse_part, block_options(opt, pos))
//   merge:    merge_partial(out, lse, out_part, lse_part), over the blocks in a fixed order
//   backward: backward_accumulate(q_shard, k_block, v_block, out, lse, dout, dq, dk_block, dv_block,
//                                 block_options(opt, pos)) with the *merged* out and lse
// With attention sinks (Options::sinks) the blocks run without them; the sink is one more
// part of each row, merged once after the last block (merge_sinks), and the backward's
// ∂L/∂sinks is a sum over the query shards (add_sink_grads).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sdpa/attention.hpp"

namespace sdpa {

/// How a sequence is cut into shards over P ranks (ring attention, src/distributed/ and
/// sdpa.distributed).
///   contiguous: rank r holds [r·n/P, (r+1)·n/P)
///   zigzag:     the sequence cut in 2P chunks [c·n/2P, (c+1)·n/2P); rank r holds chunks r
///               and 2P−1−r, so that under a causal mask every rank has about as much work
///               (the layout of Llama 3's context parallelism, Dubey et al. 2024, §3.3.2)
enum class ShardLayout { contiguous, zigzag };

/// "contiguous" | "zigzag"; throws sdpa::Error naming `what` for anything else.
ShardLayout parse_shard_layout(const std::string& name, const char* what = "layout");
const char* shard_layout_name(ShardLayout layout);

/// A run of positions [start, start + len) of a sequence.
struct Segment {
  std::int64_t start = 0, len = 0;
};

/// Rank `rank`'s segments of a length-n sequence over `ranks` ranks, in the order its
/// shard stores them. Throws when n is too short for every chunk to hold a position.
std::vector<Segment> shard_segments(std::int64_t n, int ranks, int rank, ShardLayout layout);
/// The sum of shard_segments' lengths.
std::int64_t shard_length(std::int64_t n, int ranks, int rank, ShardLayout layout);

/// Where a block sits in its sequence: queries from q0 (nq_block of them) and keys from
/// k0 (nk_block), of a sequence of nq queries and nk keys in all.
struct BlockPos {
  std::int64_t q0 = 0, k0 = 0;
  std::int64_t nq_block = 0, nk_block = 0;
  std::int64_t nq = 0, nk = 0;
};

/// `whole`'s options for one block: the same, with Options::diagonal moved so that the
/// causal mask and the window of the block are those of the whole sequence, and explicit
/// masks (mask, keep: the whole sequence's, (B or 1, H or 1, nq or 1, nk or 1)) cut to
/// the block's rows and columns (a view, no copy), and Dropout::row0, key0 moved by q0, k0
/// so that the block draws the whole sequence's dropout mask at its positions (merged
/// blocks then give the whole call's dropout attention), and no sinks (Options::sinks,
/// dsinks: a sink is merged once per row, by merge_sinks, not once per block). Throws sdpa::Error for a block
/// outside the sequence or a mask whose last two dimensions are neither 1 nor nq, nk.
Options block_options(const Options& whole, const BlockPos& pos);

/// Whether any (query, key) pair of the block is visible under the causal mask and the
/// window (explicit masks are not read: a block they hide whole is computed, and gives
/// out 0 and lse −inf). A block with none need not be computed: its out is 0 and its
/// lse −inf, which merge_partial skips exactly.
bool block_visible(const Options& whole, const BlockPos& pos);

/// (out, lse) <- the merge of (out, lse) with (part_out, part_lse), in that order
/// (attention/merge.hpp): lse = log(exp(lse) + exp(part_lse)), out = the lse-weighted sum.
/// Start from out = 0, lse = −inf. Shapes: out, part_out (B, H, N, Dv); lse, part_lse (B, H, N).
/// threads: as Options::threads (0: all available); the bits do not depend on it.
void merge_partial(View4<float> out, View3<float> lse, View4<const float> part_out, View3<const float> part_lse,
                   int threads = 0);

/// The sinks (Options::sinks, (H): one logit per query head, finite or −∞) merged into the
/// merged (out, lse) of every key block, once, as one more part of each row with lse = sink_h
/// and out = 0: lse = log(exp(lse) + exp(sink_h)), out scaled by exp(lse_old − lse). A row
/// that saw no key (lse −inf) gets lse = sink_h and out 0; a −inf sink changes nothing.
/// Shapes and threads as merge_partial's; throws sdpa::Error for sinks not (H).
void merge_sinks(View4<float> out, View3<float> lse, View1<const float> sinks, int threads = 0);

/// This query shard's share of ∂L/∂sinks, *added* to dsinks (H): −Σ_{b,i} exp(sink_h − lse_bhi)
/// · (dout_bhi · out_bhi), with out and lse merged over every block *and* the sink (after
/// merge_sinks). The shards' shares summed, in a fixed order, are sdpa::backward's dsinks.
/// out, dout (B, H, N, Dv); lse (B, H, N); sinks, dsinks (H).
void add_sink_grads(View4<const float> out, View3<const float> lse, View4<const float> dout, View1<const float> sinks,
                    View1<float> dsinks);

/// The backward of one block, *added* to dq, dk, dv (`+=`, unlike sdpa::backward's `=`):
/// out and lse are the merged results of the query rows over *all* keys, so that
/// p_ij = exp(s_ij − lse_i) and delta_i = dout_i · out_i are the whole sequence's.
/// Summing over every key block gives dq; over every query shard, dk and dv.
void backward_accumulate(View4<const float> q, View4<const float> k, View4<const float> v, View4<const float> out,
                         View3<const float> lse, View4<const float> dout, View4<float> dq, View4<float> dk,
                         View4<float> dv, const Options& opt);

}  // namespace sdpa
