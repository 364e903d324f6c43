// test_sinks.cpp — attention sinks (Options::sinks): a logit per query head that joins each
// row's softmax as a key with no value. The fast kernel against the fp64 reference by the
// project's rule (DtypeYardstick, util.hpp, which judges ∂L/∂sinks too) on every kernel
// variant and dtype, through each forward loop (tiled, few-lane, fused decoding, split-KV
// merge, the 16-bit engines), dropout, soft-cap, windows and rows whose keys are all masked;
// the same bits for 1, 2 and 7 threads; the reference's ∂L/∂sinks against finite differences
// of its own forward; varlen against one call per sequence; and what a sink of −∞ means.
#include <cstring>
#include <optional>

#include "util.hpp"

namespace sdpa::test {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct SinkCase {
  const char* name;
  i64 B, Hq, Hkv, Nq, Nk, Dk, Dv;
  Causal causal = Causal::none;
  Window window{};
  std::optional<double> softcap;
  double dropout = 0.0;
  bool empty_rows = false;  // a keep-mask that hides every key from rows 3 and 7
};

void PrintTo(const SinkCase& c, std::ostream* os) { *os << c.name; }

// Each forward loop: tiled (prefill), few lanes with a window and soft-cap, the fused decoding
// loop with its keys split (5000 keys, one item: two splits, merged with the sink once),
// dropout (the sink never dropped), and masked rows whose weight all goes to the sink.
const SinkCase kCases[] = {
    {"prefill_gqa_causal", 2, 4, 2, 70, 70, 32, 32, Causal::top_left},
    {"decoding_split_kv", 1, 4, 1, 1, 5000, 64, 64},
    {"few_lanes_window_softcap", 1, 2, 1, 3, 200, 16, 24, Causal::bottom_right, {20, 0}, 5.0},
    {"dropout", 2, 2, 2, 40, 50, 24, 24, Causal::none, {}, std::nullopt, 0.2},
    {"empty_rows", 1, 2, 1, 20, 30, 16, 16, Causal::none, {}, std::nullopt, 0.0, true},
};

// Sinks of either sign and size beside scores of order 1, and −∞ (no sink) on one head: values
// exact in fp32 (the finite differences below step them by 2^-10 exactly).
std::vector<float> sink_values(i64 hq) {
  const float pattern[] = {0.5f, -1.25f, 2.0f, kNegInf, 3.0f, -0.75f};
  std::vector<float> s(static_cast<std::size_t>(hq));
  for (i64 h = 0; h < hq; ++h) s[static_cast<std::size_t>(h)] = pattern[h % 6];
  return s;
}

struct Inputs {
  Buf<float> q, k, v, dout;  // values of the dtype
  Buf<std::uint8_t> keep;
  std::vector<float> sinks;
  Options opt;
};

Inputs make_inputs(const SinkCase& c, Dtype t, std::uint64_t seed = 7) {
  Inputs in{Buf<float>({c.B, c.Hq, c.Nq, c.Dk}),
            Buf<float>({c.B, c.Hkv, c.Nk, c.Dk}),
            Buf<float>({c.B, c.Hkv, c.Nk, c.Dv}),
            Buf<float>({c.B, c.Hq, c.Nq, c.Dv}),
            {},
            sink_values(c.Hq),
            {}};
  std::mt19937_64 rng(seed);
  for (auto* x : {&in.q, &in.k, &in.v, &in.dout}) {
    fill_normal(x->data, rng);
    round_all(x->data, t);
  }
  in.opt.causal = c.causal;
  in.opt.window = c.window;
  in.opt.softcap = c.softcap;
  if (c.dropout > 0) in.opt.dropout = Dropout{c.dropout, 0x5eedULL, 3};
  if (c.empty_rows) {
    in.keep = Buf<std::uint8_t>({1, 1, c.Nq, c.Nk});
    for (i64 i = 0; i < c.Nq; ++i)
      for (i64 j = 0; j < c.Nk; ++j)
        in.keep.at(0, 0, i, j) = (i == 3 || i == 7) ? 0 : static_cast<std::uint8_t>((i + j) % 5 != 0);
    in.opt.keep = in.keep.cview();
  }
  in.opt.sinks = {in.sinks.data(), {c.Hq}, {1}};
  return in;
}

template <class H>
struct SinkRun {
  Buf<H> out, dq, dk, dv;
  Buf3<float> lse;
  std::vector<float> dsinks;
};

template <class H>
SinkRun<H> run(const SinkCase& c, const Inputs& in, Options o) {
  const Buf<H> q = in.q.cast<H>(), k = in.k.cast<H>(), v = in.v.cast<H>(), dout = in.dout.cast<H>();
  SinkRun<H> r{Buf<H>({c.B, c.Hq, c.Nq, c.Dv}),
           {},
           {},
           {},
           Buf3<float>({c.B, c.Hq, c.Nq}),
           std::vector<float>(static_cast<std::size_t>(c.Hq), kNaN)};
  forward(q.cview(), k.cview(), v.cview(), r.out.view(), r.lse.view(), o);
  r.dq = Buf<H>(q.shape), r.dk = Buf<H>(k.shape), r.dv = Buf<H>(v.shape);
  o.dsinks = {r.dsinks.data(), {c.Hq}, {1}};
  backward(q.cview(), k.cview(), v.cview(), r.out.cview(), r.lse.cview(), dout.cview(), r.dq.view(), r.dk.view(),
           r.dv.view(), o);
  return r;
}

template <class H>
std::vector<float> widen(const Buf<H>& x) {
  return x.template cast<float>().data;
}

template <class H>
void check_case(const SinkCase& c) {
  const Dtype t = std::is_same_v<H, float> ? Dtype::f32 : dtype_of<H>();
  SCOPED_TRACE(std::string(c.name) + " " + dtype_name(t));
  const Inputs in = make_inputs(c, t);
  const DtypeYardstick rule(t, in.q, in.k, in.v, in.dout, in.opt);
  for_each_variant(in.opt, [&](const KernelVariant&, Options o) {
    o.threads = 2;
    const SinkRun<H> r = run<H>(c, in, o);
    SDPA_EXPECT_WITHIN("out", rule.out(widen(r.out)));
    SDPA_EXPECT_WITHIN("lse", rule.lse(r.lse.data));
    SDPA_EXPECT_WITHIN("dq", rule.dq(widen(r.dq)));
    SDPA_EXPECT_WITHIN("dk", rule.dk(widen(r.dk)));
    SDPA_EXPECT_WITHIN("dv", rule.dv(widen(r.dv)));
    SDPA_EXPECT_WITHIN("dsinks", rule.dsinks(r.dsinks));
    if (c.Hq > 3) EXPECT_EQ(r.dsinks[3], 0.0f) << "head 3 has no sink (-inf): its gradient is 0";
    if (c.empty_rows)  // every key masked: all weight on the sink, out 0 and lse the sink's logit
      for (i64 h = 0; h < c.Hq; ++h)
        for (i64 i : {3, 7}) {
          EXPECT_EQ(r.lse.data[static_cast<std::size_t>(h * c.Nq + i)], in.sinks[static_cast<std::size_t>(h)]);
          for (i64 e = 0; e < c.Dv; ++e) EXPECT_EQ(static_cast<float>(r.out.cview()(0, h, i, e)), 0.0f);
        }
    // The same bits for any thread count (1 and 7 take other schedules and splits of the work).
    for (int threads : {1, 7}) {
      SCOPED_TRACE(threads);
      o.threads = threads;
      const SinkRun<H> again = run<H>(c, in, o);
      for (const auto& [a, b] :
           {std::pair{&r.out, &again.out}, {&r.dq, &again.dq}, {&r.dk, &again.dk}, {&r.dv, &again.dv}})
        EXPECT_EQ(0, std::memcmp(a->data.data(), b->data.data(), a->data.size() * sizeof(H)));
      EXPECT_EQ(0, std::memcmp(r.lse.data.data(), again.lse.data.data(), r.lse.data.size() * sizeof(float)));
      EXPECT_EQ(0, std::memcmp(r.dsinks.data(), again.dsinks.data(), r.dsinks.size() * sizeof(float)));
    }
  });
}

class Sinks : public ::testing::TestWithParam<SinkCase> {};

TEST_P(Sinks, Fp32WithinTheRuleOnEveryVariant) { check_case<float>(GetParam()); }
TEST_P(Sinks, Bf16WithinTheRuleOnEveryVariant) { check_case<bf16>(GetParam()); }
TEST_P(Sinks, Fp16WithinTheRuleOnEveryVariant) { check_case<fp16>(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Cases, Sinks, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<SinkCase>& i) { return std::string(i.param.name); });

// The decoding case reaches the fused loop and splits its keys: the sink is merged once, after
// the splits (a split's partial must not hold it).
TEST(SinksPlan, DecodingCaseSplitsTheKeys) {
  const Inputs in = make_inputs(kCases[1], Dtype::f32);
  for (Isa isa : runnable_isas()) {
    SCOPED_TRACE(isa_name(isa));
    Options o = in.opt;
    o.isa = isa;
    Plan plan;
    o.plan = &plan;
    Buf<float> out({1, 4, 1, 64});
    Buf3<float> lse({1, 4, 1});
    forward(in.q.cview(), in.k.cview(), in.v.cview(), out.view(), lse.view(), o);
    EXPECT_EQ(plan.kv_splits, 2);
    EXPECT_EQ(plan.decoding_items + plan.few_lane_items, 2);
  }
}

// ∂L/∂sink_h of the reference (L = Σ dout·out) against a central difference of its own fp64
// forward, step 2^-10 (the sinks stay exact in fp32): the formula, checked independently of
// any kernel; and the fast kernel's within the rule's bound of that difference.
TEST(SinksGradient, MatchesFiniteDifferences) {
  const SinkCase& c = kCases[0];
  Inputs in = make_inputs(c, Dtype::f32);
  const Buf<double> q = in.q.cast<double>(), k = in.k.cast<double>(), v = in.v.cast<double>();
  const auto loss = [&](const Options& o) {
    Buf<double> out({c.B, c.Hq, c.Nq, c.Dv});
    Buf3<double> lse({c.B, c.Hq, c.Nq});
    reference::forward<double, double>(q.cview(), k.cview(), v.cview(), out.view(), lse.view(), o);
    double l = 0.0;
    for (std::size_t x = 0; x < out.data.size(); ++x) l += out.data[x] * static_cast<double>(in.dout.data[x]);
    return l;
  };
  const DtypeYardstick rule(Dtype::f32, in.q, in.k, in.v, in.dout, in.opt);
  Options o = in.opt;
  o.threads = 2;
  const SinkRun<float> fast = run<float>(c, in, o);
  constexpr float kStep = 1.0f / 1024;
  for (i64 h = 0; h < c.Hq; ++h) {
    if (in.sinks[static_cast<std::size_t>(h)] == kNegInf) continue;
    SCOPED_TRACE(h);
    std::vector<float> up = in.sinks, down = in.sinks;
    up[static_cast<std::size_t>(h)] += kStep, down[static_cast<std::size_t>(h)] -= kStep;
    Options ou = in.opt, od = in.opt;
    ou.sinks = {up.data(), {c.Hq}, {1}}, od.sinks = {down.data(), {c.Hq}, {1}};
    const double fd = (loss(ou) - loss(od)) / (2.0 * kStep);
    const double gold = rule.dsinks64[static_cast<std::size_t>(h)];
    // The central difference's own error is O(step²·|L'''|) with |L'''| of order |L'| here.
    EXPECT_NEAR(gold, fd, 1e-5 * (1.0 + std::abs(fd)));
    EXPECT_NEAR(fast.dsinks[static_cast<std::size_t>(h)], fd,
                rule.dsinks(fast.dsinks).bound + 1e-5 * (1.0 + std::abs(fd)));
  }
}

// Sinks of −∞ are no sinks: the same bits as a call without them, and a zero gradient.
TEST(SinksNegInf, AreNoSinks) {
  const SinkCase& c = kCases[0];
  Inputs in = make_inputs(c, Dtype::f32);
  std::fill(in.sinks.begin(), in.sinks.end(), kNegInf);
  for (Isa isa : runnable_isas()) {
    SCOPED_TRACE(isa_name(isa));
    Options with = in.opt, without = in.opt;
    with.isa = without.isa = isa;
    without.sinks = {};
    const SinkRun<float> a = run<float>(c, in, with);
    Buf<float> out({c.B, c.Hq, c.Nq, c.Dv});
    Buf3<float> lse({c.B, c.Hq, c.Nq});
    forward(in.q.cview(), in.k.cview(), in.v.cview(), out.view(), lse.view(), without);
    EXPECT_EQ(0, std::memcmp(a.out.data.data(), out.data.data(), out.data.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(a.lse.data.data(), lse.data.data(), lse.data.size() * sizeof(float)));
    for (float g : a.dsinks) EXPECT_EQ(g, 0.0f);
  }
}

// A packed batch with sinks: each sequence as its own call with the same sinks, and ∂L/∂sinks
// the sum over the sequences.
TEST(SinksVarlen, EqualsOneCallPerSequence) {
  const i64 Hq = 4, Hkv = 2, D = 16;
  const std::vector<std::int64_t> cu = {0, 5, 5, 17, 40};  // one sequence without rows
  const i64 T = cu.back();
  std::mt19937_64 rng(3);
  std::vector<float> q(static_cast<std::size_t>(T * Hq * D)), k(static_cast<std::size_t>(T * Hkv * D)), v(k.size()),
      dout(q.size());
  for (auto* x : {&q, &k, &v, &dout}) fill_normal(*x, rng);
  std::vector<float> sinks = sink_values(Hq), dsinks(static_cast<std::size_t>(Hq));
  Options o;
  o.causal = Causal::bottom_right;
  o.sinks = {sinks.data(), {Hq}, {1}};
  std::vector<float> out(q.size()), lse(static_cast<std::size_t>(Hq * T)), dq(q.size()), dk(k.size()), dv(v.size());
  const auto v3 = [D](std::vector<float>& x, i64 t, i64 h) {
    return contiguous(x.data(), std::array<i64, 3>{t, h, D});
  };
  const SeqOffsets offsets(View<const std::int64_t, 1>{cu.data(), {static_cast<i64>(cu.size())}, {1}});
  forward_varlen(View3<const float>(v3(q, T, Hq)), v3(k, T, Hkv), v3(v, T, Hkv), offsets, offsets, v3(out, T, Hq),
                 contiguous(lse.data(), std::array<i64, 2>{Hq, T}), o);
  Options ob = o;
  ob.dsinks = {dsinks.data(), {Hq}, {1}};
  backward_varlen(v3(q, T, Hq), v3(k, T, Hkv), v3(v, T, Hkv), offsets, offsets, v3(out, T, Hq),
                  contiguous(lse.data(), std::array<i64, 2>{Hq, T}), v3(dout, T, Hq), v3(dq, T, Hq), v3(dk, T, Hkv),
                  v3(dv, T, Hkv), ob);
  std::vector<double> dsinks_sum(static_cast<std::size_t>(Hq), 0.0);
  for (std::size_t s = 0; s + 1 < cu.size(); ++s) {
    const i64 r0 = cu[s], L = cu[s + 1] - cu[s];
    if (L == 0) continue;
    SCOPED_TRACE(s);
    Buf<float> sq({1, Hq, L, D}), sk({1, Hkv, L, D}), sv({1, Hkv, L, D}), sd({1, Hq, L, D});
    for (i64 i = 0; i < L; ++i)
      for (i64 d = 0; d < D; ++d) {
        for (i64 h = 0; h < Hq; ++h) {
          sq.at(0, h, i, d) = q[static_cast<std::size_t>(((r0 + i) * Hq + h) * D + d)];
          sd.at(0, h, i, d) = dout[static_cast<std::size_t>(((r0 + i) * Hq + h) * D + d)];
        }
        for (i64 g = 0; g < Hkv; ++g) {
          sk.at(0, g, i, d) = k[static_cast<std::size_t>(((r0 + i) * Hkv + g) * D + d)];
          sv.at(0, g, i, d) = v[static_cast<std::size_t>(((r0 + i) * Hkv + g) * D + d)];
        }
      }
    Buf<float> so({1, Hq, L, D}), gq({1, Hq, L, D}), gk({1, Hkv, L, D}), gv({1, Hkv, L, D});
    Buf3<float> sl({1, Hq, L});
    std::vector<float> ds(static_cast<std::size_t>(Hq));
    forward(sq.cview(), sk.cview(), sv.cview(), so.view(), sl.view(), o);
    Options os = o;
    os.dsinks = {ds.data(), {Hq}, {1}};
    backward(sq.cview(), sk.cview(), sv.cview(), so.cview(), sl.cview(), sd.cview(), gq.view(), gk.view(), gv.view(),
             os);
    for (i64 h = 0; h < Hq; ++h) {
      dsinks_sum[static_cast<std::size_t>(h)] += ds[static_cast<std::size_t>(h)];
      for (i64 i = 0; i < L; ++i) {
        EXPECT_EQ(lse[static_cast<std::size_t>(h * T + r0 + i)], sl.data[static_cast<std::size_t>(h * L + i)]);
        for (i64 d = 0; d < D; ++d) {
          EXPECT_EQ(out[static_cast<std::size_t>(((r0 + i) * Hq + h) * D + d)], so.at(0, h, i, d));
          EXPECT_EQ(dq[static_cast<std::size_t>(((r0 + i) * Hq + h) * D + d)], gq.at(0, h, i, d));
        }
      }
    }
  }
  for (i64 h = 0; h < Hq; ++h)
    EXPECT_EQ(dsinks[static_cast<std::size_t>(h)], static_cast<float>(dsinks_sum[static_cast<std::size_t>(h)]));
}

template <class F>
void expect_error(F f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one saying '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(SinksErrors, NameTheArgument) {
  Problem4 x(1, 2, 1, 4, 4, 8, 8, 1);
  std::vector<float> three(3, 0.0f), nan_sink = {0.0f, kNaN}, two(2, 0.0f);
  const auto forward_with = [&](Options o) {
    forward(x.q.cview(), x.k.cview(), x.v.cview(), x.out.view(), x.lse.view(), o);
  };
  Options o;
  o.sinks = {three.data(), {3}, {1}};
  expect_error([&] { forward_with(o); }, "sinks: shape [3] should be [Hq] = [2]");
  o.sinks = {nan_sink.data(), {2}, {1}};
  expect_error([&] { forward_with(o); }, "sinks: head 1 is nan");
  o.sinks = {};
  o.dsinks = {two.data(), {2}, {1}};
  expect_error([&] { forward_with(o); }, "dsinks: set without sinks");
}

}  // namespace
}  // namespace sdpa::test
