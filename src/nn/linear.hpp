// nn/linear.hpp — the affine map every projection uses: out = x · W + b.
//
// W is stored (IN, OUT), row-major, so the forward's inner loop runs along a row of W
// and vectorises without reassociating any sum. The templates below are the readable
// form (the fp64 model runs them); fp32 runs a register-blocked kernel per ISA (below).
// Work is split across OpenMP threads in fixed blocks (rows of out and dx, rows of dW);
// every output element is summed by one thread in a fixed order, so results do not
// depend on the thread count.
#pragma once

#include <algorithm>
#include <type_traits>
#include <vector>

#include "nn/common.hpp"
#include "sdpa/attention.hpp"  // Isa, active_isa()

namespace sdpa::nn {

/// The loops over a block: rows [r0, r1) of out, or of dx; rows [c0, c1) of dW.
template <class T>
[[gnu::always_inline]] inline void linear_forward_block(T* out, const T* x, const T* W, const T* b, i64 r0, i64 r1,
                                                        i64 IN, i64 OUT) {
  for (i64 r = r0; r < r1; ++r) {
    T* o = out + r * OUT;
    for (i64 j = 0; j < OUT; ++j) o[j] = b ? b[j] : T(0);
    const T* xr = x + r * IN;
    for (i64 c = 0; c < IN; ++c) {
      const T xv = xr[c];
      const T* w = W + c * OUT;
      for (i64 j = 0; j < OUT; ++j) o[j] += xv * w[j];
    }
  }
}
template <class T>
[[gnu::always_inline]] inline void linear_dx_block(T* dx, const T* dout, const T* W, i64 r0, i64 r1, i64 IN, i64 OUT) {
  for (i64 r = r0; r < r1; ++r) {
    const T* d = dout + r * OUT;
    for (i64 c = 0; c < IN; ++c) {
      const T* w = W + c * OUT;
      T s = 0;
#pragma omp simd reduction(+ : s)
      for (i64 j = 0; j < OUT; ++j) s += d[j] * w[j];
      dx[r * IN + c] = s;
    }
  }
}
template <class T>
[[gnu::always_inline]] inline void linear_dw_block(T* dW, const T* dout, const T* x, i64 R, i64 c0, i64 c1, i64 IN,
                                                   i64 OUT) {
  for (i64 c = c0; c < c1; ++c) {
    T* dw = dW + c * OUT;
    for (i64 r = 0; r < R; ++r) {
      const T xv = x[r * IN + c];
      const T* d = dout + r * OUT;
      for (i64 j = 0; j < OUT; ++j) dw[j] += xv * d[j];
    }
  }
}

// ---- fp32 ----------------------------------------------------------------------
// fp32 runs one GEMM kernel per instruction set (linear_kernel.inl, compiled in
// linear_{scalar,avx2,avx512}.cpp with each ISA's flags and register tile), chosen by the
// same sdpa::active_isa() as the attention kernel: SDPA_ISA reaches both.

/// How gemm starts each element of C: from 0, from bias[column], or from C itself.
enum class GemmStart { zero, bias, accumulate };

/// C[m,n] = start + Σ_k A[m,k] · B[k,n], k ascending, one multiply-add per k (fused where
/// the ISA has FMA), whatever the tile: rows may be split anywhere without changing a bit.
///   C (M, N) rows of ldc   B (K, N) rows of ldb   bias (N) or null
///   A (M, K) with A[m,k] at A[m·a_m + k·a_k] (a_k = 1: row-major; a_m = 1: Aᵀ stored)
using GemmF32 = void (*)(float* C, i64 ldc, const float* A, i64 a_m, i64 a_k, const float* B, i64 ldb,
                         const float* bias, GemmStart start, i64 M, i64 K, i64 N);
void gemm_f32_scalar(float* C, i64 ldc, const float* A, i64 a_m, i64 a_k, const float* B, i64 ldb, const float* bias,
                     GemmStart start, i64 M, i64 K, i64 N);
void gemm_f32_avx2(float* C, i64 ldc, const float* A, i64 a_m, i64 a_k, const float* B, i64 ldb, const float* bias,
                   GemmStart start, i64 M, i64 K, i64 N);
void gemm_f32_avx512(float* C, i64 ldc, const float* A, i64 a_m, i64 a_k, const float* B, i64 ldb, const float* bias,
                     GemmStart start, i64 M, i64 K, i64 N);
void gemm_f32_neon(float* C, i64 ldc, const float* A, i64 a_m, i64 a_k, const float* B, i64 ldb, const float* bias,
                   GemmStart start, i64 M, i64 K, i64 N);
void gemm_f32_sve256(float* C, i64 ldc, const float* A, i64 a_m, i64 a_k, const float* B, i64 ldb, const float* bias,
                     GemmStart start, i64 M, i64 K, i64 N);
void gemm_f32_sve512(float* C, i64 ldc, const float* A, i64 a_m, i64 a_k, const float* B, i64 ldb, const float* bias,
                     GemmStart start, i64 M, i64 K, i64 N);

/// The kernel of `isa` (Isa::automatic: sdpa::active_isa()); throws sdpa::Error for an
/// ISA this CPU cannot run.
GemmF32 gemm_f32(Isa isa = Isa::automatic);

// The fp32 blocks through one kernel, chosen by the caller before its parallel region
// (gemm_f32 may throw, which must not happen inside one).
void linear_forward_block_f32(GemmF32 gemm, float* out, const float* x, const float* W, const float* b, i64 r0, i64 r1,
                              i64 IN, i64 OUT);
/// The dx block takes Wᵀ (OUT, IN), which linear_backward transposes once per call.
void linear_dx_block_f32(GemmF32 gemm, float* dx, const float* dout, const float* WT, i64 r0, i64 r1, i64 IN, i64 OUT);
void linear_dw_block_f32(GemmF32 gemm, float* dW, const float* dout, const float* x, i64 R, i64 c0, i64 c1, i64 IN,
                         i64 OUT);

/// out[r,o] = b[o] + Σ_c x[r,c] · W[c,o]
///   out (R, OUT)   x (R, IN)   W (IN, OUT)   b (OUT) or null
template <class T>
void linear_forward(T* out, const T* x, const T* W, const T* b, i64 R, i64 IN, i64 OUT) {
  if constexpr (std::is_same_v<T, float>) {
    const GemmF32 gemm = gemm_f32();
    split(R, [&](i64 r0, i64 r1) { linear_forward_block_f32(gemm, out, x, W, b, r0, r1, IN, OUT); });
  } else {
    split(R, [&](i64 r0, i64 r1) { linear_forward_block(out, x, W, b, r0, r1, IN, OUT); });
  }
}

/// Inverts `o[j] += x[r,c] · W[c,j]`:
///   dx[r,c] = Σ_j dout[r,j] · W[c,j]      (=)
///   dW[c,j] += Σ_r x[r,c] · dout[r,j]     db[j] += Σ_r dout[r,j]
///   dx (R, IN) or null   dW (IN, OUT)   db (OUT) or null   dout (R, OUT)
template <class T>
void linear_backward(T* dx, T* dW, T* db, const T* dout, const T* x, const T* W, i64 R, i64 IN, i64 OUT) {
  if constexpr (std::is_same_v<T, float>) {
    const GemmF32 gemm = gemm_f32();
    if (dx) {
      // Wᵀ (OUT, IN), kept per thread between calls so a training step allocates nothing.
      thread_local std::vector<float> wt;
      wt.resize(static_cast<std::size_t>(IN * OUT));
      float* w_t = wt.data();
      split(OUT, [&](i64 j0, i64 j1) {
        for (i64 j = j0; j < j1; ++j)
          for (i64 c = 0; c < IN; ++c) w_t[j * IN + c] = W[c * OUT + j];
      });
      split(R, [&](i64 r0, i64 r1) { linear_dx_block_f32(gemm, dx, dout, w_t, r0, r1, IN, OUT); });
    }
    split(IN, [&](i64 c0, i64 c1) { linear_dw_block_f32(gemm, dW, dout, x, R, c0, c1, IN, OUT); });
  } else {
    if (dx) split(R, [&](i64 r0, i64 r1) { linear_dx_block(dx, dout, W, r0, r1, IN, OUT); });
    split(IN, [&](i64 c0, i64 c1) { linear_dw_block(dW, dout, x, R, c0, c1, IN, OUT); });
  }
  // db by columns: each db[j] sums its rows in ascending order on one thread.
  if (db)
    split(OUT, [&](i64 j0, i64 j1) {
      for (i64 r = 0; r < R; ++r)
        for (i64 j = j0; j < j1; ++j) db[j] += dout[r * OUT + j];
    });
}

}  // namespace sdpa::nn
