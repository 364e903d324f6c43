// test_dropout.cpp — the Philox4x32-10 generator against Random123's known answers, the keep
// rate by a binomial test, and the reference kernel's dropout forward and backward against a
// direct computation and finite differences with the same mask.
#include <cstring>

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
// independent, p being the rate applied, threshold / 2^16 (within 2^-17 of the p asked for):
// z = (kept - N(1 - p)) / sqrt(N p (1 - p)) is about N(0, 1). |z| <= 5 fails a correct
// generator with probability 6e-7 per check; a rate off by 0.1% at N = 2^20 and p = 0.5
// already gives |z| ≈ 2, a wrong threshold or half far more. Checked for each of the eight
// 16-bit halves of a block separately (j % 8), and for the agreement of two offsets' masks,
// which independent masks make 1 - 2p(1 - p).
TEST(Dropout, KeepRateIsBinomial) {
  constexpr i64 B = 2, H = 8, N = 256;  // 2·8·256·256 = 2^20 positions
  for (const double p_asked : {0.1, 0.5, 0.9}) {
    const Dropout d{p_asked, 0x1234567890abcdefull, 7}, d2{p_asked, 0x1234567890abcdefull, 8};
    const double p = d.threshold() / 65536.0;
    EXPECT_LE(std::abs(p - p_asked), 1.0 / 131072) << "threshold " << d.threshold();
    std::array<double, 8> kept{};
    double agree = 0, total = 0;
    for (i64 b = 0; b < B; ++b)
      for (i64 h = 0; h < H; ++h)
        for (i64 i = 0; i < N; ++i)
          for (i64 j = 0; j < N; ++j) {
            const bool k = d.keep(b, h, H, i, j);
            kept[static_cast<std::size_t>(j & 7)] += k;
            agree += (k == d2.keep(b, h, H, i, j));
            total += 1;
          }
    for (int x = 0; x < 8; ++x) {
      const double n = total / 8, z = (kept[x] - n * (1 - p)) / std::sqrt(n * p * (1 - p));
      EXPECT_LE(std::abs(z), 5.0) << "p " << p << ", half " << x << ": kept " << kept[x] << " of " << n;
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
  for (Kernel kernel : {Kernel::fast, Kernel::reference}) {
    Options o = s.opt;
    o.kernel = kernel;
    for (double bad : {-0.1, 1.0, 1.5, static_cast<double>(NAN)}) {
      o.dropout.p = bad;
      EXPECT_THROW(
          {
            try {
              forward(q.cview(), k.cview(), v.cview(), out.view(), lse.view(), o);
            } catch (const Error& e) {
              EXPECT_NE(std::string(e.what()).find("dropout: p must be in [0, 1)"), std::string::npos) << e.what();
              throw;
            }
          },
          Error)
          << bad;
    }
  }
}

// p = 0 is no dropout, bit for bit, forward and backward, on both kernels and every ISA.
TEST(Dropout, ZeroIsNoDropout) {
  const Small s;
  Buf<float> q = s.q.cast<float>(), k = s.k.cast<float>(), v = s.v.cast<float>(), dout = s.dout.cast<float>();
  const std::vector<KernelVariant> kernels = kernel_variants();
  for (std::size_t run = 0; run <= kernels.size(); ++run) {  // each kernel variant, then the reference
    const bool fast = run < kernels.size();
    const KernelVariant kv = fast ? kernels[run] : KernelVariant{Isa::scalar};
    SCOPED_TRACE(fast ? kv.name : "reference");
    const KernelScope scope(kv);
    Options o = s.opt;
    if (fast) o.kernel = Kernel::fast, o.isa = kv.isa;
    std::vector<float> with[2];
    for (int pass = 0; pass < 2; ++pass) {
      o.dropout = pass == 0 ? Dropout{0.0, 99, 5} : Dropout{};
      Buf<float> out({1, 2, 6, 3}), dq(q.shape), dk(k.shape), dv(v.shape);
      Buf3<float> lse({1, 2, 6});
      forward(q.cview(), k.cview(), v.cview(), out.view(), lse.view(), o);
      backward(q.cview(), k.cview(), v.cview(), out.cview(), lse.cview(), dout.cview(), dq.view(), dk.view(), dv.view(),
               o);
      for (auto* b : {&out.data, &lse.data, &dq.data, &dk.data, &dv.data}) with[pass].insert(with[pass].end(), b->begin(), b->end());
    }
    EXPECT_EQ(std::memcmp(with[0].data(), with[1].data(), with[0].size() * sizeof(float)), 0);
  }
}

// The fast kernel's own mask, read back from its outputs: with q = 0 every score is 0, so
// P = 1/Nk exactly (Nk a power of 2), and with v_j = e_j (Dv = Nk) out_ie = keep_ie/(1 - p)/Nk;
// with dout_i = e_i (Nq <= Dv), dv_je = Σ_i P̃_ij dout_ie = keep_ej/(1 - p)/Nk is the mask
// the backward regenerated. Counts the positions where either differs from want(b, h, i, j).
struct MaskReadBack {
  i64 kept = 0, wrong_fwd = 0, wrong_bwd = 0;
};
template <class Want>
MaskReadBack read_back_mask(const Options& o, i64 B, i64 H, i64 Nq, i64 Nk, Want want) {
  Buf<float> q({B, H, Nq, 16}), k({B, H, Nk, 16}), v({B, H, Nk, Nk}), dout({B, H, Nq, Nk});
  std::mt19937_64 rng(5);
  fill_normal(k.data, rng);  // q = 0: the scores are 0 whatever k is
  for (i64 b = 0; b < B; ++b)
    for (i64 h = 0; h < H; ++h) {
      for (i64 j = 0; j < Nk; ++j) v.at(b, h, j, j) = 1.0f;
      for (i64 i = 0; i < Nq; ++i) dout.at(b, h, i, i) = 1.0f;
    }
  Buf<float> out({B, H, Nq, Nk}), dq(q.shape), dk(k.shape), dv(v.shape);
  Buf3<float> lse({B, H, Nq});
  forward(q.cview(), k.cview(), v.cview(), out.view(), lse.view(), o);
  backward(q.cview(), k.cview(), v.cview(), out.cview(), lse.cview(), dout.cview(), dq.view(), dk.view(), dv.view(), o);
  const double unit = (1.0 - o.dropout.p) * Nk;  // out·unit is keep, 0 or 1
  MaskReadBack r;
  for (i64 b = 0; b < B; ++b)
    for (i64 h = 0; h < H; ++h)
      for (i64 i = 0; i < Nq; ++i)
        for (i64 j = 0; j < Nk; ++j) {
          const bool w = want(b, h, i, j);
          const double fwd = out.at(b, h, i, j) * unit, bwd = dv.at(b, h, j, i) * unit;
          r.wrong_fwd += std::abs(fwd - (w ? 1.0 : 0.0)) > 1e-5;
          r.wrong_bwd += std::abs(bwd - (w ? 1.0 : 0.0)) > 1e-5;
          r.kept += fwd > 0.5;
        }
  return r;
}

// The mask must be Dropout::keep at every position (the same function as the reference's),
// and the number kept Binomial(N, 1 - p) (the z rule of KeepRateIsBinomial). Threads 1 and
// 16 against B·Hkv = 4 items: the one-pass and the two-pass backward.
TEST(Dropout, FastKernelMaskIsTheReferenceMaskAndBinomial) {
  constexpr i64 B = 2, H = 2, Nq = 96, Nk = 256;  // 2·2·96·256 = 98304 positions
  for (const KernelVariant& kv : kernel_variants())
    for (double p : {0.1, 0.5})
      for (int threads : {1, 16}) {
        SCOPED_TRACE(std::string(kv.name) + " p " + std::to_string(p) + " threads " + std::to_string(threads));
        const KernelScope scope(kv);
        Options o;
        o.isa = kv.isa, o.threads = threads, o.dropout = {p, 0xfeedfacecafebeefull, 41};
        const MaskReadBack r =
            read_back_mask(o, B, H, Nq, Nk, [&](i64 b, i64 h, i64 i, i64 j) { return o.dropout.keep(b, h, H, i, j); });
        EXPECT_EQ(r.wrong_fwd, 0) << "forward mask differs from Dropout::keep";
        EXPECT_EQ(r.wrong_bwd, 0) << "backward mask differs from Dropout::keep";
        const double n = B * H * Nq * Nk, z = (r.kept - n * (1 - p)) / std::sqrt(n * p * (1 - p));
        EXPECT_LE(std::abs(z), 5.0) << "kept " << r.kept << " of " << n;
      }
}

// A call placed in a longer sequence (Dropout::row0, key0: a block of ring attention) draws
// the sequence's mask at its positions: the kernel's mask at (i, j) is the whole sequence's
// Dropout::keep at (row0 + i, key0 + j). key0 not a multiple of 8 (a key octet split between
// two blocks), and the last positions the 32-bit counter words hold; the tiled and the
// few-lane forward (Nq = 3), both backward schedules (threads 1, 16 against B·Hkv = 2).
TEST(Dropout, FastKernelMaskAtSequencePositions) {
  constexpr i64 B = 1, H = 2, Nk = 64;
  const Dropout whole{0.3, 0x0123456789abcdefull, 5};  // row0 = key0 = 0: the sequence's own call
  struct Place {
    i64 row0, key0, Nq;
  };
  for (const Place at : {Place{37, 5, 45}, Place{6, 7, 3}, Place{(i64{1} << 32) - 45, (i64{1} << 35) - Nk - 3, 45}})
    for (const KernelVariant& kv : kernel_variants())
      for (int threads : {1, 16}) {
        SCOPED_TRACE(std::string(kv.name) + " row0 " + std::to_string(at.row0) + " key0 " + std::to_string(at.key0) +
                     " threads " + std::to_string(threads));
        const KernelScope scope(kv);
        Options o;
        o.isa = kv.isa, o.threads = threads, o.dropout = whole;
        o.dropout.row0 = at.row0, o.dropout.key0 = at.key0;
        const MaskReadBack r = read_back_mask(o, B, H, at.Nq, Nk, [&](i64 b, i64 h, i64 i, i64 j) {
          return whole.keep(b, h, H, at.row0 + i, at.key0 + j);
        });
        EXPECT_EQ(r.wrong_fwd, 0) << "forward mask differs from the sequence's Dropout::keep";
        EXPECT_EQ(r.wrong_bwd, 0) << "backward mask differs from the sequence's Dropout::keep";
      }
}

// The call's place is checked: negative starts, and with dropout positions past the 32-bit
// counter words, are refused on both kernels, naming the field.
TEST(Dropout, PositionsAreChecked) {
  const Small s;
  Buf<float> q = s.q.cast<float>(), k = s.k.cast<float>(), v = s.v.cast<float>(), out({1, 2, 6, 3});
  Buf3<float> lse({1, 2, 6});
  struct Bad {
    i64 batch0, row0, key0;
    const char* says;
  };
  const Bad bad[] = {{-1, 0, 0, "dropout: batch0 must be >= 0"},
                     {0, -1, 0, "dropout: row0 must be >= 0"},
                     {0, 0, -3, "dropout: key0 must be >= 0"},
                     {0, (i64{1} << 32) - 5, 0, "dropout: row0 + Nq must be <= 2^32"},
                     {0, 0, (i64{1} << 35) - 3, "dropout: key0 + Nk must be <= 2^35"},
                     {i64{1} << 31, 0, 0, "dropout: (batch0 + B)·Hq must be <= 2^32"}};
  for (Kernel kernel : {Kernel::fast, Kernel::reference})
    for (const Bad& b : bad) {
      Options o = s.opt;
      o.kernel = kernel;
      o.dropout.batch0 = b.batch0, o.dropout.row0 = b.row0, o.dropout.key0 = b.key0;
      try {
        forward(q.cview(), k.cview(), v.cview(), out.view(), lse.view(), o);
        ADD_FAILURE() << "accepted: " << b.says;
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(b.says), std::string::npos) << e.what();
      }
    }
  Options o = s.opt;  // the last positions that fit are accepted
  o.dropout.row0 = (i64{1} << 32) - 6, o.dropout.key0 = (i64{1} << 35) - 7;
  EXPECT_NO_THROW(forward(q.cview(), k.cview(), v.cview(), out.view(), lse.view(), o));
}

// Same bits for 1, 2 and 7 threads, dropout on: B·Hkv = 4 items, so 1 and 2 threads take the
// one-pass backward and 7 the two passes (api.cpp); GQA, causal, soft-cap, odd sizes.
TEST(Dropout, FastSameBitsForThreadsAndSchedules) {
  for (const KernelVariant& kv : kernel_variants()) {
    SCOPED_TRACE(kv.name);
    const KernelScope scope(kv);
    std::vector<std::vector<float>> results;
    for (int threads : {1, 2, 7}) {
      constexpr i64 B = 2, Hq = 4, Hkv = 2, Nq = 150, Nk = 171, Dk = 40, Dv = 24;
      Buf<float> q({B, Hq, Nq, Dk}), k({B, Hkv, Nk, Dk}), v({B, Hkv, Nk, Dv}), dout({B, Hq, Nq, Dv});
      std::mt19937_64 rng(7);
      for (auto* x : {&q, &k, &v, &dout}) fill_normal(x->data, rng);
      Options o;
      o.isa = kv.isa, o.threads = threads, o.causal = Causal::bottom_right, o.softcap = 20.0;
      o.dropout = {0.3, 1234, 99};
      Buf<float> out({B, Hq, Nq, Dv}), dq(q.shape), dk(k.shape), dv(v.shape);
      Buf3<float> lse({B, Hq, Nq});
      forward(q.cview(), k.cview(), v.cview(), out.view(), lse.view(), o);
      backward(q.cview(), k.cview(), v.cview(), out.cview(), lse.cview(), dout.cview(), dq.view(), dk.view(), dv.view(),
               o);
      std::vector<float> all;
      for (auto* b : {&out.data, &lse.data, &dq.data, &dk.data, &dv.data}) all.insert(all.end(), b->begin(), b->end());
      results.push_back(std::move(all));
    }
    for (std::size_t r = 1; r < results.size(); ++r)
      EXPECT_EQ(std::memcmp(results[r].data(), results[0].data(), results[0].size() * sizeof(float)), 0)
          << "thread count or backward schedule changed the bits";
  }
}

}  // namespace
}  // namespace sdpa::test
