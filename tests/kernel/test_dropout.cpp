// test_dropout.cpp — the Philox4x32-10 generator against Random123's known answers, the keep
// rate by a binomial test, and the reference kernel's dropout forward and backward against a
// direct computation and finite differences with the same mask.
#include "util.hpp"

namespace sdpa::test {
namespace {

// Random123's tests/kat_vectors, the three philox4x32 10 lines (counter, key -> output); the
// published answers of Salmon et al. (SC'11).
TEST(Dropout, PhiloxMatchesRandom123KnownAnswers) {
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}), (Philox4x32Counter{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (Philox4x32Counter{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (Philox4x32Counter{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

// Over N positions (b, h, i, j) the number kept is Binomial(N, 1 - p) if the bits are fair and
// independent: z = (kept - N(1 - p)) / sqrt(N p (1 - p)) is about N(0, 1). |z| <= 5 fails a
// correct generator with probability 6e-7 per check; a rate off by 0.1% at N = 2^20 and
// p = 0.5 already gives |z| ≈ 2, a wrong threshold or word index far more. Checked for each of
// the four words of a block separately (j % 4), and for the agreement of two offsets' masks,
// which independent masks make 1 - 2p(1 - p).
TEST(Dropout, KeepRateIsBinomial) {
  constexpr i64 B = 2, H = 8, N = 256;  // 2·8·256·256 = 2^20 positions
  for (const double p : {0.1, 0.5, 0.9}) {
    const Dropout d{p, 0x1234567890abcdefull, 7}, d2{p, 0x1234567890abcdefull, 8};
    std::array<double, 4> kept{};
    double agree = 0, total = 0;
    for (i64 b = 0; b < B; ++b)
      for (i64 h = 0; h < H; ++h)
        for (i64 i = 0; i < N; ++i)
          for (i64 j = 0; j < N; ++j) {
            const bool k = d.keep(b, h, H, i, j);
            kept[static_cast<std::size_t>(j & 3)] += k;
            agree += (k == d2.keep(b, h, H, i, j));
            total += 1;
          }
    for (int w = 0; w < 4; ++w) {
      const double n = total / 4, z = (kept[w] - n * (1 - p)) / std::sqrt(n * p * (1 - p));
      EXPECT_LE(std::abs(z), 5.0) << "p " << p << ", word " << w << ": kept " << kept[w] << " of " << n;
    }
    const double q = 1 - 2 * p * (1 - p), z = (agree - total * q) / std::sqrt(total * q * (1 - q));
    EXPECT_LE(std::abs(z), 5.0) << "p " << p << ": offsets 7 and 8 agree on " << agree << " of " << total;
  }
}

struct Small {
  Buf<double> q{{1, 2, 6, 4}}, k{{1, 1, 7, 4}}, v{{1, 1, 7, 3}}, dout{{1, 2, 6, 3}};
  Options opt;
  Small() {
    std::mt19937_64 rng(21);
    std::normal_distribution<double> n;
    for (auto* b : {&q, &k, &v, &dout})
      for (auto& x : b->data) x = n(rng);
    opt.kernel = Kernel::reference;
    opt.causal = Causal::bottom_right;
    opt.dropout = {0.3, 99, 5};
  }
  // loss = Σ out · dout, in fp64 by the reference kernel.
  double loss() const {
    Buf<double> out({1, 2, 6, 3});
    Buf3<double> lse({1, 2, 6});
    reference::forward<double, double>(q.cview(), k.cview(), v.cview(), out.view(), lse.view(), opt);
    double s = 0;
    for (std::size_t x = 0; x < out.data.size(); ++x) s += out.data[x] * dout.data[x];
    return s;
  }
};

// The forward: out_i = Σ_j softmax_j(s_i) keep_ij / (1 - p) v_j, written out here in fp64.
TEST(Dropout, ReferenceForwardAppliesTheMask) {
  const Small s;
  Buf<double> out({1, 2, 6, 3});
  Buf3<double> lse({1, 2, 6});
  reference::forward<double, double>(s.q.cview(), s.k.cview(), s.v.cview(), out.view(), lse.view(), s.opt);
  int dropped = 0;
  for (i64 h = 0; h < 2; ++h)
    for (i64 i = 0; i < 6; ++i) {
      std::vector<double> sc;
      for (i64 j = 0; j <= i + 1; ++j) {  // bottom-right causal: Nk - Nq = 1
        double x = 0;
        for (i64 d = 0; d < 4; ++d) x += s.q.data[((h * 6 + i) * 4 + d)] * s.k.data[j * 4 + d];
        sc.push_back(x / 2.0);  // β = 1/√4
      }
      double m = -INFINITY, l = 0;
      for (double x : sc) m = std::max(m, x);
      for (double x : sc) l += std::exp(x - m);
      for (i64 e = 0; e < 3; ++e) {
        double o = 0;
        for (i64 j = 0; j < static_cast<i64>(sc.size()); ++j)
          if (s.opt.dropout.keep(0, h, 2, i, j)) o += std::exp(sc[j] - m) / l / 0.7 * s.v.data[j * 3 + e];
        EXPECT_NEAR(out.data[((h * 6 + i) * 3 + e)], o, 1e-12);
      }
      for (i64 j = 0; j < static_cast<i64>(sc.size()); ++j) dropped += !s.opt.dropout.keep(0, h, 2, i, j);
      EXPECT_NEAR(lse.data[h * 6 + i], m + std::log(l), 1e-12) << "lse is the undropped one";
    }
  EXPECT_GT(dropped, 0) << "no key dropped: the test would not see the mask";
}

// The backward, given the same mask (same seed and offset), against central differences of
// the forward in fp64: truncation O(h²) ≈ 1e-12 and cancellation ≈ eps·|loss|/h ≈ 1e-10 for
// h = 1e-6, so 1e-7 is a bound far above both and far below a missing mask (O(1)).
TEST(Dropout, ReferenceBackwardMatchesFiniteDifferences) {
  Small s;
  Buf<double> out({1, 2, 6, 3}), dq(s.q.shape), dk(s.k.shape), dv(s.v.shape);
  Buf3<double> lse({1, 2, 6});
  reference::forward<double, double>(s.q.cview(), s.k.cview(), s.v.cview(), out.view(), lse.view(), s.opt);
  reference::backward<double, double>(s.q.cview(), s.k.cview(), s.v.cview(), out.cview(), lse.cview(), s.dout.cview(),
                                      dq.view(), dk.view(), dv.view(), s.opt);
  const double h = 1e-6;
  for (auto [x, g, name] : {std::tuple{&s.q, &dq, "dq"}, std::tuple{&s.k, &dk, "dk"}, std::tuple{&s.v, &dv, "dv"}}) {
    for (std::size_t e = 0; e < x->data.size(); ++e) {
      const double keep = x->data[e];
      x->data[e] = keep + h;
      const double up = s.loss();
      x->data[e] = keep - h;
      const double down = s.loss();
      x->data[e] = keep;
      EXPECT_NEAR(g->data[e], (up - down) / (2 * h), 1e-7) << name << "[" << e << "]";
    }
  }
}

TEST(Dropout, ArgumentsAreChecked) {
  const Small s;
  Buf<float> q = s.q.cast<float>(), k = s.k.cast<float>(), v = s.v.cast<float>(), out({1, 2, 6, 3});
  Buf3<float> lse({1, 2, 6});
  Options o = s.opt;
  o.kernel = Kernel::fast;
  EXPECT_THROW(
      {
        try {
          forward(q.cview(), k.cview(), v.cview(), out.view(), lse.view(), o);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("dropout: the fast kernel does not implement dropout yet"), std::string::npos);
          throw;
        }
      },
      Error);
  o.kernel = Kernel::reference;
  for (double bad : {-0.1, 1.0, static_cast<double>(NAN)}) {
    o.dropout.p = bad;
    EXPECT_THROW(forward(q.cview(), k.cview(), v.cview(), out.view(), lse.view(), o), Error) << bad;
  }
  // p = 0 is no dropout, bit for bit.
  o.dropout.p = 0;
  Buf<float> plain({1, 2, 6, 3});
  forward(q.cview(), k.cview(), v.cview(), out.view(), lse.view(), o);
  o.dropout = {};
  forward(q.cview(), k.cview(), v.cview(), plain.view(), lse.view(), o);
  EXPECT_EQ(out.data, plain.data);
}

}  // namespace
}  // namespace sdpa::test
