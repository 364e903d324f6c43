// test_gradients.cpp — every layer's backward against fp64 central finite differences
// (the tolerance rule is in fd.hpp), and a test that the check can fail.
#include <gtest/gtest.h>

#include <omp.h>

#include <array>
#include <cmath>

#include "fd.hpp"
#include "small_model.hpp"
#include "nn/attention.hpp"
#include "nn/crossentropy.hpp"
#include "nn/embedding.hpp"
#include "nn/gelu.hpp"
#include "nn/layernorm.hpp"
#include "nn/linear.hpp"
#include "nn/model.hpp"
#include "nn/residual.hpp"

namespace nn = sdpa::nn;
using nn::i64;
using V = std::vector<double>;

namespace {

// The finite-difference checks evaluate a tiny model hundreds of times, each evaluation a
// handful of OpenMP regions of microseconds. On one thread they take a fraction of a second;
// on two threads beside another test on a 2-core machine (ctest -j2) every region waits for
// both threads to be scheduled, and a check took 25-120 s. The gradients do not depend on the
// thread count (the bits do not: tests/nn/test_training.cpp), so these run on one.
class OneThread {
 public:
  OneThread() : before_(omp_get_max_threads()) { omp_set_num_threads(1); }
  ~OneThread() { omp_set_num_threads(before_); }
  OneThread(const OneThread&) = delete;
  OneThread& operator=(const OneThread&) = delete;

 private:
  int before_;
};

double dot(const V& a, const V& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

TEST(Gradients, Linear) {
  const i64 R = 5, IN = 6, OUT = 7;
  V x = fd::randv(R * IN, 1), W = fd::randv(IN * OUT, 2), b = fd::randv(OUT, 3), w = fd::randv(R * OUT, 4);
  V out(R * OUT);
  auto f = [&] {
    nn::linear_forward(out.data(), x.data(), W.data(), b.data(), R, IN, OUT);
    return dot(out, w);
  };
  f();
  V dx(R * IN), dW(IN * OUT, 0.0), db(OUT, 0.0);
  nn::linear_backward(dx.data(), dW.data(), db.data(), w.data(), x.data(), W.data(), R, IN, OUT);
  EXPECT_FD_OK(fd::check(x, dx, f));
  EXPECT_FD_OK(fd::check(W, dW, f));
  EXPECT_FD_OK(fd::check(b, db, f));
}

// The fp32 projections (a register-blocked kernel, linear.cpp) against the fp64
// templates: shapes with whole 64-column blocks, a 2-row and a 1-row remainder and a
// column tail. A sum of K products in fp32 errs by at most γ_K Σ|a_k b_k|, γ_K = K u/(1 − K u),
// u = 2⁻²⁴ (Higham, Accuracy and Stability, §3.1); the bound below is that, plus the
// rounding of the fp32 inputs themselves (exact here: they are fp32 values).
TEST(Linear, Fp32KernelWithinTheSummationBound) {
  for (auto [R, IN, OUT] : {std::array<i64, 3>{5, 70, 130}, {4, 64, 64}, {3, 129, 66}, {1, 7, 200}}) {
    const V xd0 = fd::randv(R * IN, 11), Wd0 = fd::randv(IN * OUT, 12), bd0 = fd::randv(OUT, 13),
            gd0 = fd::randv(R * OUT, 14);
    std::vector<float> x(xd0.begin(), xd0.end()), W(Wd0.begin(), Wd0.end()), b(bd0.begin(), bd0.end()),
        g(gd0.begin(), gd0.end());
    const V xd(x.begin(), x.end()), Wd(W.begin(), W.end()), bd(b.begin(), b.end()), gd(g.begin(), g.end());
    std::vector<float> out(R * OUT), dx(R * IN), dW(IN * OUT, 0.5f), db(OUT, 0.0f);
    V outd(R * OUT), dxd(R * IN), dWd(IN * OUT, 0.5), dbd(OUT, 0.0);
    nn::linear_forward(out.data(), x.data(), W.data(), b.data(), R, IN, OUT);
    nn::linear_forward(outd.data(), xd.data(), Wd.data(), bd.data(), R, IN, OUT);
    nn::linear_backward(dx.data(), dW.data(), db.data(), g.data(), x.data(), W.data(), R, IN, OUT);
    nn::linear_backward(dxd.data(), dWd.data(), dbd.data(), gd.data(), xd.data(), Wd.data(), R, IN, OUT);
    const double u = std::ldexp(1.0, -24);
    auto gamma = [u](i64 k) { return double(k + 1) * u / (1.0 - double(k + 1) * u); };  // + 1: the initial term
    for (i64 r = 0; r < R; ++r)
      for (i64 o = 0; o < OUT; ++o) {
        double mag = std::abs(bd[o]);
        for (i64 c = 0; c < IN; ++c) mag += std::abs(xd[r * IN + c] * Wd[c * OUT + o]);
        ASSERT_LE(std::abs(out[r * OUT + o] - outd[r * OUT + o]), gamma(IN) * mag) << R << "x" << IN << "x" << OUT;
      }
    for (i64 r = 0; r < R; ++r)
      for (i64 c = 0; c < IN; ++c) {
        double mag = 0;
        for (i64 o = 0; o < OUT; ++o) mag += std::abs(gd[r * OUT + o] * Wd[c * OUT + o]);
        ASSERT_LE(std::abs(dx[r * IN + c] - dxd[r * IN + c]), gamma(OUT) * mag) << R << "x" << IN << "x" << OUT;
      }
    for (i64 c = 0; c < IN; ++c)
      for (i64 o = 0; o < OUT; ++o) {
        double mag = 0.5;
        for (i64 r = 0; r < R; ++r) mag += std::abs(xd[r * IN + c] * gd[r * OUT + o]);
        ASSERT_LE(std::abs(dW[c * OUT + o] - dWd[c * OUT + o]), gamma(R) * mag) << R << "x" << IN << "x" << OUT;
      }
  }
}

// LayerNorm over R rows of C, loss = out·w, inputs drawn from seeds s..s+3; backward run once.
struct LayerNormCase {
  static constexpr i64 R = 4, C = 9;
  V x, g, b, w, out = V(R * C), mean = V(R), rstd = V(R), dx = V(R * C), dg = V(C, 0.0), db = V(C, 0.0);
  explicit LayerNormCase(unsigned s)
      : x(fd::randv(R * C, s, 2.0)), g(fd::randv(C, s + 1)), b(fd::randv(C, s + 2)), w(fd::randv(R * C, s + 3)) {
    f();
    nn::layernorm_backward(dx.data(), dg.data(), db.data(), w.data(), x.data(), g.data(), mean.data(), rstd.data(), R,
                           C);
  }
  double f() {
    nn::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), g.data(), b.data(), R, C);
    return dot(out, w);
  }
};

TEST(Gradients, LayerNorm) {
  LayerNormCase t(5);
  auto f = [&] { return t.f(); };
  EXPECT_FD_OK(fd::check(t.x, t.dx, f));
  EXPECT_FD_OK(fd::check(t.g, t.dg, f));
  EXPECT_FD_OK(fd::check(t.b, t.db, f));
}

TEST(Gradients, Gelu) {
  const i64 N = 40;
  V x = fd::randv(N, 9, 4.0), w = fd::randv(N, 10), out(N);
  auto f = [&] {
    nn::gelu_forward(out.data(), x.data(), N);
    return dot(out, w);
  };
  V dx(N);
  nn::gelu_backward(dx.data(), w.data(), x.data(), N);
  EXPECT_FD_OK(fd::check(x, dx, f));
}

TEST(Gradients, Residual) {
  const i64 N = 12;
  V a = fd::randv(N, 11), b = fd::randv(N, 12), w = fd::randv(N, 13), out(N);
  auto f = [&] {
    nn::residual_forward(out.data(), a.data(), b.data(), N);
    return dot(out, w);
  };
  V da(N), db(N);
  nn::residual_backward(da.data(), db.data(), w.data(), N);
  EXPECT_FD_OK(fd::check(a, da, f));
  EXPECT_FD_OK(fd::check(b, db, f));
}

TEST(Gradients, Embedding) {
  const i64 B = 2, T = 3, C = 4, Vn = 5, P = 6;
  const std::vector<int> tok{1, 4, 1, 0, 2, 2}, pos0{0, 2};
  V wte = fd::randv(Vn * C, 14), wpe = fd::randv(P * C, 15), w = fd::randv(B * T * C, 16), out(B * T * C);
  auto f = [&] {
    nn::embedding_forward(out.data(), tok.data(), pos0.data(), wte.data(), wpe.data(), B, T, C);
    return dot(out, w);
  };
  V dwte(Vn * C, 0.0), dwpe(P * C, 0.0);
  nn::embedding_backward(dwte.data(), dwpe.data(), w.data(), tok.data(), pos0.data(), B, T, C);
  EXPECT_FD_OK(fd::check(wte, dwte, f));
  EXPECT_FD_OK(fd::check(wpe, dwpe, f));
}

TEST(Gradients, CrossEntropy) {
  const i64 R = 5, Vn = 7;
  V logits = fd::randv(R * Vn, 17, 3.0), probs(R * Vn);
  const std::vector<int> tgt{3, -1, 0, 6, 2};
  i64 counted = 0;
  auto f = [&] {
    const auto r = nn::crossentropy_forward(probs.data(), logits.data(), tgt.data(), R, Vn);
    counted = r.counted;
    return r.loss;
  };
  f();
  EXPECT_EQ(counted, 4);
  V d(R * Vn);
  nn::crossentropy_backward(d.data(), probs.data(), tgt.data(), R, Vn, counted);
  EXPECT_FD_OK(fd::check(logits, d, f));
}

// The attention layer in fp64 (the library's reference kernel), for every q/k transform,
// with the log-temperature gradient dL/dθ = Σ q'·dq'.
class AttentionGrad : public ::testing::TestWithParam<nn::QkTransform> {};

TEST_P(AttentionGrad, MatchesFiniteDifferences) {
  const OneThread one;
  const nn::AttnDims s{2, 5, 8, 2};
  const i64 R = s.B * s.T;
  V qkv = fd::randv(R * 3 * s.C, 18, 1.5), w = fd::randv(R * s.C, 19), out(R * s.C);
  V theta{std::log(0.7), std::log(1.9)};
  nn::AttnSaved<double> sv;
  auto f = [&] {
    const double beta[2] = {std::exp(theta[0]), std::exp(theta[1])};
    nn::attention_forward(out.data(), sv, qkv.data(), beta, GetParam(), s, 1);
    return dot(out, w);
  };
  f();
  const double beta[2] = {std::exp(theta[0]), std::exp(theta[1])};
  V dqkv(R * 3 * s.C), dtheta(2, 0.0);
  nn::attention_backward(dqkv.data(), dtheta.data(), w.data(), out.data(), sv, qkv.data(), beta, GetParam(), s, 1);
  EXPECT_FD_OK(fd::check(qkv, dqkv, f));
  EXPECT_FD_OK(fd::check(theta, dtheta, f));
  // dL/dβ = Σ q'·dq' / β, the identity the learned policy relies on
  EXPECT_GT(std::abs(dtheta[0]) + std::abs(dtheta[1]), 1e-6);
}

namespace sdpa::nn {
// The transform's name, for the test's name and for gtest's GetParam() line (which would
// print the enum's bytes without a PrintTo found by argument-dependent lookup).
const char* transform_name(QkTransform t) {
  return t == QkTransform::plain ? "plain" : t == QkTransform::normalize ? "normalize" : "log_n";
}
void PrintTo(QkTransform t, std::ostream* os) { *os << transform_name(t); }
}  // namespace sdpa::nn

INSTANTIATE_TEST_SUITE_P(Transforms, AttentionGrad,
                         ::testing::Values(nn::QkTransform::plain, nn::QkTransform::normalize, nn::QkTransform::log_n),
                         [](const auto& info) { return std::string(nn::transform_name(info.param)); });

// The whole model in fp64: loss against every parameter (sub-sampled), per policy.
class ModelGrad : public ::testing::TestWithParam<const char*> {};

TEST_P(ModelGrad, MatchesFiniteDifferences) {
  const OneThread one;
  nn::ModelConfig mc = small_model(GetParam(), 6, 8, 2);
  mc.seed = 3;
  nn::Model<double> m(mc);
  // push the parameters off their initial symmetric values (LN gains 1, biases 0)
  const V jitter = fd::randv(m.params.size(), 20, 0.05);
  for (std::size_t i = 0; i < m.params.size(); ++i) m.params[i] += jitter[i];
  const i64 B = 2, T = 6;
  const std::vector<int> tok{1, 5, 7, 2, 9, 3, 4, 4, 10, 0, 6, 8}, tgt{-1, 3, -1, 7, 1, 0, 2, -1, 5, 9, -1, 6};
  auto f = [&] { return m.forward(tok.data(), tgt.data(), nullptr, B, T, false).loss; };
  f();
  m.zero_grad();
  m.backward();
  const V g = m.grads;
  // about 150 of the parameters, every tensor touched (stride coprime with the sizes)
  const int stride = std::max<int>(1, static_cast<int>(m.params.size() / 150)) | 1;
  auto rep = fd::check(m.params, g, f, 1e-4, stride);
  EXPECT_FD_OK(rep);
  if (mc.policy.has_theta()) {  // the temperatures themselves, every one
    V th(m.params.begin() + m.layout.theta, m.params.begin() + m.layout.theta + mc.L * mc.H);
    V gth(g.begin() + m.layout.theta, g.begin() + m.layout.theta + mc.L * mc.H);
    auto ft = [&] {
      std::copy(th.begin(), th.end(), m.params.begin() + m.layout.theta);
      return f();
    };
    EXPECT_FD_OK(fd::check(th, gth, ft));
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, ModelGrad, ::testing::Values("inv_sqrt_dk", "none", "learned", "qk_norm", "log_n"),
                         [](const auto& info) { return std::string(info.param); });

// The check must be able to fail: a backward pass with a small slip is caught.
TEST(Gradients, CheckDetectsAPerturbedGradient) {
  LayerNormCase t(21);
  const i64 R = LayerNormCase::R, C = LayerNormCase::C;
  V &x = t.x, &dx = t.dx;
  const V &g = t.g, &w = t.w, &rstd = t.rstd;
  auto f = [&] { return t.f(); };
  ASSERT_EQ(fd::check(x, dx, f).failed, 0);
  dx[7] += 1e-6;  // one element off by 1e-6
  const auto rep = fd::check(x, dx, f);
  EXPECT_EQ(rep.failed, 1) << "a 1e-6 error in one element should fail the check";
  // a classic bug: forgetting the mean(dxhat·xhat) term of the LayerNorm backward
  V wrong(R * C);
  for (i64 r = 0; r < R; ++r) {
    double md = 0;
    for (i64 c = 0; c < C; ++c) md += w[r * C + c] * g[c] / C;
    for (i64 c = 0; c < C; ++c) wrong[r * C + c] = rstd[r] * (w[r * C + c] * g[c] - md);
  }
  EXPECT_GT(fd::check(x, wrong, f).failed, R * C / 2);
}

// The fp32 model (the library's fast kernel) computes what the fp64 one (the reference
// kernel) does, to fp32 rounding: loss and every gradient.
TEST(Gradients, Fp32ModelMatchesFp64Model) {
  for (const char* policy : {"inv_sqrt_dk", "qk_norm", "log_n"}) {
    nn::ModelConfig mc = small_model(policy, 12, 16, 2);
    mc.seed = 5;
    nn::Model<double> md(mc);
    nn::Model<float> mf(mc);
    const V jitter = fd::randv(md.params.size(), 25, 0.05);
    for (std::size_t i = 0; i < md.params.size(); ++i) {
      md.params[i] += jitter[i];
      mf.params[i] = static_cast<float>(md.params[i]);
      md.params[i] = mf.params[i];  // identical starting values
    }
    const i64 B = 2, T = 12;
    std::vector<int> tok(B * T), tgt(B * T);
    for (i64 i = 0; i < B * T; ++i) {
      tok[i] = static_cast<int>((i * 7 + 3) % 11);
      tgt[i] = i % 3 ? static_cast<int>((i * 5 + 1) % 11) : -1;
    }
    const double ld = md.forward(tok.data(), tgt.data(), nullptr, B, T, false).loss;
    const double lf = mf.forward(tok.data(), tgt.data(), nullptr, B, T, false).loss;
    md.zero_grad();
    md.backward();
    mf.zero_grad();
    mf.backward();
    // fp32 rounding through ~10 layers of sums of ≤ 64 terms: a few hundred ulps of the scale
    EXPECT_NEAR(lf, ld, 1e-5 * std::abs(ld)) << policy;
    double gmax = 0, emax = 0;
    for (std::size_t i = 0; i < md.grads.size(); ++i) {
      gmax = std::max(gmax, std::abs(md.grads[i]));
      emax = std::max(emax, std::abs(md.grads[i] - mf.grads[i]));
    }
    EXPECT_LT(emax, 1e-4 * gmax) << policy;
  }
}
