// test_linear_isa.cpp — the projections' fp32 GEMM on every ISA this CPU runs: within
// the summation bound of an fp64 product, and the same bits whichever way its rows are
// split (the callers split rows between threads).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "fd.hpp"
#include "nn/linear.hpp"

namespace nn = sdpa::nn;
using nn::i64;
using sdpa::Isa;

namespace {

constexpr std::array<Isa, 3> kIsas{Isa::scalar, Isa::avx2, Isa::avx512};
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
  EXPECT_GE(ran, 2) << "scalar and at least one vector ISA";
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
