// ring.cpp — ring attention's forward and backward over MPI, on the building blocks of
// sdpa/blocks.hpp. See ring.hpp for the contract, docs/scaling.md for the time model.
#include "distributed/ring.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <functional>
#include <limits>
#include <thread>

#include <fmt/format.h>

#include "sdpa/blocks.hpp"

namespace sdpa::dist {
namespace {

double now() { return MPI_Wtime(); }

// Rows [r0, r0 + n) of a view along dimension 2.
template <class T>
View4<T> rows(View4<T> v, i64 r0, i64 n) {
  v.data += r0 * v.stride[2];
  v.shape[2] = n;
  return v;
}
template <class T>
View3<T> rows(View3<T> v, i64 r0, i64 n) {
  v.data += r0 * v.stride[2];
  v.shape[2] = n;
  return v;
}

int count_of(i64 floats, const char* what) {
  if (floats > INT_MAX)
    throw Error(std::string("ring: one ") + what + " message would be " + std::to_string(floats) +
                " floats, more than MPI's int count allows; use more ranks");
  return static_cast<int>(floats);
}

struct Ring {
  int rank = 0, size = 1, next = 0, prev = 0;
  explicit Ring(MPI_Comm comm) {
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    next = (rank + 1) % size, prev = (rank + size - 1) % size;
  }
};

// A K, V block as it travels: [K (B, Hkv, n, Dk) | V (B, Hkv, n, Dv)], contiguous, n the
// owner's shard length. The same packing carries dK, dV in the backward.
struct KvLayout {
  i64 B, Hkv, Dk, Dv;
  i64 floats(i64 n) const { return B * Hkv * n * (Dk + Dv); }
  View4<float> k(float* buf, i64 n) const { return contiguous(buf, {B, Hkv, n, Dk}); }
  View4<float> v(float* buf, i64 n) const { return contiguous(buf + B * Hkv * n * Dk, {B, Hkv, n, Dv}); }
};

void copy4(View4<const float> from, View4<float> to) {
  const auto& s = from.shape;
  for (i64 a = 0; a < s[0]; ++a)
    for (i64 b = 0; b < s[1]; ++b)
      for (i64 c = 0; c < s[2]; ++c)
        for (i64 d = 0; d < s[3]; ++d) to(a, b, c, d) = from(a, b, c, d);
}

// The sinks in full ("{}": each float's shortest exact text), so that ranks agree on them.
std::string sinks_text(View1<const float> sinks) {
  std::string t = ", sinks";
  if (sinks.empty()) return t + " -";
  for (i64 h = 0; h < sinks.shape[0]; ++h) t += fmt::format(" {}", sinks(h));
  return t;
}

std::string options_text(const Options& o) {
  auto opt_num = [](const std::optional<double>& x) { return x ? std::to_string(*x) : std::string("-"); };
  return "scale " + opt_num(o.scale) + ", softcap " + opt_num(o.softcap) + ", causal " +
         std::to_string(static_cast<int>(o.causal)) + ", diagonal " +
         (o.diagonal ? std::to_string(*o.diagonal) : std::string("-")) + ", window " + std::to_string(o.window.left) +
         "," + std::to_string(o.window.right) + ", mask " + shape_str(o.mask.shape) + ", keep " +
         shape_str(o.keep.shape) +
         // dropout: every rank must draw the same sequence's mask (block_options places each block
         // in it); p in full ("{}": the shortest text that reads back the same double)
         fmt::format(", dropout {} seed {} offset {} at {},{},{}", o.dropout.p, o.dropout.seed, o.dropout.offset,
                     o.dropout.batch0, o.dropout.row0, o.dropout.key0) +
         sinks_text(o.sinks);
}

// The collective checks every rank runs first: the same options, sizes and layout on
// every rank, and local shards of the lengths the layout gives this rank.
void check_ring(MPI_Comm comm, const Ring& r, View4<const float> q, View4<const float> k, View4<const float> v,
                const Options& opt, const RingOptions& ring) {
  require_agreement(comm, "options", options_text(opt));
  require_agreement(comm, "layout and lengths",
                    std::string(shard_layout_name(ring.layout)) + " nq " + std::to_string(ring.nq) + " nk " +
                        std::to_string(ring.nk));
  require_agreement(comm, "B, Hq, Hkv, Dk, Dv",
                    std::to_string(q.shape[0]) + " " + std::to_string(q.shape[1]) + " " + std::to_string(k.shape[1]) +
                        " " + std::to_string(q.shape[3]) + " " + std::to_string(v.shape[3]));
  // The sinks' values are checked by merge_sinks, alike on every rank (they agree); their
  // shape here, before any block is computed.
  if (!opt.sinks.empty() && opt.sinks.shape[0] != q.shape[1])
    throw Error("ring: sinks: shape [" + std::to_string(opt.sinks.shape[0]) + "] should be [Hq] = [" +
                std::to_string(q.shape[1]) + "], one logit per query head");
  if (!opt.dsinks.empty() && (opt.sinks.empty() || opt.dsinks.shape != opt.sinks.shape))
    throw Error("ring: dsinks: set without sinks, or not as long as them");
  const i64 want_q = shard_length(ring.nq, r.size, r.rank, ring.layout),
            want_k = shard_length(ring.nk, r.size, r.rank, ring.layout);
  std::string local = "ok";
  if (q.shape[2] != want_q || k.shape[2] != want_k || v.shape[2] != want_k)
    local = "rank " + std::to_string(r.rank) + " holds " + std::to_string(q.shape[2]) + " queries and " +
            std::to_string(k.shape[2]) + " keys, its " + shard_layout_name(ring.layout) + " shard has " +
            std::to_string(want_q) + " and " + std::to_string(want_k);
  // Every rank learns whether any shard is wrong, so that all throw together.
  int bad = local != "ok", any_bad = 0;
  MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, comm);
  if (any_bad) throw Error("ring: a rank's local shard has the wrong length" + (bad ? ": " + local : std::string()));
}

// Runs f for each (query segment, key segment of `owner`) pair whose block has a visible
// pair, in a fixed order: query segments, then key segments, as the shards store them.
// Between pairs it lets MPI progress the transfers in flight (`progress`).
void for_each_block(const std::vector<Segment>& qsegs, const std::vector<Segment>& ksegs, const Options& opt,
                    const RingOptions& ring, const std::function<void()>& progress,
                    const std::function<void(i64 lq0, i64 lk0, const BlockPos&)>& f) {
  i64 lq0 = 0;
  for (const Segment& qs : qsegs) {
    i64 lk0 = 0;
    for (const Segment& ks : ksegs) {
      const BlockPos pos{qs.start, ks.start, qs.len, ks.len, ring.nq, ring.nk};
      if (block_visible(opt, pos)) {
        f(lq0, lk0, pos);
        progress();
      }
      lk0 += ks.len;
    }
    lq0 += qs.len;
  }
}

// Key rows of every rank's shard, indexed by rank: the size of what each ring step receives.
std::vector<i64> shard_lengths(i64 n, int ranks, Layout layout) {
  std::vector<i64> len(static_cast<std::size_t>(ranks));
  for (int i = 0; i < ranks; ++i) len[static_cast<std::size_t>(i)] = shard_length(n, ranks, i, layout);
  return len;
}

// What both passes set up first: the collective checks, the lengths of every rank's
// K, V block, two buffers for the block held and the one arriving (the first holding
// this rank's own K, V), and this rank's query segments.
struct RingSetup {
  double t_start;
  Ring r;
  KvLayout kv;
  std::vector<i64> kv_len;  // key rows of every rank's shard
  std::vector<float> buf[2];
  std::vector<Segment> qsegs;
  RingSetup(MPI_Comm comm, View4<const float> q, View4<const float> k, View4<const float> v, const Options& opt,
            const RingOptions& ring)
      : t_start(now()), r(comm), kv{k.shape[0], k.shape[1], k.shape[3], v.shape[3]} {
    check_ring(comm, r, q, k, v, opt, ring);
    kv_len = shard_lengths(ring.nk, r.size, ring.layout);
    const auto floats = static_cast<std::size_t>(kv.floats(*std::max_element(kv_len.begin(), kv_len.end())));
    buf[0].resize(floats);
    if (r.size > 1) buf[1].resize(floats);  // the block arriving; one rank has none (zero-filling it cost ~10 ms)
    copy4(k, kv.k(buf[0].data(), k.shape[2]));
    copy4(v, kv.v(buf[0].data(), k.shape[2]));
    qsegs = shard_segments(ring.nq, r.size, r.rank, ring.layout);
  }
};

// ∂L/∂sinks: each rank's share over its query rows (add_sink_grads), all-gathered and summed
// in rank order on every rank, so that every rank writes the same bits for a given P.
void sum_sink_grads(MPI_Comm comm, const Ring& r, View4<const float> out, View3<const float> lse,
                    View4<const float> dout, const Options& opt, RingStats& st) {
  const double t0 = now();
  const i64 Hq = opt.sinks.shape[0];
  std::vector<float> mine(static_cast<std::size_t>(Hq), 0.0f), every(static_cast<std::size_t>(Hq * r.size));
  add_sink_grads(out, lse, dout, opt.sinks, contiguous(mine.data(), {Hq}));
  const double t1 = now();
  MPI_Allgather(mine.data(), count_of(Hq, "dsinks"), MPI_FLOAT, every.data(), count_of(Hq, "dsinks"), MPI_FLOAT, comm);
  st.bytes_sent += Hq * static_cast<i64>(sizeof(float));
  for (i64 h = 0; h < Hq; ++h) {
    float sum = 0.0f;
    for (int rank = 0; rank < r.size; ++rank) sum += every[static_cast<std::size_t>(rank * Hq + h)];
    opt.dsinks(h) = sum;
  }
  st.compute_s += t1 - t0, st.wait_s += now() - t1;
}

}  // namespace

std::vector<float> take_shard(View4<const float> whole, int ranks, int rank, Layout layout) {
  const auto segs = shard_segments(whole.shape[2], ranks, rank, layout);
  const i64 n = shard_length(whole.shape[2], ranks, rank, layout);
  std::vector<float> out(static_cast<std::size_t>(whole.shape[0] * whole.shape[1] * n * whole.shape[3]));
  const auto local = contiguous(out.data(), {whole.shape[0], whole.shape[1], n, whole.shape[3]});
  i64 l0 = 0;
  for (const Segment& s : segs) {
    copy4(rows(whole, s.start, s.len), rows(local, l0, s.len));
    l0 += s.len;
  }
  return out;
}

void put_shard(View4<float> whole, const float* shard, int ranks, int rank, Layout layout) {
  const auto segs = shard_segments(whole.shape[2], ranks, rank, layout);
  const i64 n = shard_length(whole.shape[2], ranks, rank, layout);
  const auto local = contiguous(shard, {whole.shape[0], whole.shape[1], n, whole.shape[3]});
  i64 l0 = 0;
  for (const Segment& s : segs) {
    copy4(rows(local, l0, s.len), rows(whole, s.start, s.len));
    l0 += s.len;
  }
}

void gather_to_root(MPI_Comm comm, Layout layout, const float* shard, std::array<i64, 4> whole, float* whole_at_root) {
  const Ring r(comm);
  const i64 row = whole[0] * whole[1] * whole[3];  // floats per sequence position, over B, H, D
  const i64 mine = row * shard_length(whole[2], r.size, r.rank, layout);
  if (r.rank != 0) {
    MPI_Send(shard, count_of(mine, "gather"), MPI_FLOAT, 0, 7, comm);
    return;
  }
  const auto out = contiguous(whole_at_root, whole);
  put_shard(out, shard, r.size, 0, layout);
  std::vector<float> buf;
  for (int src = 1; src < r.size; ++src) {
    buf.resize(static_cast<std::size_t>(row * shard_length(whole[2], r.size, src, layout)));
    MPI_Recv(buf.data(), count_of(static_cast<i64>(buf.size()), "gather"), MPI_FLOAT, src, 7, comm, MPI_STATUS_IGNORE);
    put_shard(out, buf.data(), r.size, src, layout);
  }
}

void require_agreement(MPI_Comm comm, const std::string& what, const std::string& value) {
  const Ring r(comm);
  const unsigned long long mine = std::hash<std::string>{}(value);
  std::vector<unsigned long long> all(static_cast<std::size_t>(r.size));
  MPI_Allgather(&mine, 1, MPI_UNSIGNED_LONG_LONG, all.data(), 1, MPI_UNSIGNED_LONG_LONG, comm);
  std::string differ;
  for (int i = 1; i < r.size; ++i)
    if (all[static_cast<std::size_t>(i)] != all[0]) differ += (differ.empty() ? "" : ", ") + std::to_string(i);
  if (!differ.empty())
    throw Error("ranks disagree on " + what + ": rank(s) " + differ + " differ from rank 0" +
                (r.rank == 0 ? " (rank 0 has: " + value + ")" : std::string()));
}

void idle_barrier(MPI_Comm comm) {
  MPI_Request req;
  MPI_Ibarrier(comm, &req);
  int done = 0;
  while (!done) {
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void ring_forward(MPI_Comm comm, View4<const float> q, View4<const float> k, View4<const float> v, View4<float> out,
                  View3<float> lse, const Options& opt, const RingOptions& ring, RingStats* stats) {
  RingSetup setup(comm, q, k, v, opt, ring);
  auto& [t_start, r, kv, kv_len, buf, qsegs] = setup;
  RingStats st;
  const i64 B = q.shape[0], Hq = q.shape[1], Dv = v.shape[3];
  i64 max_qseg = 0;
  for (const Segment& s : qsegs) max_qseg = std::max(max_qseg, s.len);
  std::vector<float> part_out(static_cast<std::size_t>(B * Hq * max_qseg * Dv)),
      part_lse(static_cast<std::size_t>(B * Hq * max_qseg));
  if (ring.compute) {  // the merge's starting point: no key seen
    for (i64 a = 0; a < B; ++a)
      for (i64 h = 0; h < Hq; ++h)
        for (i64 i = 0; i < q.shape[2]; ++i) {
          lse(a, h, i) = -std::numeric_limits<float>::infinity();
          for (i64 e = 0; e < Dv; ++e) out(a, h, i, e) = 0.0f;
        }
  }

  MPI_Request req[2];
  int cur = 0;
  for (int step = 0; step < r.size; ++step) {
    const int owner = (r.rank - step + r.size) % r.size, incoming = (owner - 1 + r.size) % r.size;
    const i64 n_own = kv_len[static_cast<std::size_t>(owner)];
    const bool pass = step + 1 < r.size;
    if (pass) {  // the next block arrives while this one is computed
      MPI_Irecv(buf[1 - cur].data(), count_of(kv.floats(kv_len[static_cast<std::size_t>(incoming)]), "K, V"), MPI_FLOAT,
                r.prev, step, comm, &req[0]);
      MPI_Isend(buf[cur].data(), count_of(kv.floats(n_own), "K, V"), MPI_FLOAT, r.next, step, comm, &req[1]);
      st.bytes_sent += kv.floats(n_own) * static_cast<i64>(sizeof(float));
    }
    auto progress = [&] {
      int done = 0;
      if (pass) MPI_Testall(2, req, &done, MPI_STATUSES_IGNORE);
    };
    const double t0 = now();
    if (ring.compute) {
      const auto kb = kv.k(buf[cur].data(), n_own), vb = kv.v(buf[cur].data(), n_own);
      for_each_block(qsegs, shard_segments(ring.nk, r.size, owner, ring.layout), opt, ring, progress,
                     [&](i64 lq0, i64 lk0, const BlockPos& pos) {
                       const auto po = contiguous(part_out.data(), {B, Hq, pos.nq_block, Dv});
                       const auto pl = contiguous(part_lse.data(), {B, Hq, pos.nq_block});
                       forward(rows(q, lq0, pos.nq_block), View4<const float>(rows(kb, lk0, pos.nk_block)),
                               View4<const float>(rows(vb, lk0, pos.nk_block)), po, pl, block_options(opt, pos));
                       merge_partial(rows(out, lq0, pos.nq_block), rows(lse, lq0, pos.nq_block), po, pl, opt.threads);
                     });
    }
    const double t1 = now();
    if (pass) MPI_Waitall(2, req, MPI_STATUSES_IGNORE);
    const double t2 = now();
    st.compute_s += t1 - t0, st.wait_s += t2 - t1;
    cur = 1 - cur;
  }
  if (ring.compute && !opt.sinks.empty()) {  // each row's sink, once, after every block
    const double t0 = now();
    merge_sinks(out, lse, opt.sinks, opt.threads);
    st.compute_s += now() - t0;
  }
  st.total_s = now() - t_start;
  if (stats) *stats = st;
}

void ring_backward(MPI_Comm comm, View4<const float> q, View4<const float> k, View4<const float> v,
                   View4<const float> out, View3<const float> lse, View4<const float> dout, View4<float> dq,
                   View4<float> dk, View4<float> dv, const Options& opt, const RingOptions& ring, RingStats* stats) {
  RingSetup setup(comm, q, k, v, opt, ring);
  auto& [t_start, r, kv, kv_len, kvbuf, qsegs] = setup;
  RingStats st;
  const std::size_t n_floats = kvbuf[0].size();
  // dK, dV of the block held: `mine` is this rank's share; grad[·] the running sums that
  // arrive from the previous rank and leave, with `mine` added, to the next.
  std::vector<float> mine(n_floats), grad[2] = {std::vector<float>(n_floats), std::vector<float>(n_floats)};
  for (i64 a = 0; a < dq.shape[0]; ++a)
    for (i64 h = 0; h < dq.shape[1]; ++h)
      for (i64 i = 0; i < dq.shape[2]; ++i)
        for (i64 e = 0; e < dq.shape[3]; ++e) dq(a, h, i, e) = 0.0f;

  MPI_Request kv_req[2], grad_recv = MPI_REQUEST_NULL, grad_send = MPI_REQUEST_NULL;
  const int kGradTag = 16384;  // above any step number of the K, V messages (P < 16384)
  int cur = 0, g = 0;          // g: the grad buffer that receives this step's running sum
  for (int step = 0; step < r.size; ++step) {
    const int owner = (r.rank - step + r.size) % r.size, incoming = (owner - 1 + r.size) % r.size;
    const i64 n_own = kv_len[static_cast<std::size_t>(owner)];
    const int count = count_of(kv.floats(n_own), "dK, dV");
    const bool pass = step + 1 < r.size;
    if (pass) {
      MPI_Irecv(kvbuf[1 - cur].data(), count_of(kv.floats(kv_len[static_cast<std::size_t>(incoming)]), "K, V"),
                MPI_FLOAT, r.prev, step, comm, &kv_req[0]);
      MPI_Isend(kvbuf[cur].data(), count, MPI_FLOAT, r.next, step, comm, &kv_req[1]);
      st.bytes_sent += kv.floats(n_own) * static_cast<i64>(sizeof(float));
    }
    // The running sum for this block: the ranks before this one in the ring computed it.
    if (step > 0) MPI_Irecv(grad[g].data(), count, MPI_FLOAT, r.prev, kGradTag + step, comm, &grad_recv);
    auto progress = [&] {
      int done = 0;
      if (pass) MPI_Testall(2, kv_req, &done, MPI_STATUSES_IGNORE);
      if (step > 0) MPI_Test(&grad_recv, &done, MPI_STATUS_IGNORE);
    };
    const double t0 = now();
    std::fill(mine.begin(), mine.begin() + static_cast<std::ptrdiff_t>(count), 0.0f);
    if (ring.compute) {
      const auto kb = kv.k(kvbuf[cur].data(), n_own), vb = kv.v(kvbuf[cur].data(), n_own);
      const auto dkb = kv.k(mine.data(), n_own), dvb = kv.v(mine.data(), n_own);
      for_each_block(qsegs, shard_segments(ring.nk, r.size, owner, ring.layout), opt, ring, progress,
                     [&](i64 lq0, i64 lk0, const BlockPos& pos) {
                       backward_accumulate(
                           rows(q, lq0, pos.nq_block), View4<const float>(rows(kb, lk0, pos.nk_block)),
                           View4<const float>(rows(vb, lk0, pos.nk_block)), rows(out, lq0, pos.nq_block),
                           rows(lse, lq0, pos.nq_block), rows(dout, lq0, pos.nq_block), rows(dq, lq0, pos.nq_block),
                           rows(dkb, lk0, pos.nk_block), rows(dvb, lk0, pos.nk_block), block_options(opt, pos));
                     });
    }
    const double t1 = now();
    if (step > 0) MPI_Wait(&grad_recv, MPI_STATUS_IGNORE);
    MPI_Wait(&grad_send, MPI_STATUS_IGNORE);  // grad[1 - g] is free again
    // Fixed order: the ranks before, then this one's share.
    float* sum = grad[g].data();
    if (step == 0)
      std::copy(mine.begin(), mine.begin() + static_cast<std::ptrdiff_t>(count), sum);
    else
      for (int x = 0; x < count; ++x) sum[x] += mine[static_cast<std::size_t>(x)];
    if (r.size > 1) {
      MPI_Isend(sum, count, MPI_FLOAT, r.next, kGradTag + step + 1, comm, &grad_send);
      st.bytes_sent += i64{count} * static_cast<i64>(sizeof(float));
    }
    if (pass) MPI_Waitall(2, kv_req, MPI_STATUSES_IGNORE);
    st.compute_s += t1 - t0, st.wait_s += now() - t1;
    cur = 1 - cur, g = 1 - g;
  }
  // This rank's own block comes home complete from the previous rank (or never left).
  const i64 n_mine = k.shape[2];
  const float* home = grad[1 - g].data();
  std::vector<float> received;
  const double t1 = now();
  if (r.size > 1) {
    received.resize(static_cast<std::size_t>(kv.floats(n_mine)));
    MPI_Recv(received.data(), count_of(kv.floats(n_mine), "dK, dV"), MPI_FLOAT, r.prev, kGradTag + r.size, comm,
             MPI_STATUS_IGNORE);
    MPI_Wait(&grad_send, MPI_STATUS_IGNORE);
    home = received.data();
  }
  st.wait_s += now() - t1;
  if (ring.compute) {
    copy4(kv.k(const_cast<float*>(home), n_mine), dk);
    copy4(kv.v(const_cast<float*>(home), n_mine), dv);
  }
  if (ring.compute && !opt.dsinks.empty()) sum_sink_grads(comm, r, out, lse, dout, opt, st);
  st.total_s = now() - t_start;
  if (stats) *stats = st;
}

}  // namespace sdpa::dist
