// test_linear_isa.cpp — the projections' fp32 GEMM on every ISA this CPU runs: within
// the summation bound of an fp64 product, and the same bits whichever way its rows are
// split (the callers split rows between threads).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "fd.hpp"
#include "nn/gelu.hpp"
#include "nn/linear.hpp"

namespace nn = sdpa::nn;
using nn::i64;
using sdpa::Isa;

namespace {

constexpr std::array<Isa, 5> kIsas{Isa::scalar, Isa::avx2, Isa::avx512, Isa::neon, Isa::sve};
constexpr std::array<nn::GemmStart, 3> kStarts{nn::GemmStart::zero, nn::GemmStart::bias, nn::GemmStart::accumulate};

std::vector<float> floats(std::size_t n, unsigned seed) {
  const auto d = fd::randv(n, seed);
  return std::vector<float>(d.begin(), d.end());
}

// Column counts that reach every column path of every ISA: whole tiles, one-vector
// blocks and a tail of single floats (tiles of 8 / 16 / 64 columns, vectors of 4 / 8 / 16).
constexpr std::array<i64, 6> kColumns{1, 5, 12, 27, 84, 155};

}  // namespace

// A sum of K products after a start value, each step rounded once (an FMA) or twice (a
// multiply and an add), errs by at most γ_{K+1} (|start| + Σ|a_k b_k|), γ_n = n u/(1 − n u),
// u = 2⁻²⁴ (Higham, Accuracy and Stability, §3.1); the fp32 inputs are exact in fp64.
TEST(LinearIsa, EveryIsaWithinTheSummationBound) {
  int ran = 0;
  for (Isa isa : kIsas) {
    if (!sdpa::isa_supported(isa)) continue;
    ++ran;
    const nn::GemmF32 gemm = nn::gemm_f32(isa);
    for (nn::GemmStart start : kStarts)
      for (bool a_transposed : {false, true})
        for (i64 M : {1, 7, 13})
          for (i64 K : {1, 9, 130, 1100})  // 1100: past every ISA's k chunk (linear_kernel.inl)
            for (i64 N : kColumns) {
              // A[m,k] at m·a_m + k·a_k: row-major (M, K), or stored as Aᵀ (K, M)
              const i64 a_m = a_transposed ? 1 : K, a_k = a_transposed ? M : 1;
              const auto Ad = floats(M * K, 1), B = floats(K * N, 2), bias = floats(N, 3), C0 = floats(M * N, 4);
              std::vector<float> A(Ad.size());  // A = Ad as an (M, K) matrix, in either layout
              for (i64 m = 0; m < M; ++m)
                for (i64 k = 0; k < K; ++k) A[m * a_m + k * a_k] = Ad[m * K + k];
              std::vector<float> C = C0;
              gemm(C.data(), N, A.data(), a_m, a_k, B.data(), N, bias.data(), start, M, K, N);
              const double u = std::ldexp(1.0, -24), gamma = double(K + 1) * u / (1.0 - double(K + 1) * u);
              for (i64 m = 0; m < M; ++m)
                for (i64 n = 0; n < N; ++n) {
                  const double s0 = start == nn::GemmStart::zero   ? 0.0
                                    : start == nn::GemmStart::bias ? double(bias[n])
                                                                   : double(C0[m * N + n]);
                  double exact = s0, mag = std::abs(s0);
                  for (i64 k = 0; k < K; ++k) {
                    exact += double(Ad[m * K + k]) * double(B[k * N + n]);
                    mag += std::abs(double(Ad[m * K + k]) * double(B[k * N + n]));
                  }
                  ASSERT_LE(std::abs(double(C[m * N + n]) - exact), gamma * mag)
                      << sdpa::isa_name(isa) << " start " << int(start) << (a_transposed ? " Aᵀ" : "") << " M " << M
                      << " K " << K << " N " << N << " at (" << m << ", " << n << ")";
                }
            }
  }
#if defined(__x86_64__) || defined(__aarch64__)
  EXPECT_GE(ran, 2) << "scalar and at least one vector ISA";
#else
  EXPECT_GE(ran, 1) << "the scalar path (the only one built for this architecture)";
#endif
}

// The rows [0, M) in one call against [0, s) and [s, M) in two, for every s: every row
// lands in a tile of another height (and the remainders of every height run), yet each
// element must come out bit for bit the same.
TEST(LinearIsa, RowSplitChangesNoBit) {
  for (Isa isa : kIsas) {
    if (!sdpa::isa_supported(isa)) continue;
    const nn::GemmF32 gemm = nn::gemm_f32(isa);
    const i64 M = 13, K = 37;
    for (nn::GemmStart start : kStarts)
      for (bool a_transposed : {false, true})
        for (i64 N : kColumns) {
          const i64 a_m = a_transposed ? 1 : K, a_k = a_transposed ? M : 1;
          const auto A = floats(M * K, 5), B = floats(K * N, 6), bias = floats(N, 7), C0 = floats(M * N, 8);
          std::vector<float> whole = C0;
          gemm(whole.data(), N, A.data(), a_m, a_k, B.data(), N, bias.data(), start, M, K, N);
          for (i64 s = 1; s < M; ++s) {
            std::vector<float> parts = C0;
            gemm(parts.data(), N, A.data(), a_m, a_k, B.data(), N, bias.data(), start, s, K, N);
            gemm(parts.data() + s * N, N, A.data() + s * a_m, a_m, a_k, B.data(), N, bias.data(), start, M - s, K, N);
            ASSERT_EQ(std::memcmp(whole.data(), parts.data(), whole.size() * sizeof(float)), 0)
                << sdpa::isa_name(isa) << " start " << int(start) << (a_transposed ? " Aᵀ" : "") << " N " << N
                << " split at row " << s;
          }
        }
  }
}

TEST(LinearIsa, ForcingAnIsaThisCpuLacksThrows) {
  for (Isa isa : kIsas) {
    if (!sdpa::isa_supported(isa)) {
      EXPECT_THROW(nn::gemm_f32(isa), sdpa::Error) << sdpa::isa_name(isa);
    }
  }
  EXPECT_EQ(nn::gemm_f32(Isa::automatic), nn::gemm_f32(sdpa::active_isa()));
}

// ---- GELU's vector kernels (nn/gelu_kernel.inl) ---------------------------------------

namespace {

// x over [-10, 10] finely, and around where u = a(x + b x³) crosses Vec::tanh's switch
// between its two formulas (|u| = 0.625, x ≈ ±0.75).
std::vector<float> gelu_inputs() {
  std::vector<float> x;
  for (double t = -10; t <= 10; t += 0.00317) x.push_back(static_cast<float>(t));
  for (double t = 0.70; t <= 0.80; t += 1e-5) x.push_back(static_cast<float>(t)), x.push_back(-static_cast<float>(t));
  return x;
}

double gelu_tanh64(double x) { return std::tanh(nn::kGeluA * (x + nn::kGeluB * x * x * x)); }

}  // namespace

// Error bound, u = 2⁻²⁴. Vec::tanh errs by at most 8u relative (ctest kernel's
// VectorMath.TanhRelativeErrorIncludingTinyArguments); its argument u = x(a + ab·x²) carries
// five roundings (the constants a, ab, x², the FMA, the product), which move tanh by at
// most max(u·sech² u)·γ5 ≈ 0.45·5u: tanh u comes out within E_t = 11u absolute (|tanh| ≤ 1).
// Forward: ½x is exact and ½x(1 + t) one FMA, so |ŷ − y| ≤ ½|x|·E_t + u|y|.
// Backward: d = ½(1 + t) + ½x(1 − t²)·du. 1 − t² (one FMA) errs by 2E_t + u, ½(1 + t) by
// ½(E_t + 2u); the products ½x·(1 − t²)·du add three roundings, the last FMA one, the
// product with dout one: |d̂x − dx| ≤ |dout|·(½(E_t + 2u) + ½|x|·du·(2E_t + 4u) + 2u|d|).
TEST(GeluIsa, VectorKernelsWithinTheirErrorBound) {
  const double u = std::ldexp(1.0, -24), Et = 11 * u;
  int ran = 0;
  for (Isa isa : kIsas) {
    if (!sdpa::isa_supported(isa) || !nn::gelu_f32(isa).forward) continue;
    ++ran;
    const auto x = gelu_inputs();
    const auto n = static_cast<i64>(x.size());
    const auto dout = floats(x.size(), 9);
    std::vector<float> y(x.size()), dx(x.size());
    nn::gelu_f32(isa).forward(y.data(), x.data(), n);
    nn::gelu_f32(isa).backward(dx.data(), dout.data(), x.data(), n);
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double xv = x[i], t = gelu_tanh64(xv), want = 0.5 * xv * (1 + t);
      ASSERT_LE(std::abs(y[i] - want), 0.5 * std::abs(xv) * Et + u * std::abs(want))
          << sdpa::isa_name(isa) << " forward at x = " << xv;
      const double du = nn::kGeluA * (1 + 3 * nn::kGeluB * xv * xv);
      const double d = 0.5 * (1 + t) + 0.5 * xv * (1 - t * t) * du, want_dx = dout[i] * d;
      const double bound =
          std::abs(dout[i]) * (0.5 * (Et + 2 * u) + 0.5 * std::abs(xv) * du * (2 * Et + 4 * u) + 2 * u * std::abs(d));
      ASSERT_LE(std::abs(dx[i] - want_dx), bound) << sdpa::isa_name(isa) << " backward at x = " << xv;
    }
  }
  if (!ran) GTEST_SKIP() << "no vector GELU kernel runs on this CPU";
}

// The layers split arrays between threads anywhere; an element's bits must not depend on
// where it falls (in a whole vector, or in the padded last one).
TEST(GeluIsa, SplitChangesNoBit) {
  for (Isa isa : kIsas) {
    if (!sdpa::isa_supported(isa) || !nn::gelu_f32(isa).forward) continue;
    const nn::GeluF32 k = nn::gelu_f32(isa);
    const i64 n = 101;
    const auto x = floats(n, 10), dout = floats(n, 11);
    std::vector<float> y(n), dx(n);
    k.forward(y.data(), x.data(), n);
    k.backward(dx.data(), dout.data(), x.data(), n);
    for (i64 s = 1; s < n; ++s) {
      std::vector<float> y2(n), dx2(n);
      k.forward(y2.data(), x.data(), s);
      k.forward(y2.data() + s, x.data() + s, n - s);
      k.backward(dx2.data(), dout.data(), x.data(), s);
      k.backward(dx2.data() + s, dout.data() + s, x.data() + s, n - s);
      ASSERT_EQ(std::memcmp(y.data(), y2.data(), n * sizeof(float)), 0) << sdpa::isa_name(isa) << " split at " << s;
      ASSERT_EQ(std::memcmp(dx.data(), dx2.data(), n * sizeof(float)), 0) << sdpa::isa_name(isa) << " split at " << s;
    }
  }
}
