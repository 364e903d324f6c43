// nn/linear.cpp — the fp32 projection loops, cloned per instruction set (see linear.hpp).
//
// All three products run through one register-blocked kernel, C (+)= A·B with A and B
// row-major: two rows of C × 64 columns live in registers across the whole k loop, so
// each step is 4 loads of B, 2 broadcasts of A and 8 vector FMAs (the loops of the
// templates in linear.hpp load and store a row of out for every term instead). Every
// element of C is still summed over k in ascending order by one thread.
#include "nn/linear.hpp"

#include <vector>

namespace sdpa::nn {
namespace {

// A 64-byte vector in GCC's generic vector extension: zmm in the AVX-512 clone, two ymm in
// the AVX2 one. The helpers below are always inlined into a clone, so the "vector return
// changes the ABI" warning GCC gives for the baseline target describes no real call.
#pragma GCC diagnostic ignored "-Wpsabi"
typedef float v16 __attribute__((vector_size(64)));

[[gnu::always_inline]] inline v16 load16(const float* p) {
  v16 v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
[[gnu::always_inline]] inline void store16(float* p, const v16& v) { __builtin_memcpy(p, &v, sizeof v); }

enum class Init { zero, bias, accumulate };

// Rows [m0, m1) of C (+)= A·B: C (·, N), A (·, K) rows of lda, B (K, N) rows of ldb.
template <int MR, Init I>
[[gnu::always_inline]] inline void gemm_block(float* C, i64 ldc, const float* A, i64 lda, const float* B, i64 ldb,
                                              const float* bias, i64 m, i64 n0, i64 K) {
  v16 acc[MR][4];
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < 4; ++v) {
      if constexpr (I == Init::zero)
        acc[i][v] = v16{};
      else if constexpr (I == Init::bias)
        acc[i][v] = load16(bias + n0 + 16 * v);
      else
        acc[i][v] = load16(C + (m + i) * ldc + n0 + 16 * v);
    }
  for (i64 k = 0; k < K; ++k) {
    const float* b = B + k * ldb + n0;
    const v16 b0 = load16(b), b1 = load16(b + 16), b2 = load16(b + 32), b3 = load16(b + 48);
    for (int i = 0; i < MR; ++i) {
      const v16 a = v16{} + A[(m + i) * lda + k];
      acc[i][0] += a * b0, acc[i][1] += a * b1, acc[i][2] += a * b2, acc[i][3] += a * b3;
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < 4; ++v) store16(C + (m + i) * ldc + n0 + 16 * v, acc[i][v]);
}

template <Init I>
[[gnu::always_inline]] inline void gemm_rows(float* C, i64 ldc, const float* A, i64 lda, const float* B, i64 ldb,
                                             const float* bias, i64 m0, i64 m1, i64 K, i64 N) {
  i64 n0 = 0;
  for (; n0 + 64 <= N; n0 += 64) {
    i64 m = m0;
    for (; m + 2 <= m1; m += 2) gemm_block<2, I>(C, ldc, A, lda, B, ldb, bias, m, n0, K);
    if (m < m1) gemm_block<1, I>(C, ldc, A, lda, B, ldb, bias, m, n0, K);
  }
  for (i64 m = m0; m < m1; ++m)  // columns past the last multiple of 64, in the same order
    for (i64 n = n0; n < N; ++n) {
      float s = I == Init::zero ? 0.0f : I == Init::bias ? bias[n] : C[m * ldc + n];
      for (i64 k = 0; k < K; ++k) s += A[m * lda + k] * B[k * ldb + n];
      C[m * ldc + n] = s;
    }
}

}  // namespace

[[gnu::target_clones("avx512f", "avx2", "default")]] void linear_forward_block_f32(float* out, const float* x,
                                                                                   const float* W, const float* b,
                                                                                   i64 r0, i64 r1, i64 IN, i64 OUT) {
  if (b)
    gemm_rows<Init::bias>(out, OUT, x, IN, W, OUT, b, r0, r1, IN, OUT);
  else
    gemm_rows<Init::zero>(out, OUT, x, IN, W, OUT, nullptr, r0, r1, IN, OUT);
}

[[gnu::target_clones("avx512f", "avx2", "default")]] void linear_dx_block_f32(float* dx, const float* dout,
                                                                              const float* WT, i64 r0, i64 r1, i64 IN,
                                                                              i64 OUT) {
  gemm_rows<Init::zero>(dx, IN, dout, OUT, WT, IN, nullptr, r0, r1, OUT, IN);
}

[[gnu::target_clones("avx512f", "avx2", "default")]] void linear_dw_block_f32(float* dW, const float* dout,
                                                                              const float* x, i64 R, i64 c0, i64 c1,
                                                                              i64 IN, i64 OUT) {
  // dW[c0:c1] += xᵀ[c0:c1] · dout, with this block of xᵀ transposed once.
  thread_local std::vector<float> xt;
  xt.resize(static_cast<std::size_t>((c1 - c0) * R));
  for (i64 r = 0; r < R; ++r)
    for (i64 c = c0; c < c1; ++c) xt[static_cast<std::size_t>((c - c0) * R + r)] = x[r * IN + c];
  gemm_rows<Init::accumulate>(dW + c0 * OUT, OUT, xt.data(), R, dout, OUT, nullptr, 0, c1 - c0, R, OUT);
}

}  // namespace sdpa::nn
