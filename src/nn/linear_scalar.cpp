// nn/linear_scalar.cpp — the projections' GEMM for the scalar path: no -m flags, so it
// runs on any CPU the project builds for. Its registers are the attention kernel's scalar
// Vec, one float each (16 xmm registers on x86-64); with no FMA a madd is a multiply and an
// add, so a 4 × 2 tile (8 accumulators, B's two vectors, a broadcast and the product)
// fits without spilling.
#include "nn/linear.hpp"

namespace sdpa::nn::scalar {

#include "attention/simd_scalar.hpp"  // Vec: the attention kernel's one-float layer

constexpr int kTileRows = 4;
constexpr int kTileVecs = 2;

#include "nn/linear_kernel.inl"

}  // namespace sdpa::nn::scalar

namespace sdpa::nn {
void gemm_f32_scalar(float* C, i64 ldc, const float* A, i64 a_m, i64 a_k, const float* B, i64 ldb, const float* bias,
                     GemmStart start, i64 M, i64 K, i64 N) {
  scalar::gemm(C, ldc, A, a_m, a_k, B, ldb, bias, start, M, K, N);
}
}  // namespace sdpa::nn
