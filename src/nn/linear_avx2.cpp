// nn/linear_avx2.cpp — the projections' GEMM for the avx2 path (flags: src/CMakeLists.txt,
// AVX2 + FMA). 16 ymm registers: a 6 × 2 tile is 12 accumulators, B's two vectors and
// one broadcast of A; each k issues 12 FMAs against 8 loads (2 of B, 6 broadcasts).
#include <immintrin.h>

#include "nn/gelu.hpp"
#include "nn/linear.hpp"

namespace sdpa::nn::avx2 {

#include "attention/simd_avx2.hpp"  // Vec: the attention kernel's SIMD layer, for the GEMM and the GELU

constexpr int kTileRows = 6;
constexpr int kTileVecs = 2;

#include "nn/linear_kernel.inl"

#include "nn/gelu_kernel.inl"

}  // namespace sdpa::nn::avx2

namespace sdpa::nn {
void gemm_f32_avx2(float* C, i64 ldc, const float* A, i64 a_m, i64 a_k, const float* B, i64 ldb, const float* bias,
                   GemmStart start, i64 M, i64 K, i64 N) {
  avx2::gemm(C, ldc, A, a_m, a_k, B, ldb, bias, start, M, K, N);
}
void gelu_forward_f32_avx2(float* out, const float* x, i64 n) { avx2::gelu_forward_f32(out, x, n); }
void gelu_backward_f32_avx2(float* dx, const float* dout, const float* x, i64 n) {
  avx2::gelu_backward_f32(dx, dout, x, n);
}
}  // namespace sdpa::nn
