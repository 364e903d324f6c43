// nn/linear_avx512.cpp — the projections' GEMM for the avx512 path (flags: src/CMakeLists.txt).
// 32 zmm registers: a 4 × 4 tile (64 columns) is 16 accumulators and B's four vectors, A's
// element folded into each FMA as an embedded broadcast; each k issues 16 FMAs against
// 4 loads of B and 4 broadcasts (the 2 × 4 tile this replaced: 8 FMAs against 4 + 2).
#include "common/avx512_intrinsics.hpp"

#include "nn/gelu.hpp"
#include "nn/linear.hpp"

namespace sdpa::nn::avx512 {

#include "attention/simd_avx512.hpp"  // Vec: the attention kernel's SIMD layer, for the GEMM and the GELU

constexpr int kTileRows = 4;
constexpr int kTileVecs = 4;

#include "nn/linear_kernel.inl"

#include "nn/gelu_kernel.inl"

}  // namespace sdpa::nn::avx512

namespace sdpa::nn {
void gemm_f32_avx512(float* C, i64 ldc, const float* A, i64 a_m, i64 a_k, const float* B, i64 ldb, const float* bias,
                     GemmStart start, i64 M, i64 K, i64 N) {
  avx512::gemm(C, ldc, A, a_m, a_k, B, ldb, bias, start, M, K, N);
}
void gelu_forward_f32_avx512(float* out, const float* x, i64 n) { avx512::gelu_forward_f32(out, x, n); }
void gelu_backward_f32_avx512(float* dx, const float* dout, const float* x, i64 n) {
  avx512::gelu_backward_f32(dx, dout, x, n);
}
}  // namespace sdpa::nn
