// test_flops.cpp — the one FLOP count against values worked out by hand from its
// definition (src/bench/flops.hpp): 2·(Dk + Dv)·B·Hq per visible (query, key) pair,
// the visible pairs an area for a causal mask, backward 2.5 × forward.
#include <gtest/gtest.h>

#include "bench/flops.hpp"

namespace sdpa::bench {
namespace {

TEST(Flops, SquareIsFlashAttentionsConvention) {
  // 4·B·H·N²·D = 4·2·4·128²·64
  const Shape s{2, 4, 2, 128, 128, 64, 64};
  EXPECT_EQ(flops(s, Causal::none, Pass::forward), 33554432.0);
  EXPECT_EQ(flops(s, Causal::top_left, Pass::forward), 16777216.0);      // halved for causal
  EXPECT_EQ(flops(s, Causal::bottom_right, Pass::forward), 16777216.0);  // the same diagonal when Nq = Nk
  EXPECT_EQ(flops(s, Causal::none, Pass::backward), 83886080.0);         // 2.5 × forward
  EXPECT_EQ(flops(s, Causal::top_left, Pass::backward), 41943040.0);
}

TEST(Flops, KeyValueHeadsAreNotDiscounted) {
  const Shape mha{1, 8, 8, 64, 64, 32, 32}, gqa{1, 8, 2, 64, 64, 32, 32};
  EXPECT_EQ(flops(mha, Causal::none, Pass::forward), flops(gqa, Causal::none, Pass::forward));
}

TEST(Flops, DifferentKeyAndValueDims) {
  // 2·(3 + 5)·B·H·Nq·Nk = 2·8·1·2·10·10
  const Shape s{1, 2, 2, 10, 10, 3, 5};
  EXPECT_EQ(flops(s, Causal::none, Pass::forward), 3200.0);
  EXPECT_EQ(flops(s, Causal::top_left, Pass::forward), 1600.0);
  EXPECT_EQ(flops(s, Causal::none, Pass::backward), 8000.0);
}

TEST(Flops, CausalWithDifferentLengthsCountsTheVisibleArea) {
  // Dk = Dv = 2: 8 FLOPs per pair. Rows i ∈ [0, Nq) see keys j ≤ i + offset.
  const Shape wide{1, 1, 1, 3, 5, 2, 2}, tall{1, 1, 1, 5, 3, 2, 2};
  EXPECT_EQ(visible_pairs(wide, Causal::none), 15.0);
  EXPECT_EQ(flops(wide, Causal::none, Pass::forward), 120.0);
  // top-left, Nq ≤ Nk: the triangle Nq²/2 = 4.5
  EXPECT_EQ(visible_pairs(wide, Causal::top_left), 4.5);
  EXPECT_EQ(flops(wide, Causal::top_left, Pass::forward), 36.0);
  // bottom-right, Nq ≤ Nk: Nq·(Nk − Nq) + Nq²/2 = 6 + 4.5
  EXPECT_EQ(visible_pairs(wide, Causal::bottom_right), 10.5);
  EXPECT_EQ(flops(wide, Causal::bottom_right, Pass::forward), 84.0);
  // top-left, Nq > Nk: the triangle Nk²/2 and the full rows below it, (Nq − Nk)·Nk
  EXPECT_EQ(visible_pairs(tall, Causal::top_left), 10.5);
  // bottom-right, Nq > Nk: the first Nq − Nk rows see nothing, the rest the triangle Nk²/2
  EXPECT_EQ(visible_pairs(tall, Causal::bottom_right), 4.5);
  EXPECT_EQ(flops(tall, Causal::bottom_right, Pass::backward), 90.0);
}

TEST(Flops, DecodingBytes) {
  // fp32 K and V read once: 4·B·Hkv·Nk·(Dk + Dv) = 4·2·3·7·10
  const Shape s{2, 12, 3, 1, 7, 4, 6};
  EXPECT_EQ(kv_bytes(s), 1680.0);
  EXPECT_TRUE(is_decoding(s));
  EXPECT_TRUE(is_decoding(Shape{1, 1, 1, 16, 100, 8, 8}));
  EXPECT_FALSE(is_decoding(Shape{1, 1, 1, 17, 100, 8, 8}));
}

}  // namespace
}  // namespace sdpa::bench
