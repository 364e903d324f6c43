// test_ring.cpp — ring attention under mpirun (ctest runs it with 2, 3 and 4 ranks):
// every rank's shard of out, lse, dq, dk, dv equals the whole single-process problem's
// fp64 answer within the merge's bound (gold.hpp), for both layouts, every causal
// alignment, GQA/MQA, soft-cap, windows and lengths the ranks do not divide; and the bits
// do not change between runs.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <limits>

#include "distributed/ring.hpp"
#include "gold.hpp"

namespace sdpa::test {
namespace {

using dist::Layout;

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

// This rank's rows of a whole contiguous (B, H, N, D) buffer of doubles.
std::vector<double> shard_of(const std::vector<double>& whole, std::array<i64, 4> shape, Layout layout) {
  std::vector<double> out;
  for (i64 bh = 0; bh < shape[0] * shape[1]; ++bh)
    for (const auto& s : shard_segments(shape[2], world_size(), world_rank(), layout))
      for (i64 i = s.start; i < s.start + s.len; ++i)
        for (i64 e = 0; e < shape[3]; ++e)
          out.push_back(whole[static_cast<std::size_t>((bh * shape[2] + i) * shape[3] + e)]);
  return out;
}

struct Local {
  Result r;
  dist::RingStats fwd, bwd;
};

Local run_ring(const Case& c, const Data& d, Layout layout) {
  const int P = world_size(), me = world_rank();
  auto take = [&](const std::vector<float>& x, std::array<i64, 4> s) {
    return dist::take_shard(contiguous<const float>(x.data(), s), P, me, layout);
  };
  const i64 nq = shard_length(c.Nq, P, me, layout), nk = shard_length(c.Nk, P, me, layout);
  const auto q = take(d.q, {c.B, c.Hq, c.Nq, c.Dk}), k = take(d.k, {c.B, c.Hkv, c.Nk, c.Dk}),
             v = take(d.v, {c.B, c.Hkv, c.Nk, c.Dv}), dout = take(d.dout, {c.B, c.Hq, c.Nq, c.Dv});
  const std::array<i64, 4> qs{c.B, c.Hq, nq, c.Dk}, ks{c.B, c.Hkv, nk, c.Dk}, vs{c.B, c.Hkv, nk, c.Dv},
      os{c.B, c.Hq, nq, c.Dv};
  const float nan = std::numeric_limits<float>::quiet_NaN();  // every element must be written
  Local l;
  l.r = Result{std::vector<float>(dout.size(), nan), std::vector<float>(static_cast<std::size_t>(c.B * c.Hq * nq), nan),
               std::vector<float>(q.size(), nan), std::vector<float>(k.size(), nan), std::vector<float>(v.size(), nan)};
  const dist::RingOptions ring{layout, c.Nq, c.Nk};
  dist::ring_forward(MPI_COMM_WORLD, contiguous<const float>(q.data(), qs), contiguous<const float>(k.data(), ks),
                     contiguous<const float>(v.data(), vs), contiguous(l.r.out.data(), os),
                     contiguous(l.r.lse.data(), {c.B, c.Hq, nq}), c.opt, ring, &l.fwd);
  Options opt_b = c.opt;  // with sinks, every rank receives the whole ∂L/∂sinks
  if (!c.opt.sinks.empty()) {
    l.r.dsinks.assign(static_cast<std::size_t>(c.Hq), nan);
    opt_b.dsinks = contiguous(l.r.dsinks.data(), {c.Hq});
  }
  dist::ring_backward(MPI_COMM_WORLD, contiguous<const float>(q.data(), qs), contiguous<const float>(k.data(), ks),
                      contiguous<const float>(v.data(), vs), contiguous<const float>(l.r.out.data(), os),
                      contiguous<const float>(l.r.lse.data(), {c.B, c.Hq, nq}),
                      contiguous<const float>(dout.data(), os), contiguous(l.r.dq.data(), qs),
                      contiguous(l.r.dk.data(), ks), contiguous(l.r.dv.data(), vs), opt_b, ring, &l.bwd);
  return l;
}

struct Param {
  Case c;
  Layout layout;
};
std::ostream& operator<<(std::ostream& os, const Param& p) {
  return os << p.c.name << "_" << shard_layout_name(p.layout);
}

class Ring : public ::testing::TestWithParam<Param> {};

TEST_P(Ring, ShardsMatchTheWholeCall) {
  const Case& c = GetParam().c;
  const Layout layout = GetParam().layout;
  const Data d = make_data(c);  // the same on every rank: seeded by the case name
  // S, the blocks merged per row: every rank's key segments.
  const i64 parts = world_size() * (layout == Layout::zigzag ? 2 : 1);
  Gold g = make_gold(c, d, parts);
  g.out = shard_of(g.out, {c.B, c.Hq, c.Nq, c.Dv}, layout);
  g.lse = shard_of(g.lse, {c.B, c.Hq, c.Nq, 1}, layout);
  g.dq = shard_of(g.dq, {c.B, c.Hq, c.Nq, c.Dk}, layout);
  g.dk = shard_of(g.dk, {c.B, c.Hkv, c.Nk, c.Dk}, layout);
  g.dv = shard_of(g.dv, {c.B, c.Hkv, c.Nk, c.Dv}, layout);
  const Local first = run_ring(c, d, layout);
  SCOPED_TRACE("rank " + std::to_string(world_rank()) + " of " + std::to_string(world_size()));
  expect_within(first.r, g, world_rank() == 0);
  const Local again = run_ring(c, d, layout);  // deterministic for a given P
  EXPECT_EQ(first.r.out, again.r.out);
  EXPECT_EQ(first.r.lse, again.r.lse);
  EXPECT_EQ(first.r.dq, again.r.dq);
  EXPECT_EQ(first.r.dk, again.r.dk);
  EXPECT_EQ(first.r.dv, again.r.dv);
  EXPECT_EQ(first.r.dsinks, again.r.dsinks);
}

std::vector<Param> params() {
  std::vector<Param> ps;
  for (const Case& c : cases())
    for (Layout l : {Layout::contiguous, Layout::zigzag}) ps.push_back({c, l});
  return ps;
}

INSTANTIATE_TEST_SUITE_P(Cases, Ring, ::testing::ValuesIn(params()), [](const auto& info) {
  return info.param.c.name + "_" + shard_layout_name(info.param.layout);
});

// The ring on options that differ between ranks: every rank throws the agreement check's error.
void expect_disagreement(const Case& c, const Data& d, Layout layout) {
  EXPECT_THROW(
      {
        try {
          run_ring(c, d, layout);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("ranks disagree on options"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
}

TEST(RingErrors, MismatchedOptionsThrowOnEveryRank) {
  Case c;
  c.name = "mismatch";
  const Data d = make_data(c);
  Options o = c.opt;
  if (world_rank() == world_size() - 1) o.causal = Causal::top_left;  // one rank differs
  c.opt = o;
  expect_disagreement(c, d, Layout::contiguous);
}

// Dropout's seed is part of the options every rank must agree on: with one rank's seed
// different its blocks would draw another mask, so every rank throws instead.
TEST(RingErrors, MismatchedDropoutSeedThrowsOnEveryRank) {
  Case c;
  c.name = "dropout_mismatch";
  const Data d = make_data(c);
  c.opt.dropout = {0.2, world_rank() == world_size() - 1 ? 8u : 7u, 0};
  expect_disagreement(c, d, Layout::zigzag);
}

// The sinks too: one rank's logit differing in the last bit is caught before any block.
TEST(RingErrors, MismatchedSinksThrowOnEveryRank) {
  Case c;
  c.name = "sinks_mismatch";
  const Data d = make_data(c);
  std::vector<float> sinks{0.5f, 0.5f, 0.5f, 0.5f};
  if (world_rank() == world_size() - 1) sinks[2] = std::nextafter(0.5f, 1.0f);
  c.opt.sinks = contiguous<const float>(sinks.data(), {4});
  expect_disagreement(c, d, Layout::zigzag);
}

TEST(RingErrors, ShortSequencesAreRefused) {
  EXPECT_THROW(shard_segments(2 * world_size() - 1, world_size(), 0, Layout::zigzag), Error);
  EXPECT_THROW(parse_shard_layout("striped", "--layout"), Error);
}

}  // namespace
}  // namespace sdpa::test

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  const int failed = RUN_ALL_TESTS();
  // Any rank's failure fails the run on every rank (mpirun reports the first non-zero exit).
  int any = failed != 0, all = 0;
  MPI_Allreduce(&any, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return all;
}
