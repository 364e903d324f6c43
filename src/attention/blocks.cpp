// blocks.cpp — the building blocks of blockwise (ring) attention: block options, the
// pairwise merge, the accumulating backward. They go through the public forward and
// backward; the kernel knows nothing of blocks beyond Options::diagonal.
#include "sdpa/blocks.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <string>
#include <vector>

#include "attention/merge.hpp"
#include "attention/problem.hpp"

namespace sdpa {
namespace {

using detail::i64;

void check_pos(const BlockPos& pos) {
  if (pos.nq < 1 || pos.nk < 1 || pos.nq_block < 1 || pos.nk_block < 1 || pos.q0 < 0 || pos.k0 < 0 ||
      pos.q0 > pos.nq - pos.nq_block || pos.k0 > pos.nk - pos.nk_block)
    throw Error("block: queries [" + std::to_string(pos.q0) + ", +" + std::to_string(pos.nq_block) + ") and keys [" +
                std::to_string(pos.k0) + ", +" + std::to_string(pos.nk_block) + ") do not lie inside a sequence of " +
                std::to_string(pos.nq) + " queries and " + std::to_string(pos.nk) + " keys");
}

// The whole sequence's diagonal offset: d_i = i + offset for global query i.
i64 whole_diagonal(const Options& whole, const BlockPos& pos) {
  if (whole.diagonal) return *whole.diagonal;
  return whole.causal == Causal::top_left ? 0 : pos.nk - pos.nq;
}

}  // namespace

Options block_options(const Options& whole, const BlockPos& pos) {
  check_pos(pos);
  Options o = whole;
  // Dropout draws the mask at the sequence's positions: the block's query i is the
  // sequence's q0 + i, its key j the sequence's k0 + j (on top of whole's own place, if the
  // whole sequence is itself part of a longer one).
  o.dropout.row0 = whole.dropout.row0 + pos.q0;
  o.dropout.key0 = whole.dropout.key0 + pos.k0;
  o.mask = detail::cut_mask(whole.mask, pos.nq, pos.nk, pos.q0, pos.nq_block, pos.k0, pos.nk_block,
                            "block_options: mask");
  o.keep = detail::cut_mask(whole.keep, pos.nq, pos.nk, pos.q0, pos.nq_block, pos.k0, pos.nk_block,
                            "block_options: keep");
  // Global query q0 + i sees global key k0 + j iff k0 + j <= q0 + i + D (causal), i.e. the
  // block's own diagonal offset is q0 − k0 + D; the window follows the same diagonal.
  o.diagonal = whole_diagonal(whole, pos) + pos.q0 - pos.k0;
  o.sinks = {}, o.dsinks = {};  // merged once per row (merge_sinks), not once per block
  return o;
}

bool block_visible(const Options& whole, const BlockPos& pos) {
  const Options o = block_options(whole, pos);
  detail::Problem p;  // only the structural mask: lo(i), hi(i)
  p.Nq = pos.nq_block, p.Nk = pos.nk_block;
  p.causal = whole.causal != Causal::none;
  p.diag_offset = *o.diagonal;
  p.window_left = whole.window.left, p.window_right = whole.window.right;
  for (i64 i = 0; i < pos.nq_block; ++i)
    if (p.lo(i) <= p.hi(i)) return true;
  return false;
}

namespace {
// (out, lse) <- the merge of every row (b, h, i) with one more part, whose lse is part_lse(b, h, i)
// and out element e part_out(b, h, i, e) (merge.hpp's merge_row, part 0 the row as it is).
template <class PartLse, class PartOut>
void merge_rows(const char* who, View4<float> out, View3<float> lse, int threads, PartLse part_lse, PartOut part_out) {
  if (threads < 0)
    throw Error(std::string(who) + ": threads must be >= 0 (0 = all available), got " + std::to_string(threads));
  const std::array<i64, 3> rows{out.shape[0], out.shape[1], out.shape[2]};
  const i64 n = rows[0] * rows[1] * rows[2], dv = out.shape[3];
  Options threads_only;
  threads_only.threads = threads;
  const int workers = detail::resolve_threads(threads_only);
#pragma omp parallel for num_threads(workers) schedule(static)
  for (i64 r = 0; r < n; ++r) {
    const i64 b = r / (rows[1] * rows[2]), h = r / rows[2] % rows[1], i = r % rows[2];
    const float l = detail::merge_row(
        2, dv, [&](i64 s) { return s == 0 ? lse(b, h, i) : part_lse(b, h, i); },
        [&](i64 s, i64 e) { return s == 0 ? out(b, h, i, e) : part_out(b, h, i, e); },
        [&](i64 e, float x) { out(b, h, i, e) = x; });
    lse(b, h, i) = l;
  }
}

// The sinks checked against the head count of (B, H, N, ·) rows, as sdpa::forward checks them.
void check_sinks_for(const char* who, std::array<i64, 3> rows, const std::array<i64, 3>& lse_shape,
                     View1<const float> sinks, View1<float> dsinks = {}) {
  if (lse_shape != rows)
    throw Error(std::string(who) + ": lse " + shape_str(lse_shape) + " should be (B, H, N) = " + shape_str(rows));
  if (sinks.empty()) throw Error(std::string(who) + ": sinks: empty (one logit per query head)");
  Options o;
  o.sinks = sinks, o.dsinks = dsinks;
  detail::Problem p;
  p.Hq = rows[1];
  try {
    detail::check_sinks(o, p);
  } catch (const Error& e) {
    throw Error(std::string(who) + ": " + e.what());
  }
}
}  // namespace

void merge_partial(View4<float> out, View3<float> lse, View4<const float> part_out, View3<const float> part_lse,
                   int threads) {
  const std::array<i64, 3> rows{out.shape[0], out.shape[1], out.shape[2]};
  if (part_out.shape != out.shape || lse.shape != rows || part_lse.shape != rows)
    throw Error("merge_partial: shapes differ: out " + shape_str(out.shape) + ", lse " + shape_str(lse.shape) +
                ", part_out " + shape_str(part_out.shape) + ", part_lse " + shape_str(part_lse.shape) +
                " (want out and part_out (B, H, N, Dv), lse and part_lse (B, H, N))");
  merge_rows(
      "merge_partial", out, lse, threads, [&](i64 b, i64 h, i64 i) { return part_lse(b, h, i); },
      [&](i64 b, i64 h, i64 i, i64 e) { return part_out(b, h, i, e); });
}

void merge_sinks(View4<float> out, View3<float> lse, View1<const float> sinks, int threads) {
  check_sinks_for("merge_sinks", {out.shape[0], out.shape[1], out.shape[2]}, lse.shape, sinks);
  // The sink is a part with out 0 and lse sink_h (as the split-KV merge takes it, api.cpp); a −inf
  // sink weighs exactly 0 and leaves the row's bits as they were.
  merge_rows(
      "merge_sinks", out, lse, threads, [&](i64, i64 h, i64) { return sinks(h); },
      [](i64, i64, i64, i64) { return 0.0f; });
}

void add_sink_grads(View4<const float> out, View3<const float> lse, View4<const float> dout, View1<const float> sinks,
                    View1<float> dsinks) {
  const std::array<i64, 3> rows{out.shape[0], out.shape[1], out.shape[2]};
  check_sinks_for("add_sink_grads", rows, lse.shape, sinks, dsinks);
  if (dsinks.empty()) throw Error("add_sink_grads: dsinks: empty (it receives the gradient, (H))");
  if (dout.shape != out.shape)
    throw Error("add_sink_grads: dout " + shape_str(dout.shape) + " should be out's shape " + shape_str(out.shape));
  const i64 B = rows[0], N = rows[2], dv = out.shape[3];
  for (i64 h = 0; h < rows[1]; ++h)
    dsinks(h) += static_cast<float>(detail::sink_grad(
        sinks(h), B * N, [&](i64 r) { return lse(r / N, h, r % N); },
        [&](i64 r) {
          double delta = 0.0;  // Δ = dout·out, in double as the sum it enters
          for (i64 e = 0; e < dv; ++e)
            delta += static_cast<double>(dout(r / N, h, r % N, e)) * static_cast<double>(out(r / N, h, r % N, e));
          return delta;
        }));
}

void backward_accumulate(View4<const float> q, View4<const float> k, View4<const float> v, View4<const float> out,
                         View3<const float> lse, View4<const float> dout, View4<float> dq, View4<float> dk,
                         View4<float> dv, const Options& opt) {
  // The kernel overwrites; the block's share goes to scratch and is then added, in place.
  std::vector<float> dq_b(static_cast<std::size_t>(q.shape[0] * q.shape[1] * q.shape[2] * q.shape[3]));
  std::vector<float> dk_b(static_cast<std::size_t>(k.shape[0] * k.shape[1] * k.shape[2] * k.shape[3]));
  std::vector<float> dv_b(static_cast<std::size_t>(v.shape[0] * v.shape[1] * v.shape[2] * v.shape[3]));
  const auto dq_v = contiguous(dq_b.data(), q.shape), dk_v = contiguous(dk_b.data(), k.shape),
             dv_v = contiguous(dv_b.data(), v.shape);
  backward(q, k, v, out, lse, dout, dq_v, dk_v, dv_v, opt);  // validates every view
  if (dq.shape != q.shape || dk.shape != k.shape || dv.shape != v.shape)
    throw Error("backward_accumulate: dq, dk, dv must have q's, k's and v's shapes");
  const int workers = detail::resolve_threads(opt);
  auto add = [workers](View4<float> acc, View4<float> part) {
    const auto& s = acc.shape;
#pragma omp parallel for collapse(2) num_threads(workers) schedule(static)
    for (i64 a = 0; a < s[0]; ++a)
      for (i64 b = 0; b < s[1]; ++b)
        for (i64 c = 0; c < s[2]; ++c)
          for (i64 d = 0; d < s[3]; ++d) acc(a, b, c, d) += part(a, b, c, d);
  };
  add(dq, dq_v);
  add(dk, dk_v);
  add(dv, dv_v);
}

// ---- shards of a sequence ----

ShardLayout parse_shard_layout(const std::string& name, const char* what) {
  if (name == "contiguous") return ShardLayout::contiguous;
  if (name == "zigzag") return ShardLayout::zigzag;
  throw Error(std::string(what) + ": expected contiguous or zigzag, got '" + name + "'");
}

const char* shard_layout_name(ShardLayout layout) { return layout == ShardLayout::zigzag ? "zigzag" : "contiguous"; }

std::vector<Segment> shard_segments(i64 n, int ranks, int rank, ShardLayout layout) {
  if (ranks < 1 || rank < 0 || rank >= ranks)
    throw Error("shard: rank " + std::to_string(rank) + " is not in [0, " + std::to_string(ranks) + ")");
  const i64 chunks = layout == ShardLayout::zigzag ? 2 * i64{ranks} : ranks;
  if (n < chunks)
    throw Error("shard: a sequence of " + std::to_string(n) + " positions cannot be cut into the " +
                std::to_string(chunks) + " chunks the " + shard_layout_name(layout) + " layout needs over " +
                std::to_string(ranks) + " ranks");
  auto chunk = [&](i64 c) { return Segment{c * n / chunks, (c + 1) * n / chunks - c * n / chunks}; };
  if (layout == ShardLayout::contiguous) return {chunk(rank)};
  return {chunk(rank), chunk(chunks - 1 - rank)};
}

i64 shard_length(i64 n, int ranks, int rank, ShardLayout layout) {
  i64 len = 0;
  for (const Segment& s : shard_segments(n, ranks, rank, layout)) len += s.len;
  return len;
}

}  // namespace sdpa
