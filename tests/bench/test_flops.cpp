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

TEST(Flops, PaddingMaskCountsTheKeptPairsPerItem) {
  // Item b's first ⌊b·Nk/(2B)⌋ keys are padding: the shares 0, 1/8, 1/4, 3/8 for B = 4.
  const Shape hf{4, 8, 8, 1024, 1024, 64, 64};
  for (i64 b = 0; b < 4; ++b) EXPECT_EQ(padded_keys(hf, b), 128 * b);
  // B = 4, Nq = Nk = 8: pads 0, 1, 2, 3. No causal mask: 8·(8 − p) = 64, 56, 48, 40, mean 52.
  const Shape square{4, 1, 1, 8, 8, 2, 2};
  EXPECT_EQ(visible_pairs(square, Causal::none, ExplicitMask::padding), 52.0);
  // Top-left: row i sees keys p … i, the triangle (8 − p)²/2 = 32, 24.5, 18, 12.5, mean 21.75.
  EXPECT_EQ(visible_pairs(square, Causal::top_left, ExplicitMask::padding), 21.75);
  EXPECT_EQ(flops(square, Causal::top_left, Pass::forward, ExplicitMask::padding), 8.0 * 4 * 21.75);
  EXPECT_EQ(flops(square, Causal::top_left, Pass::backward, ExplicitMask::padding), 2.5 * 8.0 * 4 * 21.75);
  // Without padding the mask changes nothing: p = 0 for B = 1.
  const Shape one{1, 1, 1, 8, 8, 2, 2};
  EXPECT_EQ(visible_pairs(one, Causal::top_left, ExplicitMask::padding), visible_pairs(one, Causal::top_left));
  // Nq = 4 < Nk = 8, pads 0, 1, 2, 3. Bottom-right: Nq·(Nk − p) − Nq²/2 = 24, 20, 16, 12, mean 18;
  // top-left: (Nq − p)²/2 = 8, 4.5, 2, 0.5, mean 3.75.
  const Shape wide{4, 1, 1, 4, 8, 2, 2};
  EXPECT_EQ(visible_pairs(wide, Causal::bottom_right, ExplicitMask::padding), 18.0);
  EXPECT_EQ(visible_pairs(wide, Causal::top_left, ExplicitMask::padding), 3.75);
  // Nq = 2: items with p ≥ Nq see nothing under top-left: 2, 0.5, 0, 0, mean 0.625.
  const Shape few{4, 1, 1, 2, 8, 2, 2};
  EXPECT_EQ(visible_pairs(few, Causal::top_left, ExplicitMask::padding), 0.625);
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
