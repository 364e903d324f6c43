// nn/linear_neon.cpp — the projections' GEMM for the neon path (aarch64). 32 vector registers
// of 4 floats: a 5 × 4 tile (16 columns) is 20 accumulators, B's four vectors and A's five
// elements, each multiplied by lane (fmla v.4s, v.4s, v.s[0]); each k issues 20 FMAs against
// 2 ldp of B and 5 loads of A. A 6 × 4 tile needs 34 registers and spilled (the attention
// kernel's simd_neon.hpp says the same of its block).
#include <arm_neon.h>

#include <cstdint>

#include "nn/gelu.hpp"
#include "nn/linear.hpp"

namespace sdpa::nn::neon {

#include "attention/simd_neon.hpp"  // Vec: the attention kernel's SIMD layer, for the GEMM and the GELU

constexpr int kTileRows = 5;
constexpr int kTileVecs = 4;

#include "nn/linear_kernel.inl"

#include "nn/gelu_kernel.inl"

}  // namespace sdpa::nn::neon

namespace sdpa::nn {
void gemm_f32_neon(float* C, i64 ldc, const float* A, i64 a_m, i64 a_k, const float* B, i64 ldb, const float* bias,
                   GemmStart start, i64 M, i64 K, i64 N) {
  neon::gemm(C, ldc, A, a_m, a_k, B, ldb, bias, start, M, K, N);
}
void gelu_forward_f32_neon(float* out, const float* x, i64 n) { neon::gelu_forward_f32(out, x, n); }
void gelu_backward_f32_neon(float* dx, const float* dout, const float* x, i64 n) {
  neon::gelu_backward_f32(dx, dout, x, n);
}
}  // namespace sdpa::nn
