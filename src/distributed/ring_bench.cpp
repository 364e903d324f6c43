// ring_bench.cpp — the timings behind `sdpa bench --ring` (ring_bench.hpp).
#include "distributed/ring_bench.hpp"

#include <omp.h>

#include "bench/normals.hpp"

namespace sdpa::dist {
namespace {

double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  const std::size_t n = x.size();
  return n == 0 ? 0.0 : (n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]));
}

}  // namespace

RingBenchResult ring_bench(MPI_Comm comm, const RingBenchOptions& o) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  if (o.repeat < 1) throw Error("--repeat: must be >= 1, got " + std::to_string(o.repeat));
  RingBenchResult res;
  res.threads = o.opt.threads > 0 ? o.opt.threads : omp_get_max_threads();
  bench::Normals normals(1234 + static_cast<unsigned>(rank));
  const i64 nq = shard_length(o.Nq, size, rank, o.layout), nk = shard_length(o.Nk, size, rank, o.layout);
  const auto q = normals.take(o.B * o.Hq * nq * o.Dk), k = normals.take(o.B * o.Hkv * nk * o.Dk),
             v = normals.take(o.B * o.Hkv * nk * o.Dv), dout = normals.take(o.B * o.Hq * nq * o.Dv);
  std::vector<float> out(dout.size()), lse(static_cast<std::size_t>(o.B * o.Hq * nq)), dq(q.size()), dk(k.size()),
      dv(v.size());
  const std::array<i64, 4> qs{o.B, o.Hq, nq, o.Dk}, ks{o.B, o.Hkv, nk, o.Dk}, vs{o.B, o.Hkv, nk, o.Dv},
      os{o.B, o.Hq, nq, o.Dv};
  const std::array<i64, 3> ls{o.B, o.Hq, nq};
  auto pass = [&](bool compute) {
    RingStats st;
    MPI_Barrier(comm);  // every rank starts together: the times hold no skew from the pass before
    RingOptions ring{o.layout, o.Nq, o.Nk, compute};
    if (!o.backward)
      ring_forward(comm, contiguous<const float>(q.data(), qs), contiguous<const float>(k.data(), ks),
                   contiguous<const float>(v.data(), vs), contiguous(out.data(), os), contiguous(lse.data(), ls), o.opt,
                   ring, &st);
    else
      ring_backward(comm, contiguous<const float>(q.data(), qs), contiguous<const float>(k.data(), ks),
                    contiguous<const float>(v.data(), vs), contiguous<const float>(out.data(), os),
                    contiguous<const float>(lse.data(), ls), contiguous<const float>(dout.data(), os),
                    contiguous(dq.data(), qs), contiguous(dk.data(), ks), contiguous(dv.data(), vs), o.opt, ring, &st);
    return st;
  };
  if (o.backward) {  // the backward needs the forward's out and lse
    RingOptions ring{o.layout, o.Nq, o.Nk};
    ring_forward(comm, contiguous<const float>(q.data(), qs), contiguous<const float>(k.data(), ks),
                 contiguous<const float>(v.data(), vs), contiguous(out.data(), os), contiguous(lse.data(), ls), o.opt,
                 ring);
  }
  pass(true), pass(false);  // warm-up
  std::vector<double> compute, wait, comm_alone, total, slowest;
  for (int r = 0; r < o.repeat; ++r) {  // alternated, so drifts in the machine hit both alike
    const RingStats with = pass(true), without = pass(false);
    compute.push_back(with.compute_s), wait.push_back(with.wait_s), total.push_back(with.total_s);
    comm_alone.push_back(without.total_s);
    double mx = 0;
    MPI_Allreduce(&with.total_s, &mx, 1, MPI_DOUBLE, MPI_MAX, comm);
    slowest.push_back(mx);
  }
  res.ring_s = median(slowest);
  const double mine[4] = {median(compute), median(wait), median(comm_alone), median(total)};
  std::vector<double> all(static_cast<std::size_t>(4 * size));
  MPI_Gather(mine, 4, MPI_DOUBLE, all.data(), 4, MPI_DOUBLE, 0, comm);
  if (rank == 0)
    for (int r = 0; r < size; ++r) {
      const double* x = all.data() + 4 * r;
      res.ranks.push_back({r, x[0], x[1], x[2], x[3]});
    }

  // One process on the whole problem, on rank 0, while the others sleep.
  if (rank == 0) {
    bench::Normals whole(99);
    const auto Q = whole.take(o.B * o.Hq * o.Nq * o.Dk), K = whole.take(o.B * o.Hkv * o.Nk * o.Dk),
               V = whole.take(o.B * o.Hkv * o.Nk * o.Dv), dO = whole.take(o.B * o.Hq * o.Nq * o.Dv);
    std::vector<float> O(dO.size()), L(static_cast<std::size_t>(o.B * o.Hq * o.Nq)), dQ(Q.size()), dK(K.size()),
        dV(V.size());
    const std::array<i64, 4> Qs{o.B, o.Hq, o.Nq, o.Dk}, Ks{o.B, o.Hkv, o.Nk, o.Dk}, Vs{o.B, o.Hkv, o.Nk, o.Dv},
        Os{o.B, o.Hq, o.Nq, o.Dv};
    const std::array<i64, 3> Ls{o.B, o.Hq, o.Nq};
    auto once = [&](bool fwd) {
      if (fwd)
        forward(contiguous<const float>(Q.data(), Qs), contiguous<const float>(K.data(), Ks),
                contiguous<const float>(V.data(), Vs), contiguous(O.data(), Os), contiguous(L.data(), Ls), o.opt);
      else
        backward(contiguous<const float>(Q.data(), Qs), contiguous<const float>(K.data(), Ks),
                 contiguous<const float>(V.data(), Vs), contiguous<const float>(O.data(), Os),
                 contiguous<const float>(L.data(), Ls), contiguous<const float>(dO.data(), Os),
                 contiguous(dQ.data(), Qs), contiguous(dK.data(), Ks), contiguous(dV.data(), Vs), o.opt);
    };
    once(true);
    if (o.backward) once(false);
    std::vector<double> t;
    for (int r = 0; r < o.repeat; ++r) {
      const double t0 = MPI_Wtime();
      once(!o.backward);
      t.push_back(MPI_Wtime() - t0);
    }
    res.single_s = median(t);
  }
  idle_barrier(comm);  // the others wait for rank 0 without taking its cores
  return res;
}

}  // namespace sdpa::dist
