// cmd_ring.cpp — `sdpa attention --ring` and `sdpa bench --ring` under mpirun: MPI set-up,
// the collective checks of what each rank read, the ring (src/distributed/), rank 0's output.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <functional>
#include <string_view>

#include <fmt/core.h>

#include "distributed/ring.hpp"
#include "distributed/ring_bench.hpp"
#include "distributed/sweep_share.hpp"
#include "io/atomic_file.hpp"
#include "ring.hpp"

namespace sdpa::cli {
namespace {

// Runs body(rank, size) between MPI_Init and MPI_Finalize. An exception on any rank is
// printed with the rank and ends the whole job by MPI_Abort: the other ranks may be
// waiting in a send or receive that will never complete, so returning is not enough.
int under_mpi(const std::function<int(int, int)>& body) {
  MPI_Init(nullptr, nullptr);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  try {
    const int rc = body(rank, size);
    MPI_Finalize();
    return rc;
  } catch (const std::exception& e) {
    std::string msg = e.what();
    std::replace(msg.begin(), msg.end(), '\n', ' ');
    fmt::print(stderr, "sdpa: error: rank {} of {}: {}\n", rank, size, msg);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
}

// What a rank read, in a form the ranks compare: the shape and a hash of the bytes.
std::string fingerprint(const Tensor& t) {
  const std::string_view bytes(reinterpret_cast<const char*>(t.data.data()), t.data.size() * sizeof(float));
  return shape_str(t.shape) + " " + std::to_string(std::hash<std::string_view>{}(bytes));
}

std::vector<i64> with_last(const std::vector<i64>& file_shape, i64 n, i64 d) {
  std::vector<i64> s(file_shape.begin(), file_shape.end() - 2);
  s.push_back(n);
  s.push_back(d);
  return s;
}

}  // namespace

int run_ring_attention(const RingFiles& f, const Options& opt_in) {
  return under_mpi([&](int rank, int size) {
    const MPI_Comm comm = MPI_COMM_WORLD;
    const dist::Layout layout = parse_shard_layout(f.layout, "--layout");
    Options opt = opt_in;
    if (!f.sinks.empty()) opt.sinks = {f.sinks.data(), {static_cast<i64>(f.sinks.size())}, {1}};
    Mask mask;  // whole on every rank: each block's part is a view into it (block_options)
    if (!f.mask.empty()) {
      mask = load_mask(f.mask);
      use_mask(mask, opt);
      const auto& bits =
          mask.keep ? std::string_view(reinterpret_cast<const char*>(mask.keep_bits.data()), mask.keep_bits.size())
                    : std::string_view(reinterpret_cast<const char*>(mask.additive.data()),
                                       mask.additive.size() * sizeof(float));
      dist::require_agreement(comm, "--mask (its shape and bytes)",
                              shape_str(mask.shape) + (mask.keep ? " keep " : " additive ") +
                                  std::to_string(std::hash<std::string_view>{}(bits)));
    }
    const bool backward = !f.grad_out.empty();
    dist::require_agreement(comm, "the outputs asked for",
                            std::string(backward ? "backward" : "forward") + (f.lse.empty() ? "" : " lse"));
    const Tensor q = load_tensor(f.q, "--q"), k = load_tensor(f.k, "--k"), v = load_tensor(f.v, "--v");
    for (const Tensor* t : {&k, &v})
      if (t->dtype != q.dtype || t->file_shape.size() != q.file_shape.size())
        throw Error(t->name + ": dtype and rank must be --q's");
    dist::require_agreement(comm, "--q (its shape and bytes)", fingerprint(q));
    dist::require_agreement(comm, "--k (its shape and bytes)", fingerprint(k));
    dist::require_agreement(comm, "--v (its shape and bytes)", fingerprint(v));
    const i64 B = q.shape[0], Hq = q.shape[1], Nq = q.shape[2], Dk = q.shape[3], Hkv = k.shape[1], Nk = k.shape[2],
              Dv = v.shape[3];
    const i64 nq = shard_length(Nq, size, rank, layout), nk = shard_length(Nk, size, rank, layout);
    const auto qs = dist::take_shard(q.view(), size, rank, layout), ks = dist::take_shard(k.view(), size, rank, layout),
               vs = dist::take_shard(v.view(), size, rank, layout);
    const std::array<i64, 4> q_local{B, Hq, nq, Dk}, k_local{B, Hkv, nk, Dk}, v_local{B, Hkv, nk, Dv},
        o_local{B, Hq, nq, Dv};
    std::vector<float> out(static_cast<std::size_t>(B * Hq * nq * Dv)), lse(static_cast<std::size_t>(B * Hq * nq));
    const dist::RingOptions ring{layout, Nq, Nk};
    const auto qv = contiguous<const float>(qs.data(), q_local), kv = contiguous<const float>(ks.data(), k_local),
               vv = contiguous<const float>(vs.data(), v_local);
    dist::ring_forward(comm, qv, kv, vv, contiguous(out.data(), o_local), contiguous(lse.data(), {B, Hq, nq}), opt,
                       ring);

    const bool root = rank == 0;
    auto whole = [&](std::array<i64, 4> shape) {
      return std::vector<float>(root ? static_cast<std::size_t>(shape[0] * shape[1] * shape[2] * shape[3]) : 0);
    };
    io::OutputSet files;  // rank 0's, committed only when every tensor is in
    std::vector<float> out_all = whole({B, Hq, Nq, Dv}), lse_all = whole({B, Hq, Nq, 1});
    dist::gather_to_root(comm, layout, out.data(), {B, Hq, Nq, Dv}, out_all.data());
    dist::gather_to_root(comm, layout, lse.data(), {B, Hq, Nq, 1}, lse_all.data());
    if (root) {
      files.add(f.out, npy_bytes(out_all, with_last(q.file_shape, Nq, Dv), q.dtype));
      if (!f.lse.empty())
        files.add(f.lse, npy_bytes(lse_all, std::vector<i64>(q.file_shape.begin(), q.file_shape.end() - 1), q.dtype));
    }
    if (backward) {
      const Tensor dout = load_tensor(f.grad_out, "--grad-out");
      if (dout.shape != std::array<i64, 4>{B, Hq, Nq, Dv})
        throw Error("--grad-out: shape must equal the output's, " + shape_str(std::array<i64, 4>{B, Hq, Nq, Dv}) +
                    " (promoted to rank 4), got " + shape_str(dout.shape));
      dist::require_agreement(comm, "--grad-out (its shape and bytes)", fingerprint(dout));
      const auto ds = dist::take_shard(dout.view(), size, rank, layout);
      std::vector<float> dq(qs.size()), dk(ks.size()), dv(vs.size()), dsinks;
      Options opt_b = opt;
      if (!f.dsinks.empty()) {
        dsinks.assign(f.sinks.size(), 0.0f);
        opt_b.dsinks = {dsinks.data(), {static_cast<i64>(dsinks.size())}, {1}};
      }
      dist::ring_backward(comm, qv, kv, vv, contiguous<const float>(out.data(), o_local),
                          contiguous<const float>(lse.data(), {B, Hq, nq}), contiguous<const float>(ds.data(), o_local),
                          contiguous(dq.data(), q_local), contiguous(dk.data(), k_local),
                          contiguous(dv.data(), v_local), opt_b, ring);
      std::vector<float> dq_all = whole(q.shape), dk_all = whole(k.shape), dv_all = whole(v.shape);
      dist::gather_to_root(comm, layout, dq.data(), q.shape, dq_all.data());
      dist::gather_to_root(comm, layout, dk.data(), k.shape, dk_all.data());
      dist::gather_to_root(comm, layout, dv.data(), v.shape, dv_all.data());
      if (root) {
        files.add(f.dq, npy_bytes(dq_all, q.file_shape, q.dtype));
        files.add(f.dk, npy_bytes(dk_all, k.file_shape, q.dtype));
        files.add(f.dv, npy_bytes(dv_all, v.file_shape, q.dtype));
        if (!f.dsinks.empty()) files.add(f.dsinks, npy_bytes(dsinks, {Hq}, io::DType::f32));
      }
    }
    // Nothing lands before every rank got here: a rank that failed has aborted the job.
    MPI_Barrier(comm);
    if (root) files.commit();
    return 0;
  });
}

int run_ring_bench(const RingBenchArgs& a) {
  return under_mpi([&](int rank, int size) {
    dist::RingBenchOptions o;
    o.B = a.sizes.B, o.Hq = a.sizes.Hq, o.Hkv = a.sizes.Hkv, o.Nq = a.sizes.Nq, o.Nk = a.sizes.Nk, o.Dk = a.sizes.Dk,
    o.Dv = a.sizes.Dv;
    o.opt = a.opt;
    o.layout = parse_shard_layout(a.layout, "--layout");
    o.backward = a.backward;
    o.repeat = a.repeat;
    const dist::RingBenchResult r = dist::ring_bench(MPI_COMM_WORLD, o);
    if (rank != 0) return 0;
    fmt::print(
        "sdpa bench --ring: {} ranks, {} layout, {} pass, B={} Hq={} Hkv={} Nq={} Nk={} Dk={} Dv={}, causal {}, "
        "dropout p={}, {} thread(s) per rank; medians of {} runs\n",
        size, shard_layout_name(o.layout), o.backward ? "backward" : "forward", o.B, o.Hq, o.Hkv, o.Nq, o.Nk, o.Dk,
        o.Dv, o.opt.causal == Causal::none ? "none" : "yes", o.opt.dropout.p, r.threads, o.repeat);
    fmt::print("{:>4} {:>11} {:>11} {:>11} {:>11} {:>9} {:>11}\n", "rank", "compute ms", "wait ms", "comm ms",
               "hidden ms", "hidden %", "total ms");
    for (const auto& p : r.ranks)
      fmt::print("{:>4} {:>11.2f} {:>11.2f} {:>11.2f} {:>11.2f} {:>8.0f}% {:>11.2f}\n", p.rank, 1e3 * p.compute_s,
                 1e3 * p.wait_s, 1e3 * p.comm_s, 1e3 * p.hidden_s(), 100 * p.hidden_fraction(), 1e3 * p.total_s);
    fmt::print("one process, same problem, {} thread(s): {:.2f} ms; ring total (slowest rank) {:.2f} ms: {:.2f}x\n",
               r.threads, 1e3 * r.single_s, 1e3 * r.ring_s, r.single_s / r.ring_s);
    fmt::print(
        "compute: block attention and merges; wait: blocked on messages after the compute; comm: the same messages\n"
        "sent round the ring with no compute; hidden = comm - wait (at least 0). Each a median over the runs.\n");
    return 0;
  });
}

int run_sweep_ranks(const std::function<int(const nn::SweepShare&)>& body) {
  return under_mpi([&](int, int) {
    const int rc = body(dist::sweep_share(MPI_COMM_WORLD));
    dist::idle_barrier(MPI_COMM_WORLD);  // rank 0 wrote the report; a failure there aborted the job
    return rc;
  });
}

}  // namespace sdpa::cli
