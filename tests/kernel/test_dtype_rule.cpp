// test_dtype_rule.cpp — the naive 16-bit reference and the tolerance rule built on it
// (DtypeYardstick in util.hpp), ahead of the bf16/fp16 kernels that will be judged by them.
#include "util.hpp"

namespace sdpa::test {
namespace {

struct Problem16 {
  Buf<float> q, k, v, dout;
  Options opt;
};

// Inputs in dtype t: N(0, 1) values rounded to t. (B, Hq, Hkv, N, D) = (1, 4, 2, 48, 32),
// causal and non-causal, the layout [B, N, H, D].
Problem16 make(Dtype t, Causal causal, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Problem16 p;
  p.q = Buf<float>({1, 4, 48, 32}, true), p.k = Buf<float>({1, 2, 40, 32}, true);
  p.v = Buf<float>({1, 2, 40, 32}, true), p.dout = Buf<float>({1, 4, 48, 32}, true);
  for (auto* b : {&p.q, &p.k, &p.v, &p.dout}) {
    fill_normal(b->data, rng);
    round_all(b->data, t);
  }
  p.opt.causal = causal;
  return p;
}

// What a convert-on-load kernel that keeps P in fp32 would produce: the fp32 kernel on the
// 16-bit inputs, each output rounded to the dtype. It is more accurate than the naive one,
// so the rule must accept it, for every output, on every ISA.
TEST(DtypeRule, AcceptsTheFp32KernelWithRoundedOutputs) {
  for (Dtype t : {Dtype::bf16, Dtype::fp16})
    for (Causal c : {Causal::none, Causal::bottom_right}) {
      SCOPED_TRACE(dtype_name(t));
      Problem16 p = make(t, c, 1 + static_cast<int>(t) * 2 + static_cast<int>(c));
      const DtypeYardstick rule(t, p.q, p.k, p.v, p.dout, p.opt);
      for_each_variant(p.opt, [&](const KernelVariant&, const Options& o) {
        Buf<float> out({1, 4, 48, 32}, true), dq(p.q.shape, true), dk(p.k.shape, true), dv(p.v.shape, true);
        Buf3<float> lse({1, 4, 48});
        forward(p.q.cview(), p.k.cview(), p.v.cview(), out.view(), lse.view(), o);
        round_all(out.data, t);
        backward(p.q.cview(), p.k.cview(), p.v.cview(), out.cview(), lse.cview(), p.dout.cview(), dq.view(), dk.view(),
                 dv.view(), o);
        for (auto* g : {&dq, &dk, &dv}) round_all(g->data, t);
        SDPA_EXPECT_WITHIN("out", rule.out(out.data));
        SDPA_EXPECT_WITHIN("lse", rule.lse(lse.data));
        SDPA_EXPECT_WITHIN("dq", rule.dq(dq.data));
        SDPA_EXPECT_WITHIN("dk", rule.dk(dk.data));
        SDPA_EXPECT_WITHIN("dv", rule.dv(dv.data));
      });
    }
}

// The naive 16-bit result really carries the dtype's rounding, and no more than it should.
// Bound from first principles: rounding each p_ij costs at most u·p_ij, so Σ_j |Δp_ij||v_j|
// <= u·max|v|; rounding out costs u·|out| <= u·max|v|; the rest is fp32 arithmetic (the fp32
// floor). Below: the naive error is at least 4× the naive fp32 one (with 2^16 times the fp32
// unit roundoff for bf16, anything else means the rounding is missing).
TEST(DtypeRule, NaiveErrorIsTheDtypesRounding) {
  for (Dtype t : {Dtype::bf16, Dtype::fp16}) {
    SCOPED_TRACE(dtype_name(t));
    Problem16 p = make(t, Causal::none, 99);
    const DtypeYardstick rule(t, p.q, p.k, p.v, p.dout, p.opt);
    const DtypeYardstick fp32(Dtype::f32, p.q, p.k, p.v, p.dout, p.opt);
    const double naive = max_abs_err(rule.outn.data, rule.out64.data);
    const double naive32 = max_abs_err(fp32.outn.data, fp32.out64.data);
    const double bound = 2 * unit_roundoff(t) * max_abs(p.v.data) + fp32.fl.out;
    EXPECT_LE(naive, bound);
    EXPECT_GE(naive, 4 * naive32) << "naive " << dtype_name(t) << " no less accurate than fp32";
    for (float x : rule.outn.data) ASSERT_EQ(x, round_to(t, x)) << "out not in the dtype";
    for (float x : rule.dqn.data) ASSERT_EQ(x, round_to(t, x)) << "dq not in the dtype";
  }
}

// The rule can fail: bf16's naive result judged by fp16's yardstick (8× fp16's unit roundoff).
TEST(DtypeRule, RejectsACoarserDtype) {
  // Inputs that both dtypes hold exactly (bf16 values of N(0, 1) also fit fp16).
  Problem16 p = make(Dtype::bf16, Causal::none, 5);
  for (auto* b : {&p.q, &p.k, &p.v, &p.dout}) round_all(b->data, Dtype::fp16);
  const DtypeYardstick bf(Dtype::bf16, p.q, p.k, p.v, p.dout, p.opt);
  const DtypeYardstick fp(Dtype::fp16, p.q, p.k, p.v, p.dout, p.opt);
  EXPECT_FALSE(fp.out(bf.outn.data).ok()) << "error " << fp.out(bf.outn.data).fast << " bound " << fp.out(bf.outn.data).bound;
  EXPECT_FALSE(fp.dq(bf.dqn.data).ok());
}

}  // namespace
}  // namespace sdpa::test
