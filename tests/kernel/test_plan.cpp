// test_plan.cpp — sdpa::Plan: what a call ran, recorded by the call itself, on every path this
// CPU runs. Each expectation follows from the shape and the dispatch, not from one CPU.
#include "util.hpp"

#include <type_traits>

#include "attention/fast.hpp"

namespace sdpa::test {
namespace {

// The call's plan, for a forward or a backward of P's tensors in the dtype T (P's values as T).
template <class T = float>
Plan forward_plan(Problem4& P, Options o) {
  Plan plan;
  o.plan = &plan;
  if constexpr (std::is_same_v<T, float>) {
    forward(P.q.cview(), P.k.cview(), P.v.cview(), P.out.view(), P.lse.view(), o);
  } else {
    const Buf<T> q = P.q.template cast<T>(), k = P.k.template cast<T>(), v = P.v.template cast<T>();
    Buf<T> out = P.out.template cast<T>();
    forward(q.cview(), k.cview(), v.cview(), out.view(), P.lse.view(), o);
  }
  return plan;
}
Plan backward_plan(Problem4& P, Options o) {
  Plan plan;
  o.plan = &plan;
  backward(P.q.cview(), P.k.cview(), P.v.cview(), P.out.cview(), P.lse.cview(), P.dout.cview(), P.dq.view(),
           P.dk.view(), P.dv.view(), o);
  return plan;
}

TEST(Plan, DecodingItemsTakeTheFusedLoopAndSplitTheKeys) {
  Problem4 x(1, 4, 1, 1, 5000, 64, 64, 11);  // one query per head, 4 heads on one kv head: one item of 4 lanes
  for (Isa isa : runnable_isas()) {
    SCOPED_TRACE(isa_name(isa));
    Options o;
    o.isa = isa;
    const Plan plan = forward_plan(x, o);
    EXPECT_EQ(plan.call, "forward");
    EXPECT_EQ(plan.isa, isa);
    EXPECT_EQ(plan.kv_splits, 2);  // 5000 keys, one item: two splits of at least 2048 keys
    // The fused loop on the SIMD paths, the few-lane loop on the scalar one; never a tile.
    const bool simd = isa != Isa::scalar;
    EXPECT_EQ(plan.decoding_items, simd ? 2 : 0);
    EXPECT_EQ(plan.few_lane_items, simd ? 0 : 2);
    EXPECT_EQ(plan.tiled_items + plan.engine_items, 0);
    EXPECT_NE(plan.summary().find("split-KV x2"), std::string::npos) << plan.summary();
  }
}

// A decoding step's 8 kv heads are 8 items: unsplit they would leave half of a 16-core CPU idle.
// The rule splits towards 64 items (keys allowing), whatever this machine's thread count.
TEST(Plan, DecodingKvHeadsSplitTowardsSixtyFourItems) {
  Problem4 x(1, 32, 8, 1, 16384, 16, 16, 12);          // 8 items of 4 lanes; 16384 keys allow 8 splits of 2048
  Problem4 short_keys(1, 32, 8, 1, 4096, 16, 16, 13);  // 4096 keys: two splits at most
  for (Isa isa : runnable_isas()) {
    SCOPED_TRACE(isa_name(isa));
    Options o;
    o.isa = isa;
    o.threads = 1;
    const Plan plan = forward_plan(x, o);
    EXPECT_EQ(plan.kv_splits, 8);
    EXPECT_EQ(plan.decoding_items + plan.few_lane_items, 64);
    EXPECT_EQ(forward_plan(short_keys, o).kv_splits, 2);
  }
}

TEST(Plan, PrefillItemsAreTiledOrOnTheEngine) {
  Problem4 x(1, 2, 2, 130, 130, 64, 64, 11);  // per head 130 rows: tiles of 64, 64 and a last of 2 lanes
  for (Isa isa : runnable_isas()) {
    SCOPED_TRACE(isa_name(isa));
    Options o;
    o.isa = isa;
    o.threads = 2;
    const Plan plan = forward_plan<bf16>(x, o);
    EXPECT_EQ(plan.dtype, Dtype::bf16);
    EXPECT_EQ(plan.kv_splits, 1);
    EXPECT_EQ(plan.threads, 2);
    EXPECT_EQ(plan.tiled_items + plan.engine_items, 4);       // two full tiles per head
    EXPECT_EQ(plan.decoding_items + plan.few_lane_items, 2);  // the 2-lane tail of each head
    // bf16's tiles run on the engine the dispatch chose for this path where it takes bf16.
    const Engine16 engine = engine_for(isa);
    const bool on_engine = engine != Engine16::widened;  // both engines take bf16
    EXPECT_EQ(plan.engine_items, on_engine ? 4 : 0);
    EXPECT_EQ(plan.engine, on_engine ? engine : Engine16::widened);
    EXPECT_FALSE(plan.why.empty());
  }
}

TEST(Plan, Fp32NeverRunsAnEngine) {
  Problem4 x(1, 2, 2, 100, 100, 32, 32, 11);
  const Plan plan = forward_plan(x, {});
  EXPECT_EQ(plan.engine, Engine16::widened);
  EXPECT_EQ(plan.engine_items, 0);
  EXPECT_NE(plan.why.find("fp32"), std::string::npos) << plan.why;
}

// One pass where there are as many (batch, kv head) items as threads; else the two passes.
TEST(Plan, BackwardSchedule) {
  Problem4 x(1, 2, 2, 70, 70, 16, 16, 11);
  Options o;
  o.threads = 1;
  forward_plan(x, o);
  Plan plan = backward_plan(x, o);
  EXPECT_EQ(plan.call, "backward");
  EXPECT_TRUE(plan.one_pass);
  EXPECT_EQ(plan.backward_items, 2);
  o.threads = 3;
  plan = backward_plan(x, o);
  EXPECT_FALSE(plan.one_pass);
  EXPECT_EQ(plan.backward_items, 2 * 2 + 2 * 2);  // pass A: 2 heads × 2 key tiles; pass B: 2 × 2 query tiles
  EXPECT_NE(plan.summary().find("two passes"), std::string::npos) << plan.summary();
}

TEST(Plan, ReferenceKernel) {
  Problem4 x(1, 1, 1, 8, 8, 8, 8, 11);
  Options o;
  o.kernel = Kernel::reference;
  const Plan plan = forward_plan(x, o);
  EXPECT_EQ(plan.kernel, Kernel::reference);
  EXPECT_NE(plan.summary().find("reference"), std::string::npos);
}

// A far-apart view ([B, N, H, D] read as [B, H, N, D]) read by several items is copied once.
TEST(Plan, StridedInputsCopiedOnce) {
  const i64 B = 1, H = 2, N = 300, D = 16;
  std::vector<float> bnhd(static_cast<std::size_t>(B * N * H * D));
  std::mt19937_64 rng(5);
  fill_normal(bnhd, rng);
  Buf<float> out({B, H, N, D});
  Buf3<float> lse({B, H, N});
  const auto view = from_bnhd<const float>(bnhd.data(), B, N, H, D);
  Plan plan;
  Options o;
  o.plan = &plan;
  forward(view, view, view, out.view(), lse.view(), o);
  EXPECT_EQ(plan.strided_copies, 3);  // q, k and v: each read by the head's 5 query tiles
}

TEST(Plan, VarlenMergesItsSequences) {
  const i64 H = 2, D = 16;
  const std::vector<std::int32_t> cu = {0, 1, 65, 66};  // lengths 1, 64, 1
  const i64 T = cu.back();
  std::vector<float> q(static_cast<std::size_t>(T * H * D)), out(q.size()), lse(static_cast<std::size_t>(H * T));
  std::mt19937_64 rng(9);
  fill_normal(q, rng);
  Plan plan;
  Options o;
  o.plan = &plan;
  const View3<const float> qv{q.data(), {T, H, D}, {H * D, D, 1}};
  const View<const std::int32_t, 1> cuv{cu.data(), {3 + 1}, {1}};
  forward_varlen(qv, qv, qv, cuv, cuv, View3<float>{out.data(), {T, H, D}, {H * D, D, 1}},
                 View<float, 2>{lse.data(), {H, T}, {T, 1}}, o);
  EXPECT_EQ(plan.call, "forward_varlen");
  EXPECT_EQ(plan.sequences, 3);
  EXPECT_EQ(plan.decoding_items + plan.few_lane_items + plan.tiled_items + plan.engine_items, 2 + 2 + 2);
  EXPECT_NE(plan.summary().find("3 sequences"), std::string::npos) << plan.summary();
}

}  // namespace
}  // namespace sdpa::test
