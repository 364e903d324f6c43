// test_scratch.cpp — a work item's scratch is carved by the code that sizes it. Given
// exactly forward_scratch / backward_scratch / backward_item_scratch floats, the items
// compute the bits sdpa::forward / sdpa::backward compute (sdpa::backward on one thread
// takes the one pass, so the two-pass items here also show both schedules agree); given one float fewer, an item whose layout is
// the largest stops (traps) before it writes anything, instead of writing past its block. And the
// blocks calls keep between calls: release_buffers frees only those no call holds.
#include <atomic>
#include <cstring>
#include <thread>

#include "util.hpp"

namespace sdpa::test {
namespace {

using detail::ForwardItem;
using detail::Problem;
using detail::Tensors;
using detail::WorkerScratch;

// One call's tensors, random, and the Problem and Tensors the kernel sees.
struct Case {
  Buf<float> q, k, v, out, dout, dq, dk, dv;
  Buf3<float> lse;
  Options opt;

  Case(i64 Hq, i64 Hkv, i64 Nq, i64 Nk, i64 Dk, i64 Dv, Isa isa)
      : q({1, Hq, Nq, Dk}),
        k({1, Hkv, Nk, Dk}),
        v({1, Hkv, Nk, Dv}),
        out({1, Hq, Nq, Dv}),
        dout({1, Hq, Nq, Dv}),
        dq({1, Hq, Nq, Dk}),
        dk({1, Hkv, Nk, Dk}),
        dv({1, Hkv, Nk, Dv}),
        lse({1, Hq, Nq}) {
    std::mt19937_64 rng(7);
    for (auto* b : {&q, &k, &v, &dout}) fill_normal(b->data, rng);
    opt.isa = isa;
    opt.threads = 1;
    opt.causal = Causal::top_left;  // masked and unmasked tiles both
  }
  Problem forward_problem() {
    return detail::validate_forward<float>(q.cview(), k.cview(), v.cview(), out.view(), lse.view(), opt);
  }
  // sdpa::forward's out and lse, then out and lse set to NaN for items to write.
  std::pair<std::vector<float>, std::vector<float>> forward_then_clear() {
    forward(q.cview(), k.cview(), v.cview(), out.view(), lse.view(), opt);
    std::pair<std::vector<float>, std::vector<float>> was{out.data, lse.data};
    std::fill(out.data.begin(), out.data.end(), kNaN);
    std::fill(lse.data.begin(), lse.data.end(), kNaN);
    return was;
  }
  Tensors forward_tensors() {
    Tensors t;
    t.q = q.cview(), t.k = k.cview(), t.v = v.cview(), t.out_w = out.view(), t.lse_w = lse.view();
    return t;
  }
};

// Every forward item of an unsplit call (one batch), each given `floats` of scratch.
void forward_items(const detail::FastKernels& kern, const Problem& p, const Tensors& t, i64 floats) {
  std::vector<float> block(static_cast<std::size_t>(floats));
  for (i64 g = 0; g < p.Hkv; ++g)
    for (i64 l0 = 0; l0 < p.group * p.Nq; l0 += detail::kTileRows) {
      ForwardItem it;
      it.g = g, it.l0 = l0, it.j_begin = 0, it.j_end = p.Nk;
      kern.forward_item(p, t, it, WorkerScratch{block.data(), floats});
    }
}

class Scratch : public VariantTest {};

TEST_P(Scratch, ForwardItemsFitTheirSizeExactly) {
  // A tiled shape (64-lane items) and a decoding one (4 lanes: the fused decoding loop on
  // AVX2 and AVX-512, the few-lane loop on scalar); Nk below the split threshold, so one
  // item per lane tile.
  for (auto [Hq, Hkv, Nq, Nk] : std::vector<std::array<i64, 4>>{{2, 1, 100, 150}, {8, 2, 1, 300}}) {
    Case c(Hq, Hkv, Nq, Nk, 64, 48, GetParam().isa);
    const auto [out, lse] = c.forward_then_clear();
    const auto& kern = GetParam().kernels();
    const Problem p = c.forward_problem();
    forward_items(kern, p, c.forward_tensors(), kern.forward_scratch(p, 1));
    EXPECT_EQ(0, std::memcmp(out.data(), c.out.data.data(), out.size() * sizeof(float))) << "Nq = " << Nq;
    EXPECT_EQ(0, std::memcmp(lse.data(), c.lse.data.data(), lse.size() * sizeof(float))) << "Nq = " << Nq;
  }
}

TEST_P(Scratch, BackwardItemsFitTheirSizeExactly) {
  Case c(2, 1, 100, 150, 64, 48, GetParam().isa);
  forward(c.q.cview(), c.k.cview(), c.v.cview(), c.out.view(), c.lse.view(), c.opt);
  backward(c.q.cview(), c.k.cview(), c.v.cview(), c.out.cview(), c.lse.cview(), c.dout.cview(), c.dq.view(),
           c.dk.view(), c.dv.view(), c.opt);
  const std::vector<float> dq = c.dq.data, dk = c.dk.data, dv = c.dv.data;
  for (auto* b : {&c.dq, &c.dk, &c.dv}) std::fill(b->data.begin(), b->data.end(), kNaN);

  const auto& kern = GetParam().kernels();
  const Problem p =
      detail::validate_backward<float>(c.q.cview(), c.k.cview(), c.v.cview(), c.out.cview(), c.lse.cview(),
                                       c.dout.cview(), c.dq.view(), c.dk.view(), c.dv.view(), c.opt);
  Tensors t;
  t.q = c.q.cview(), t.k = c.k.cview(), t.v = c.v.cview(), t.out = c.out.cview(), t.lse_in = c.lse.cview();
  t.dout = c.dout.cview(), t.dq = c.dq.view(), t.dk = c.dk.view(), t.dv = c.dv.view();
  std::vector<float> delta(static_cast<std::size_t>(p.Hq * p.Nq));  // as sdpa::backward sums it
  for (i64 h = 0; h < p.Hq; ++h)
    for (i64 i = 0; i < p.Nq; ++i) {
      double acc = 0.0;
      for (i64 e = 0; e < p.Dv; ++e) acc += double(c.dout.at(0, h, i, e)) * double(c.out.at(0, h, i, e));
      delta[static_cast<std::size_t>(h * p.Nq + i)] = static_cast<float>(acc);
    }
  const i64 floats = kern.backward_scratch(p);
  std::vector<float> block(static_cast<std::size_t>(floats));
  for (i64 g = 0; g < p.Hkv; ++g)
    for (i64 j0 = 0; j0 < p.Nk; j0 += detail::kTileCols)
      kern.backward_kv_tile(p, t, delta.data(), 0, g, j0, WorkerScratch{block.data(), floats});
  for (i64 h = 0; h < p.Hq; ++h)
    for (i64 i0 = 0; i0 < p.Nq; i0 += detail::kTileRows)
      kern.backward_q_tile(p, t, delta.data(), 0, h, i0, WorkerScratch{block.data(), floats});
  EXPECT_EQ(0, std::memcmp(dq.data(), c.dq.data.data(), dq.size() * sizeof(float))) << "two passes";
  EXPECT_EQ(0, std::memcmp(dk.data(), c.dk.data.data(), dk.size() * sizeof(float))) << "two passes";
  EXPECT_EQ(0, std::memcmp(dv.data(), c.dv.data.data(), dv.size() * sizeof(float))) << "two passes";

  for (auto* b : {&c.dq, &c.dk, &c.dv}) std::fill(b->data.begin(), b->data.end(), kNaN);
  const i64 item_floats = kern.backward_item_scratch(p);
  std::vector<float> item_block(static_cast<std::size_t>(item_floats));
  for (i64 g = 0; g < p.Hkv; ++g)
    kern.backward_item(p, t, delta.data(), 0, g, WorkerScratch{item_block.data(), item_floats});
  EXPECT_EQ(0, std::memcmp(dq.data(), c.dq.data.data(), dq.size() * sizeof(float))) << "one pass";
  EXPECT_EQ(0, std::memcmp(dk.data(), c.dk.data.data(), dk.size() * sizeof(float))) << "one pass";
  EXPECT_EQ(0, std::memcmp(dv.data(), c.dv.data.data(), dv.size() * sizeof(float))) << "one pass";
}

// The tiled forward, backward pass A and the one-pass item have each call's largest
// layout, so one float short of the size must stop them.
TEST_P(Scratch, OneFloatShortTraps) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Case c(2, 1, 100, 150, 64, 48, GetParam().isa);
  const auto& kern = GetParam().kernels();
  const Problem p = c.forward_problem();
  const Tensors t = c.forward_tensors();
  EXPECT_DEATH(forward_items(kern, p, t, kern.forward_scratch(p, 1) - 1), "");

  const Problem pb =
      detail::validate_backward<float>(c.q.cview(), c.k.cview(), c.v.cview(), c.out.cview(), c.lse.cview(),
                                       c.dout.cview(), c.dq.view(), c.dk.view(), c.dv.view(), c.opt);
  const i64 floats = kern.backward_scratch(pb) - 1;
  std::vector<float> block(static_cast<std::size_t>(floats)), delta(static_cast<std::size_t>(pb.Hq * pb.Nq));
  Tensors tb;
  tb.q = c.q.cview(), tb.k = c.k.cview(), tb.v = c.v.cview(), tb.out = c.out.cview(), tb.lse_in = c.lse.cview();
  tb.dout = c.dout.cview(), tb.dq = c.dq.view(), tb.dk = c.dk.view(), tb.dv = c.dv.view();
  EXPECT_DEATH(kern.backward_kv_tile(pb, tb, delta.data(), 0, 0, 0, WorkerScratch{block.data(), floats}), "");
  const i64 item_floats = kern.backward_item_scratch(pb) - 1;
  std::vector<float> item_block(static_cast<std::size_t>(item_floats));
  EXPECT_DEATH(kern.backward_item(pb, tb, delta.data(), 0, 0, WorkerScratch{item_block.data(), item_floats}), "");
}

// Items of several kv heads (ForwardItem::heads: the decoding loop's per-head passes, or the other
// loops' heads one by one) run within forward_scratch(p, heads) and give sdpa::forward's bits.
TEST_P(Scratch, ForwardItemsOfSeveralHeadsFitTheirSize) {
  Case c(8, 4, 1, 300, 64, 48, GetParam().isa);
  const auto [out, lse] = c.forward_then_clear();
  const auto& kern = GetParam().kernels();
  const Problem p = c.forward_problem();
  const i64 floats = kern.forward_scratch(p, 4);
  std::vector<float> block(static_cast<std::size_t>(floats));
  ForwardItem it;
  it.heads = 4, it.j_end = p.Nk;
  kern.forward_item(p, c.forward_tensors(), it, WorkerScratch{block.data(), floats});
  EXPECT_EQ(0, std::memcmp(out.data(), c.out.data.data(), out.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(lse.data(), c.lse.data.data(), lse.size() * sizeof(float)));
}

// The same for a bf16 forward, whose tiled items carve another layout (K rows widened; on
// the AMX variant, forward_tiled_engine16's packed operands): exactly its size gives the bits of
// sdpa::forward, one float fewer traps.
TEST_P(Scratch, Bf16ForwardItemsFitTheirSizeExactly) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Case c(2, 1, 100, 150, 64, 48, GetParam().isa);
  const Buf<bf16> q = c.q.cast<bf16>(), k = c.k.cast<bf16>(), v = c.v.cast<bf16>();
  Buf<bf16> out(c.out.shape);
  forward(q.cview(), k.cview(), v.cview(), out.view(), c.lse.view(), c.opt);
  const Buf<bf16> want = out;
  const std::vector<float> want_lse = c.lse.data;
  for (auto& x : out.data) x = bf16::from_bits(0x7FC0);
  std::fill(c.lse.data.begin(), c.lse.data.end(), kNaN);
  const auto& kern = GetParam().kernels();
  const Problem p = detail::validate_forward<bf16>(q.cview(), k.cview(), v.cview(), out.view(), c.lse.view(), c.opt);
  Tensors t;
  t.q = q.cview(), t.k = k.cview(), t.v = v.cview(), t.out_w = out.view(), t.lse_w = c.lse.view();
  forward_items(kern, p, t, kern.forward_scratch(p, 1));
  for (std::size_t x = 0; x < out.data.size(); ++x) ASSERT_EQ(want.data[x].bits, out.data[x].bits) << x;
  EXPECT_EQ(0, std::memcmp(want_lse.data(), c.lse.data.data(), want_lse.size() * sizeof(float)));
  EXPECT_DEATH(forward_items(kern, p, t, kern.forward_scratch(p, 1) - 1), "");
}

INSTANTIATE_TEST_SUITE_P(Isa, Scratch, ::testing::ValuesIn(kernel_variants()), variant_id);

// The calls' buffers are kept in one pool between calls (api.cpp, BlockPool). release_buffers frees
// what no call holds: after a call, everything the pool holds, after which the next call allocates
// again and computes the same bits. Run beside calls on other threads, it never frees a block a call
// is using: two threads' calls, with a third releasing all the while, each give the bits of the call
// alone (a freed block handed to the other caller while still written would spoil one; under ASan, any
// access to a freed block is reported).
TEST(BufferPool, ReleaseFreesWhatNoCallHoldsAndChangesNoBits) {
  Case c(4, 2, 64, 700, 64, 48, Isa::automatic);
  c.opt.threads = 1;
  forward(c.q.cview(), c.k.cview(), c.v.cview(), c.out.view(), c.lse.view(), c.opt);
  const std::vector<float> want = c.out.data, want_lse = c.lse.data;
  const BufferPoolBytes after_call = buffer_pool_bytes();
  EXPECT_GT(after_call.held, 0);
  EXPECT_EQ(0, after_call.busy);
  EXPECT_EQ(after_call.held, release_buffers());
  EXPECT_EQ(0, buffer_pool_bytes().held);
  EXPECT_EQ(0, release_buffers());

  std::atomic<int> running{2};
  std::atomic<i64> releases{0};
  auto caller = [&](std::vector<int>& wrong) {
    Buf<float> out(c.out.shape);
    Buf3<float> lse(c.lse.shape);
    for (int call = 0; call < 40; ++call) {
      std::fill(out.data.begin(), out.data.end(), kNaN);
      forward(c.q.cview(), c.k.cview(), c.v.cview(), out.view(), lse.view(), c.opt);
      if (std::memcmp(out.data.data(), want.data(), want.size() * sizeof(float)) != 0 ||
          std::memcmp(lse.data.data(), want_lse.data(), want_lse.size() * sizeof(float)) != 0)
        wrong.push_back(call);
    }
    running.fetch_sub(1);
  };
  std::vector<int> wrong0, wrong1;
  std::thread releaser([&] {
    while (running.load() > 0) release_buffers(), releases.fetch_add(1);
  });
  std::thread a(caller, std::ref(wrong0)), b(caller, std::ref(wrong1));
  a.join(), b.join(), releaser.join();
  EXPECT_TRUE(wrong0.empty()) << wrong0.size() << " calls of 40 gave other bits";
  EXPECT_TRUE(wrong1.empty()) << wrong1.size() << " calls of 40 gave other bits";
  EXPECT_GT(releases.load(), 0);
  EXPECT_EQ(0, buffer_pool_bytes().busy);
}

}  // namespace
}  // namespace sdpa::test
