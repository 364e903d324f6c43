// test_dtypes.cpp — the fast kernel in bf16 and fp16 (sdpa::forward / backward on 16-bit
// views), judged by FlashAttention's rule (DtypeYardstick, util.hpp): its error against the
// fp64 reference at most twice that of the naive implementation in the same dtype, plus the
// floor of fp32 arithmetic and of rounding each output once. The kernel converts on load and
// keeps P in fp32, so it is more accurate than the naive one that rounds P; the factor 2 is
// the rule's margin, not a fit. On AMX-BF16 (the avx512_amx variant) the bf16 forward rounds
// P to bf16 before P·V, and the backward P̃ and dX before their products, as the naive one
// does; the fp16 forward rounds P to fp16 and runs on bf16 tiles with each operand split in
// two (engine16.hpp). On AVX512_BF16 (the avx512_dot variant) bf16 rounds as on AMX, its products
// by vdpbf16ps; fp16 widens there. Every ISA this CPU runs; same bits for 1, 2 and 7 threads.
#include <cstring>

#include "util.hpp"

namespace sdpa::test {
namespace {

struct Case {
  std::string name;
  i64 B = 1, Hq = 2, Hkv = 2, Nq = 40, Nk = 40, Dk = 32, Dv = 32;
  Causal causal = Causal::none;
  Window window{};
  std::optional<double> softcap;
  bool additive_mask = false, keep_mask = false;
  bool bnhd = false;
  double q_std = 1.0;  // scales the logits
  double dropout = 0.0;  // p; the seed and offset are fixed (make_inputs)
  // Whether the forward must take the fused decoding loop (kernel/decode.inl) on each SIMD
  // ISA, K and V read in the dtype: at most kFewLanes lanes per kv head, no explicit mask, no dropout.
  bool fused_decode = false;
};

std::ostream& operator<<(std::ostream& os, const Case& c) { return os << c.name; }

// The cases cover what the kernel does differently per dtype: each of its loops (tiled
// forward, few-lane decoding with and without split-KV, both backward schedules by thread
// count), K/V packed where fp32 reads them in place, Dk not a multiple of the vector width,
// and every mask kind, causal alignment, window, soft-cap and GQA; the grid's decoding cases
// (test_grid.cpp: every lane-group remainder, head sizes that are no whole number of vectors,
// so the 16-bit partial loads run); and dropout through the tiled, few-lane and split loops.
const std::vector<Case>& cases() {
  static const std::vector<Case> all = [] {
    std::vector<Case> c;
    c.push_back({.name = "plain"});
    c.push_back({.name = "gqa_causal_top_left", .Hq = 4, .Hkv = 2, .Nq = 70, .Nk = 90, .causal = Causal::top_left});
    c.push_back({.name = "causal_bottom_right_empty_rows", .Nq = 80, .Nk = 50, .causal = Causal::bottom_right});
    c.push_back({.name = "window_softcap_bnhd",
                 .Nq = 100,
                 .Nk = 100,
                 .Dk = 20,
                 .Dv = 24,
                 .window = {16, 4},
                 .softcap = 5.0,
                 .bnhd = true});
    c.push_back({.name = "masks_two_batches", .B = 2, .Nq = 33, .Nk = 65, .additive_mask = true, .keep_mask = true});
    // Head sizes of the models (AMX: K rows read in place in whole 16-key tiles, 2 × 2
    // blocks of C tiles), Dv an odd number of 16-column tiles, a tail of 8 keys.
    // One tiled item (40 lanes) over 4500 keys: split along the keys (AMX: partial results).
    c.push_back({.name = "tiled_split_kv", .Hq = 2, .Hkv = 1, .Nq = 20, .Nk = 4500, .Dk = 64, .Dv = 64});
    c.push_back({.name = "gqa_d128_dv80", .Hq = 4, .Hkv = 2, .Nq = 72, .Nk = 136, .Dk = 128, .Dv = 80,
                 .causal = Causal::bottom_right});
    c.push_back({.name = "decode_mqa", .Hq = 4, .Hkv = 1, .Nq = 1, .Nk = 300, .Dk = 64, .Dv = 64, .fused_decode = true});
    c.push_back({.name = "decode_split_kv", .Hq = 2, .Hkv = 1, .Nq = 1, .Nk = 4200, .Dk = 64, .Dv = 64,
                 .causal = Causal::bottom_right, .fused_decode = true});
    c.push_back({.name = "decode_gqa_Nq2_window", .Hq = 4, .Hkv = 2, .Nq = 2, .Nk = 5000, .Dk = 64, .Dv = 48,
                 .causal = Causal::bottom_right, .window = {2500, -1}, .fused_decode = true});
    for (i64 hq : {1, 2, 3, 5, 7, 8}) {
      Case d{.name = "decode_lanes" + std::to_string(hq) + "_Dk36", .Hq = hq, .Hkv = 1, .Nq = 1, .Nk = 4500,
             .Dk = 36, .Dv = 44, .fused_decode = true};
      if (hq == 7) d.causal = Causal::bottom_right, d.window = {100, -1};
      if (hq == 3) d.softcap = 5.0, d.q_std = 4.0;
      c.push_back(d);
    }
    // Dropout in the dtype (FlashAttention trains with it in bf16): the kernel and the
    // naive and fp64 references drop the same p_ij (one Philox generator, sdpa/philox.hpp).
    c.push_back({.name = "dropout_p10_gqa_causal", .B = 2, .Hq = 4, .Hkv = 2, .Nq = 70, .Nk = 97, .Dk = 24, .Dv = 40,
                 .causal = Causal::bottom_right, .dropout = 0.1});
    c.push_back({.name = "dropout_p50_window_softcap_bnhd", .Hq = 1, .Hkv = 1, .Nq = 150, .Nk = 200,
                 .causal = Causal::top_left, .window = {40, 5}, .softcap = 5.0, .bnhd = true, .dropout = 0.5});
    c.push_back({.name = "dropout_p10_decode_split", .Hq = 8, .Hkv = 2, .Nq = 1, .Nk = 4500, .Dk = 64, .Dv = 48,
                 .dropout = 0.1});
    return c;
  }();
  return all;
}

struct Inputs {
  Buf<float> q, k, v, dout;  // values of the dtype, widened
  Buf<float> mask;
  Buf<std::uint8_t> keep;
  Options opt;
};

Inputs make_inputs(const Case& c, Dtype t) {
  std::mt19937_64 rng(std::hash<std::string>{}(c.name) + static_cast<std::uint64_t>(t));
  Inputs in;
  in.q = Buf<float>({c.B, c.Hq, c.Nq, c.Dk}, c.bnhd), in.k = Buf<float>({c.B, c.Hkv, c.Nk, c.Dk}, c.bnhd);
  in.v = Buf<float>({c.B, c.Hkv, c.Nk, c.Dv}, c.bnhd), in.dout = Buf<float>({c.B, c.Hq, c.Nq, c.Dv}, c.bnhd);
  for (auto* b : {&in.q, &in.k, &in.v, &in.dout}) {
    fill_normal(b->data, rng, b == &in.q ? c.q_std : 1.0);
    round_all(b->data, t);
  }
  in.opt.causal = c.causal, in.opt.window = c.window, in.opt.softcap = c.softcap;
  if (c.dropout > 0) in.opt.dropout = {c.dropout, 0x5eed0123456789abull, (std::uint64_t{3} << 32) | 17};
  std::uniform_real_distribution<double> u(0, 1);
  if (c.additive_mask) {  // (1, 1, Nq, Nk), some -inf
    in.mask = Buf<float>({1, 1, c.Nq, c.Nk});
    fill_normal(in.mask.data, rng, 2.0);
    for (auto& x : in.mask.data)
      if (u(rng) < 0.2) x = -kInf;
    in.opt.mask = in.mask.cview();
  }
  if (c.keep_mask) {  // (B, Hq, Nq, Nk)
    in.keep = Buf<std::uint8_t>({c.B, c.Hq, c.Nq, c.Nk});
    for (auto& x : in.keep.data) x = u(rng) < 0.7;
    in.opt.keep = in.keep.cview();
  }
  return in;
}

template <class H>
Buf<H> narrow(const Buf<float>& x) {
  return x.cast<H>();  // exact: x holds values of H
}
template <class H>
std::vector<float> widen(const Buf<H>& x) {
  return x.template cast<float>().data;
}

// One fast forward and backward in dtype H; the backward takes the forward's own out and lse.
template <class H>
struct Run16 {
  Buf<H> out, dq, dk, dv;
  Buf3<float> lse;
  Plan forward_plan, backward_plan;  // what each call ran
};
template <class H>
Run16<H> run16(const Case& c, const Inputs& in, const Buf<H>& q, const Buf<H>& k, const Buf<H>& v,
               const Buf<H>& dout, const Options& o) {
  Run16<H> r;
  r.out = Buf<H>({c.B, c.Hq, c.Nq, c.Dv}, c.bnhd), r.lse = Buf3<float>({c.B, c.Hq, c.Nq});
  for (auto& x : r.out.data) x = H::from_bits(0x7FC0);  // a NaN in either dtype: every element must be written
  Options of = o, ob = o;
  of.plan = &r.forward_plan, ob.plan = &r.backward_plan;
  forward(q.cview(), k.cview(), v.cview(), r.out.view(), r.lse.view(), of);
  r.dq = Buf<H>(in.q.shape, c.bnhd), r.dk = Buf<H>(in.k.shape, c.bnhd), r.dv = Buf<H>(in.v.shape, c.bnhd);
  backward(q.cview(), k.cview(), v.cview(), r.out.cview(), r.lse.cview(), dout.cview(), r.dq.view(), r.dk.view(),
           r.dv.view(), ob);
  return r;
}

template <class H>
void check_case(const Case& c) {
  constexpr Dtype t = dtype_of<H>();
  SCOPED_TRACE(dtype_name(t));
  const Inputs in = make_inputs(c, t);
  const DtypeYardstick rule(t, in.q, in.k, in.v, in.dout, in.opt);
  const Buf<H> q = narrow<H>(in.q), k = narrow<H>(in.k), v = narrow<H>(in.v), dout = narrow<H>(in.dout);
  for_each_variant(in.opt, [&](const KernelVariant& kv, Options o) {
    o.threads = 2;
    const Run16<H> r = run16<H>(c, in, q, k, v, dout, o);
    if (c.fused_decode && kv.isa != Isa::scalar)
      EXPECT_GT(r.forward_plan.decoding_items, 0) << "the decoding case did not reach the fused loop";
    // A case with more lanes per kv head than a decoding item takes must reach the 16-bit
    // tiled loop on its variant's engine where that engine takes the dtype (AMX: bf16, and
    // fp16 split into bf16 hi + lo; dot products: bf16), and on no other engine; so must
    // every backward item (the inputs are finite).
    const bool tiled = c.Hq / c.Hkv * c.Nq > 8;  // kFewLanes
    for (Engine16 e : {Engine16::amx, Engine16::dot}) {
      SCOPED_TRACE(e == Engine16::amx ? "AMX tiles" : "dot products");
      const bool takes = kv.engine() == e && detail::engine_takes(e, t);
      const auto ran_on = [e](const Plan& plan) { return plan.engine == e && plan.engine_items > 0; };
      if (tiled && takes)
        EXPECT_TRUE(ran_on(r.forward_plan)) << "the tiled case did not reach the engine's loop";
      else
        EXPECT_FALSE(ran_on(r.forward_plan)) << "only this engine's variant takes its loop, for its dtypes";
      if (takes)
        EXPECT_TRUE(ran_on(r.backward_plan)) << "the backward did not reach the engine's products";
      else
        EXPECT_FALSE(ran_on(r.backward_plan)) << "only this engine's variant runs its products";
    }
    if (!tiled || !detail::engine_takes(kv.engine(), t)) EXPECT_EQ(r.forward_plan.engine_items, 0);
    SDPA_EXPECT_WITHIN("out", rule.out(widen(r.out)));
    SDPA_EXPECT_WITHIN("lse", rule.lse(r.lse.data));
    SDPA_EXPECT_WITHIN("dq", rule.dq(widen(r.dq)));
    SDPA_EXPECT_WITHIN("dk", rule.dk(widen(r.dk)));
    SDPA_EXPECT_WITHIN("dv", rule.dv(widen(r.dv)));
    // Same bits for any thread count (1 and 7 take the other backward schedule than 2 here
    // when B·Hkv is 2; 7 also leaves threads idle).
    for (int threads : {1, 7}) {
      SCOPED_TRACE("threads " + std::to_string(threads));
      o.threads = threads;
      const Run16<H> again = run16<H>(c, in, q, k, v, dout, o);
      const auto same_bits = [](const Buf<H>& a, const Buf<H>& b) {
        for (std::size_t x = 0; x < a.data.size(); ++x)
          if (a.data[x].bits != b.data[x].bits) return false;
        return true;
      };
      EXPECT_TRUE(same_bits(r.out, again.out));
      EXPECT_EQ(0, std::memcmp(r.lse.data.data(), again.lse.data.data(), r.lse.data.size() * sizeof(float)));
      EXPECT_TRUE(same_bits(r.dq, again.dq));
      EXPECT_TRUE(same_bits(r.dk, again.dk));
      EXPECT_TRUE(same_bits(r.dv, again.dv));
    }
  });
}

class Dtypes : public ::testing::TestWithParam<Case> {};

TEST_P(Dtypes, Bf16WithinTheRule) { check_case<bf16>(GetParam()); }
TEST_P(Dtypes, Fp16WithinTheRule) { check_case<fp16>(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Kernel, Dtypes, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

// Where AMX-BF16, AVX512_BF16 or aarch64's BF16 is usable, the rule cases above ran on each
// table of the engine's path this CPU runs (avx512, or neon): widened, and on its engines.
// Elsewhere they ran on the widening path only, and this says so.
TEST(Dtypes, SixteenBitCasesRanOnEveryEngine) {
  if (!cpu_features().amx_bf16 && !cpu_features().avx512_bf16 && !cpu_features().arm_bf16)
    GTEST_SKIP() << "no AMX-BF16, AVX512_BF16 or BF16 on this CPU: the 16-bit cases ran widened only";
  const std::vector<Isa> isas = runnable_isas();
  if (std::find(isas.begin(), isas.end(), cpu_features().arm_bf16 ? Isa::neon : Isa::avx512) == isas.end())
    GTEST_SKIP() << "SDPA_TEST_ISAS leaves out the engine's path";
  bool widening = false, amx = false, dot = false;
  for (const KernelVariant& kv : kernel_variants()) {
    widening = widening || ((kv.isa == Isa::avx512 || kv.isa == Isa::neon) && kv.engine() == Engine16::widened);
    amx = amx || kv.engine() == Engine16::amx;
    dot = dot || kv.engine() == Engine16::dot;
  }
  EXPECT_TRUE(widening);
  EXPECT_EQ(amx, cpu_features().amx_bf16);
  EXPECT_TRUE(dot);
}

// The reference kernel takes 16-bit views too (the fp64 oracle on the widened inputs, each
// output rounded once): it must agree with the gold the yardstick computed from the same values
// to within the rounding of the outputs, u·max|x| — nothing else differs.
TEST(Dtypes, ReferenceKernelRoundsTheOracle) {
  const Case c{.name = "reference", .Hq = 4, .Hkv = 2, .Nq = 20, .Nk = 30, .causal = Causal::top_left};
  const Inputs in = make_inputs(c, Dtype::fp16);
  const DtypeYardstick rule(Dtype::fp16, in.q, in.k, in.v, in.dout, in.opt);
  Options o = in.opt;
  o.kernel = Kernel::reference;
  const Run16<fp16> r = run16<fp16>(c, in, narrow<fp16>(in.q), narrow<fp16>(in.k), narrow<fp16>(in.v),
                                    narrow<fp16>(in.dout), o);
  const double u = unit_roundoff(Dtype::fp16);
  EXPECT_LE(max_abs_err(widen(r.out), rule.out64.data), u * max_abs(rule.out64.data));
  // The backward took the rounded out, so delta moves by up to u·|out|·Σ|dout| per row:
  // dq, dk, dv against the gold only within the rule, as the fast kernel's.
  SDPA_EXPECT_WITHIN("dq", rule.dq(widen(r.dq)));
  SDPA_EXPECT_WITHIN("dv", rule.dv(widen(r.dv)));
}

// Views other than contiguous (B, H, N, D): a (B, N, H, D) buffer seen through strides (Hugging
// Face's layout; rows H·D elements apart), and rows with a stride of 2 along D. Each tensor is
// read in place (load_row / store_row's strided branches, rows packed per tile) or, where enough
// items read it, copied back to back once per call (api.cpp, TightCopies): N = 200 gives 7 lane
// tiles and 4 key and query tiles, so the forward copies Q, K and V and the backward Q and dout
// (and K and V on the two passes, which 2 threads take with one kv head); N = 37 copies nothing.
// Either way the kernel sees the same values, so the bits must be the contiguous call's, forward
// and backward, inputs and outputs in the layout alike.
enum class Layout { bnhd, d_stride2 };

template <class T>
struct Stored {
  std::vector<T> data;
  View4<T> view;  // (B, H, N, D) over data
};
template <class T>
Stored<T> store_as(Layout layout, const std::array<i64, 4>& shape, const std::vector<T>& dense) {
  const auto [B, H, N, D] = shape;
  Stored<T> s;
  s.data.assign(dense.size() * (layout == Layout::bnhd ? 1 : 2), T(0.0f));
  if (layout == Layout::bnhd) {
    s.view = from_bnhd(s.data.data(), B, N, H, D);
  } else {  // element d of a row at 2·d of a row twice as long
    s.view = contiguous(s.data.data(), {B, H, N, 2 * D});
    s.view.shape = shape, s.view.stride[3] = 2;
  }
  std::size_t e = 0;
  for (i64 b = 0; b < B; ++b)
    for (i64 h = 0; h < H; ++h)
      for (i64 n = 0; n < N; ++n)
        for (i64 d = 0; d < D; ++d) s.view(b, h, n, d) = dense[e++];
  return s;
}
// Whether the view holds the dense tensor's bits, element by element.
template <class T>
bool same_bits(const std::vector<T>& dense, const View4<T>& view) {
  const auto [B, H, N, D] = view.shape;
  std::size_t e = 0;
  for (i64 b = 0; b < B; ++b)
    for (i64 h = 0; h < H; ++h)
      for (i64 n = 0; n < N; ++n)
        for (i64 d = 0; d < D; ++d)
          if (std::memcmp(&dense[e++], &view(b, h, n, d), sizeof(T)) != 0) return false;
  return true;
}

// copy_limit: the cap on the strided copies' bytes for the strided calls, -1 for the default.
// Under any cap the bits are the contiguous call's; the copy counter shows what was copied.
template <class T>
void check_strided_views(Layout layout, i64 N, int threads, const KernelVariant& kv, i64 copy_limit = -1) {
  const i64 B = 1, Hq = 2, Hkv = 1, D = 32;
  const std::array<i64, 4> qs{B, Hq, N, D}, ks{B, Hkv, N, D};
  std::mt19937_64 rng(11);
  std::normal_distribution<float> normal;
  const auto filled = [&](i64 n) {
    std::vector<T> x(static_cast<std::size_t>(n));
    for (auto& e : x) e = T(normal(rng));
    return x;
  };
  const std::vector<T> q = filled(B * Hq * N * D), k = filled(B * Hkv * N * D), v = filled(B * Hkv * N * D),
                       dout = filled(B * Hq * N * D);
  const KernelScope scope(kv);
  Options o;
  o.isa = kv.isa, o.threads = threads, o.causal = Causal::top_left;
  std::vector<T> out(q.size()), dq(q.size()), dk(k.size()), dv(v.size());
  std::vector<float> lse(B * Hq * N), lse_s(lse.size());
  const auto c = [](const std::vector<T>& x, const std::array<i64, 4>& s) { return contiguous(x.data(), s); };
  forward(c(q, qs), c(k, ks), c(v, ks), contiguous(out.data(), qs), contiguous(lse.data(), {B, Hq, N}), o);
  backward(c(q, qs), c(k, ks), c(v, ks), c(out, qs), contiguous<const float>(lse.data(), {B, Hq, N}), c(dout, qs),
           contiguous(dq.data(), qs), contiguous(dk.data(), ks), contiguous(dv.data(), ks), o);

  const Stored<T> q_s = store_as(layout, qs, q), k_s = store_as(layout, ks, k), v_s = store_as(layout, ks, v),
                  dout_s = store_as(layout, qs, dout);
  const std::vector<T> zeros_q(q.size(), T(0.0f)), zeros_k(k.size(), T(0.0f));
  Stored<T> out_s = store_as(layout, qs, zeros_q), dq_s = store_as(layout, qs, zeros_q),
            dk_s = store_as(layout, ks, zeros_k), dv_s = store_as(layout, ks, zeros_k);
  const auto in = [](const Stored<T>& x) { return View4<const T>(x.view); };
  const i64 copied_before = detail::strided_copy_bytes();
  {
    const CopyLimit limit(copy_limit < 0 ? detail::strided_copy_limit_bytes() : copy_limit);
    forward(in(q_s), in(k_s), in(v_s), out_s.view, contiguous(lse_s.data(), {B, Hq, N}), o);
    backward(in(q_s), in(k_s), in(v_s), in(out_s), contiguous<const float>(lse_s.data(), {B, Hq, N}), in(dout_s),
             dq_s.view, dk_s.view, dv_s.view, o);
  }
  // What the two calls copied: nothing for N = 37 (too few items read each tensor) or under a
  // cap of 0; under a cap of Q's bytes, Q alone in each call (in the backward dout, as large,
  // no longer fits; bnhd's K and V, one head, are tight already). Uncapped, more than that.
  const i64 copied = detail::strided_copy_bytes() - copied_before;
  const i64 q_bytes = static_cast<i64>((q.size() * sizeof(T) + 63) / 64 * 64);
  if (N < 64 || copy_limit == 0)
    EXPECT_EQ(copied, 0);
  else if (copy_limit == q_bytes)
    EXPECT_EQ(copied, 2 * q_bytes);
  else
    EXPECT_GT(copied, 2 * q_bytes);
  EXPECT_EQ(0, std::memcmp(lse.data(), lse_s.data(), lse.size() * sizeof(float)));
  EXPECT_TRUE(same_bits(out, out_s.view));
  EXPECT_TRUE(same_bits(dq, dq_s.view));
  EXPECT_TRUE(same_bits(dk, dk_s.view));
  EXPECT_TRUE(same_bits(dv, dv_s.view));
}

TEST(Dtypes, StridedViewsGiveTheContiguousBits) {
  for (const KernelVariant& kv : kernel_variants())
    for (Layout layout : {Layout::bnhd, Layout::d_stride2})
      for (i64 N : {37, 200})
        for (int threads : {1, 2}) {
          SCOPED_TRACE(std::string(kv.name) + (layout == Layout::bnhd ? " bnhd" : " D stride 2") + " N " +
                       std::to_string(N) + " threads " + std::to_string(threads));
          {
            SCOPED_TRACE("fp32");
            check_strided_views<float>(layout, N, threads, kv);
          }
          {
            SCOPED_TRACE("bf16");
            check_strided_views<bf16>(layout, N, threads, kv);
          }
          {
            SCOPED_TRACE("fp16");
            check_strided_views<fp16>(layout, N, threads, kv);
          }
        }
}

// Above the memory cap a strided call reads its rows in place, and a cap between tensor sizes
// copies some of them: the bits stay the contiguous call's either way.
TEST(Dtypes, StridedViewsAboveTheCopyCapGiveTheSameBits) {
  const i64 N = 200, q_elements = 1 * 2 * N * 32;  // check_strided_views' Q
  for (const KernelVariant& kv : kernel_variants())
    for (int threads : {1, 2}) {
      SCOPED_TRACE(std::string(kv.name) + " threads " + std::to_string(threads));
      for (i64 limit : {i64{0}, q_elements * 4}) {
        SCOPED_TRACE("fp32, cap " + std::to_string(limit));
        check_strided_views<float>(Layout::bnhd, N, threads, kv, limit);
      }
      for (i64 limit : {i64{0}, q_elements * 2}) {
        SCOPED_TRACE("bf16, cap " + std::to_string(limit));
        check_strided_views<bf16>(Layout::bnhd, N, threads, kv, limit);
      }
    }
}

// The engines' forward reads Vᵀ, and fp16's K split, packed once per call (api.cpp,
// OperandPack) where its heads have lane tiles enough (PackLayout::min_items: bf16 2, fp16
// 16; 520 queries over a group of 2 make 17), else packs them per key tile:
// the same bits either way, with a NaN in one key tile's V (that tile's product skips zero
// weights in both) or K (fp16: that tile's scores widened) too, in bf16 and in fp16
// (split). The cap on the strided copies, lowered to 0, turns the call's packing off.
template <class H>
void check_packed_operands() {
  const i64 B = 2, Hq = 4, Hkv = 2, Nq = 520, Nk = 300, D = 64;
  std::mt19937_64 rng(21);
  Buf<float> qf({B, Hq, Nq, D}), kf({B, Hkv, Nk, D}), vf({B, Hkv, Nk, D});
  for (auto* x : {&qf, &kf, &vf}) fill_normal(x->data, rng);
  const Buf<float> v_finite = vf;
  for (const char* nan_in : {"", "V", "K"}) {
    const bool nan = *nan_in != '\0';
    if (std::string(nan_in) == "V") vf.at(1, 0, 150, 7) = kNaN;
    if (std::string(nan_in) == "K") vf = v_finite, kf.at(1, 0, 150, 7) = kNaN;
    const Buf<H> q = qf.cast<H>(), k = kf.cast<H>(), v = vf.cast<H>();
    for (const KernelVariant& kv : kernel_variants()) {
      SCOPED_TRACE(std::string(kv.name) + (nan ? std::string(" NaN in ") + nan_in : ""));
      const KernelScope scope(kv);
      Options o;
      o.isa = kv.isa, o.threads = 2, o.causal = Causal::bottom_right;
      Buf<H> packed({B, Hq, Nq, D}), per_tile({B, Hq, Nq, D});
      Buf3<float> lse_packed({B, Hq, Nq}), lse_per_tile({B, Hq, Nq});
      // V packed wherever the engine takes the dtype; K only where it is split (fp16 on AMX).
      const bool v_packs = detail::engine_takes(kv.engine(), dtype_of<H>());
      const bool k_packs = v_packs && kv.engine() == Engine16::amx && std::is_same_v<H, fp16>;
      for (bool capped : {false, true}) {
        const CopyLimit limit(capped ? 0 : detail::strided_copy_limit_bytes());
        Plan plan;
        o.plan = &plan;
        forward(q.cview(), k.cview(), v.cview(), capped ? per_tile.view() : packed.view(),
                capped ? lse_per_tile.view() : lse_packed.view(), o);
        // K packs only where V does; under a zero cap neither does (the kernel packs per tile).
        EXPECT_EQ(plan.packed_operands, capped ? 0 : (v_packs ? 1 : 0) + (k_packs ? 1 : 0));
      }
      EXPECT_EQ(0, std::memcmp(packed.data.data(), per_tile.data.data(), packed.data.size() * sizeof(H)));
      EXPECT_EQ(0, std::memcmp(lse_packed.data.data(), lse_per_tile.data.data(), lse_packed.data.size() * sizeof(float)));
      if (nan) {  // the NaN reached the rows of head group (1, 0) that see key 150, and only those
        Buf<float> out = packed.template cast<float>();
        i64 nan_rows = 0;
        for (i64 b = 0; b < B; ++b)
          for (i64 h = 0; h < Hq; ++h)
            for (i64 i = 0; i < Nq; ++i) {
              bool has = false;
              for (i64 d = 0; d < D; ++d) has |= std::isnan(out.at(b, h, i, d));
              EXPECT_EQ(has, b == 1 && h < 2 && i + (Nk - Nq) >= 150) << b << " " << h << " " << i;
              nan_rows += has;
            }
        EXPECT_GT(nan_rows, 0);
      }
    }
  }
}

TEST(Dtypes, Bf16PackedOperandsGiveThePerTileBits) { check_packed_operands<bf16>(); }
TEST(Dtypes, Fp16PackedOperandsGiveThePerTileBits) { check_packed_operands<fp16>(); }

// Errors in a 16-bit call name the argument, as in fp32, and nothing is written.
TEST(Dtypes, BadShapesNameTheArgument) {
  std::vector<bf16> q(1 * 2 * 8 * 16, bf16(1.0f)), kv(1 * 2 * 8 * 8, bf16(1.0f)), out(1 * 2 * 8 * 16, bf16(7.0f));
  std::vector<float> lse(16);
  const auto qv = contiguous<const bf16>(q.data(), {1, 2, 8, 16}), kvv = contiguous<const bf16>(kv.data(), {1, 2, 8, 8});
  try {
    forward(qv, kvv, kvv, contiguous(out.data(), {1, 2, 8, 16}), contiguous(lse.data(), {1, 2, 8}));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("k: head dim 8"), std::string::npos) << e.what();
  }
  for (const bf16& x : out) EXPECT_EQ(x.bits, bf16(7.0f).bits);
}

}  // namespace
}  // namespace sdpa::test
