// test_blocks.cpp — the building blocks of ring attention, without MPI: attention cut
// into (query shard, key block) pairs, forward merged by lse and backward accumulated,
// equals the whole call's fp64 answer within the merge's bound (gold.hpp).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "gold.hpp"

namespace sdpa::test {
namespace {

// Rows [r0, r1) of a contiguous (B, H, N, D) buffer: a strided view into it.
template <class T>
View4<T> rows(T* data, std::array<i64, 4> shape, i64 r0, i64 r1) {
  View4<T> v = contiguous(data, shape);
  v.data += r0 * v.stride[2];
  v.shape[2] = r1 - r0;
  return v;
}
template <class T>
View3<T> rows3(T* data, std::array<i64, 3> shape, i64 r0, i64 r1) {
  View3<T> v = contiguous(data, shape);
  v.data += r0 * v.stride[2];
  v.shape[2] = r1 - r0;
  return v;
}

// Uneven cut points 0 = c_0 < c_1 < … < c_n = len.
std::vector<i64> cuts(i64 len, std::vector<i64> inner) {
  std::vector<i64> c{0};
  for (i64 x : inner) c.push_back(x);
  c.push_back(len);
  return c;
}

// Blockwise attention over the given cuts: forward merged over key blocks in order,
// then the backward of every (shard, block) pair accumulated with the merged out, lse.
Result blockwise(const Case& c, const Data& d, const std::vector<i64>& qcut, const std::vector<i64>& kcut) {
  const std::array<i64, 4> qs{c.B, c.Hq, c.Nq, c.Dk}, ks{c.B, c.Hkv, c.Nk, c.Dk}, vs{c.B, c.Hkv, c.Nk, c.Dv},
      os{c.B, c.Hq, c.Nq, c.Dv};
  const std::array<i64, 3> ls{c.B, c.Hq, c.Nq};
  Result r{std::vector<float>(d.dout.size(), 0.0f),
           std::vector<float>(static_cast<std::size_t>(c.B * c.Hq * c.Nq), -std::numeric_limits<float>::infinity()),
           std::vector<float>(d.q.size(), 0.0f), std::vector<float>(d.k.size(), 0.0f),
           std::vector<float>(d.v.size(), 0.0f)};
  for (std::size_t a = 0; a + 1 < qcut.size(); ++a) {
    const i64 q0 = qcut[a], q1 = qcut[a + 1];
    std::vector<float> part_out(static_cast<std::size_t>(c.B * c.Hq * (q1 - q0) * c.Dv)),
        part_lse(static_cast<std::size_t>(c.B * c.Hq * (q1 - q0)));
    const auto po = contiguous(part_out.data(), {c.B, c.Hq, q1 - q0, c.Dv});
    const auto pl = contiguous(part_lse.data(), {c.B, c.Hq, q1 - q0});
    for (std::size_t b = 0; b + 1 < kcut.size(); ++b) {
      const i64 k0 = kcut[b], k1 = kcut[b + 1];
      const BlockPos pos{q0, k0, q1 - q0, k1 - k0, c.Nq, c.Nk};
      if (!block_visible(c.opt, pos)) continue;
      forward(rows<const float>(d.q.data(), qs, q0, q1), rows<const float>(d.k.data(), ks, k0, k1),
              rows<const float>(d.v.data(), vs, k0, k1), po, pl, block_options(c.opt, pos));
      merge_partial(rows(r.out.data(), os, q0, q1), rows3(r.lse.data(), ls, q0, q1), po, pl);
    }
  }
  const bool sinks = !c.opt.sinks.empty();
  if (sinks) merge_sinks(contiguous(r.out.data(), os), contiguous(r.lse.data(), ls), c.opt.sinks);
  for (std::size_t a = 0; a + 1 < qcut.size(); ++a)
    for (std::size_t b = 0; b + 1 < kcut.size(); ++b) {
      const i64 q0 = qcut[a], q1 = qcut[a + 1], k0 = kcut[b], k1 = kcut[b + 1];
      const BlockPos pos{q0, k0, q1 - q0, k1 - k0, c.Nq, c.Nk};
      if (!block_visible(c.opt, pos)) continue;
      backward_accumulate(rows<const float>(d.q.data(), qs, q0, q1), rows<const float>(d.k.data(), ks, k0, k1),
                          rows<const float>(d.v.data(), vs, k0, k1), rows<const float>(r.out.data(), os, q0, q1),
                          rows3<const float>(r.lse.data(), ls, q0, q1), rows<const float>(d.dout.data(), os, q0, q1),
                          rows(r.dq.data(), qs, q0, q1), rows(r.dk.data(), ks, k0, k1), rows(r.dv.data(), vs, k0, k1),
                          block_options(c.opt, pos));
    }
  if (sinks) {  // the query shards' shares, in order
    r.dsinks.assign(static_cast<std::size_t>(c.Hq), 0.0f);
    for (std::size_t a = 0; a + 1 < qcut.size(); ++a)
      add_sink_grads(rows<const float>(r.out.data(), os, qcut[a], qcut[a + 1]),
                     rows3<const float>(r.lse.data(), ls, qcut[a], qcut[a + 1]),
                     rows<const float>(d.dout.data(), os, qcut[a], qcut[a + 1]), c.opt.sinks,
                     contiguous(r.dsinks.data(), {c.Hq}));
  }
  return r;
}

class Blocks : public ::testing::TestWithParam<Case> {};

TEST_P(Blocks, MergedBlocksMatchTheWholeCall) {
  const Case& c = GetParam();
  const Data d = make_data(c);
  // Uneven cuts, the key cuts not aligned with the query cuts: 3 shards, 4 blocks.
  const auto qcut = cuts(c.Nq, {c.Nq / 3, c.Nq / 3 + 1 + c.Nq / 4});
  const auto kcut = cuts(c.Nk, {5, c.Nk / 2, c.Nk / 2 + 3});
  const Gold g = make_gold(c, d, static_cast<i64>(kcut.size()) - 1);
  expect_within(blockwise(c, d, qcut, kcut), g, true);
}

TEST_P(Blocks, OneBlockIsTheWholeCallBitForBit) {
  // With one shard and one block the merge into (0, −inf) is exact and the accumulation
  // adds to zeros: the same bits as forward / backward. (Without the sinks: the whole call
  // folds a sink into its rows' final sum, the blocks merge it after, a different rounding.)
  Case c = GetParam();
  c.opt.sinks = {};
  const Data d = make_data(c);
  const Result r = blockwise(c, d, {0, c.Nq}, {0, c.Nk});
  std::vector<float> out(d.dout.size()), lse(r.lse.size()), dq(d.q.size()), dk(d.k.size()), dv(d.v.size());
  const std::array<i64, 4> qs{c.B, c.Hq, c.Nq, c.Dk}, ks{c.B, c.Hkv, c.Nk, c.Dk}, vs{c.B, c.Hkv, c.Nk, c.Dv},
      os{c.B, c.Hq, c.Nq, c.Dv};
  forward(contiguous<const float>(d.q.data(), qs), contiguous<const float>(d.k.data(), ks),
          contiguous<const float>(d.v.data(), vs), contiguous(out.data(), os),
          contiguous(lse.data(), {c.B, c.Hq, c.Nq}), c.opt);
  backward(contiguous<const float>(d.q.data(), qs), contiguous<const float>(d.k.data(), ks),
           contiguous<const float>(d.v.data(), vs), contiguous<const float>(out.data(), os),
           contiguous<const float>(lse.data(), {c.B, c.Hq, c.Nq}), contiguous<const float>(d.dout.data(), os),
           contiguous(dq.data(), qs), contiguous(dk.data(), ks), contiguous(dv.data(), vs), c.opt);
  EXPECT_EQ(r.out, out);
  EXPECT_EQ(r.lse, lse);
  EXPECT_EQ(r.dq, dq);
  EXPECT_EQ(r.dk, dk);
  EXPECT_EQ(r.dv, dv);
}

INSTANTIATE_TEST_SUITE_P(Cases, Blocks, ::testing::ValuesIn(cases()), [](const auto& info) { return info.param.name; });

TEST(Blocks, DiagonalIsValidated) {
  std::vector<float> q(16, 0.5f), out(16), lse(4);
  Options o;
  o.causal = Causal::top_left;
  o.diagonal = (std::int64_t{1} << 62) + 1;
  const auto v = contiguous<const float>(q.data(), {1, 1, 4, 4});
  EXPECT_THROW(forward(v, v, v, contiguous(out.data(), {1, 1, 4, 4}), contiguous(lse.data(), {1, 1, 4}), o), Error);
  o.diagonal = -4;  // query i sees keys j <= i - 4: none of the 4; out 0, lse −inf
  forward(v, v, v, contiguous(out.data(), {1, 1, 4, 4}), contiguous(lse.data(), {1, 1, 4}), o);
  for (float x : lse) EXPECT_EQ(x, -std::numeric_limits<float>::infinity());
  for (float x : out) EXPECT_EQ(x, 0.0f);
  EXPECT_FALSE(block_visible(Options{.causal = Causal::top_left}, BlockPos{0, 4, 4, 4, 8, 8}));
  EXPECT_TRUE(block_visible(Options{.causal = Causal::top_left}, BlockPos{4, 4, 4, 4, 8, 8}));
}

TEST(Blocks, BadArgumentsAreRefused) {
  std::vector<float> m(4);
  Options o;
  o.mask = contiguous<const float>(m.data(), {1, 1, 2, 2});
  EXPECT_THROW(block_options(o, BlockPos{0, 0, 2, 2, 3, 2}), Error);  // a mask of 2 rows, a sequence of 3
  const Options cut = block_options(o, BlockPos{1, 0, 1, 2, 2, 2});    // row 1 of the mask
  EXPECT_EQ(cut.mask.data, m.data() + 2);
  EXPECT_EQ(cut.mask.shape, (std::array<std::int64_t, 4>{1, 1, 1, 2}));
  EXPECT_THROW(block_options(Options{}, BlockPos{1, 0, 2, 2, 2, 2}), Error);  // past the end
  std::vector<float> a(8), l(2), b(12), lb(3);
  EXPECT_THROW(
      merge_partial(contiguous(a.data(), {1, 1, 2, 4}), contiguous(l.data(), {1, 1, 2}),
                    contiguous<const float>(b.data(), {1, 1, 3, 4}), contiguous<const float>(lb.data(), {1, 1, 3})),
      Error);
}

// The sink as a part: a row that saw no key gets lse = sink and out 0; a −inf sink leaves
// its head's rows as they were (bit for bit); one seen key of lse l and a sink s weigh
// 1/(1 + e^{s−l}) and e^{s−l}/(1 + e^{s−l}); block_options hands the blocks no sinks.
TEST(Blocks, MergeSinks) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> out{0.0f, 0.0f, 3.0f, -1.0f, 5.0f, 7.0f}, lse{-inf, std::log(2.0f), 0.25f};
  const std::vector<float> sinks{1.5f, 0.0f, -inf};  // heads 0, 1, 2: one row each
  merge_sinks(contiguous(out.data(), {1, 3, 1, 2}), contiguous(lse.data(), {1, 3, 1}), contiguous(sinks.data(), {3}));
  EXPECT_EQ(lse[0], 1.5f);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_NEAR(lse[1], std::log(3.0), 1e-6);  // log(e^{log 2} + e^0)
  EXPECT_NEAR(out[2], 3.0 * 2.0 / 3.0, 1e-6);
  EXPECT_NEAR(out[3], -1.0 * 2.0 / 3.0, 1e-6);
  EXPECT_EQ(lse[2], 0.25f);
  EXPECT_EQ(out[4], 5.0f);
  EXPECT_EQ(out[5], 7.0f);
  Options o;
  std::vector<float> ds(3);
  o.sinks = contiguous(sinks.data(), {3}), o.dsinks = contiguous(ds.data(), {3});
  const Options b = block_options(o, BlockPos{0, 0, 1, 1, 1, 1});
  EXPECT_TRUE(b.sinks.empty());
  EXPECT_TRUE(b.dsinks.empty());
}

TEST(Blocks, SinkArgumentsAreRefused) {
  std::vector<float> out(8), lse(2), dsinks(1);
  const std::vector<float> two{0.0f, 1.0f}, nan{std::nanf("")};
  const auto o = contiguous(out.data(), {1, 1, 2, 4});
  const auto l = contiguous(lse.data(), {1, 1, 2});
  auto message = [](auto call) {
    try {
      call();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] { merge_sinks(o, l, contiguous(two.data(), {2})); }).find("merge_sinks: sinks: shape [2]"),
            std::string::npos);
  EXPECT_NE(message([&] { merge_sinks(o, l, contiguous(nan.data(), {1})); }).find("merge_sinks: sinks: head 0 is nan"),
            std::string::npos);
  EXPECT_NE(message([&] { merge_sinks(o, l, View1<const float>{}); }).find("merge_sinks: sinks: empty"),
            std::string::npos);
  EXPECT_NE(message([&] {
              add_sink_grads(View4<const float>(o), View3<const float>(l), View4<const float>(o),
                             contiguous(two.data(), {1}), View1<float>{});
            }).find("add_sink_grads: dsinks: empty"),
            std::string::npos);
  EXPECT_NE(message([&] {
              add_sink_grads(View4<const float>(o), View3<const float>(contiguous(lse.data(), {1, 1, 1})),
                             View4<const float>(o), contiguous(two.data(), {1}), contiguous(dsinks.data(), {1}));
            }).find("add_sink_grads: lse"),
            std::string::npos);
}

}  // namespace
}  // namespace sdpa::test
