// nn/linear_sve.inl — the projections' GEMM and GELU for the sve path at one vector length:
// included by linear_sve256.cpp and linear_sve512.cpp after they set SDPA_SVE_BITS
// (common/sve_width.hpp). The tile is the neon path's, 5 × 4 vectors (20 accumulators, 4 B
// vectors, 5 broadcast A elements of 32 registers), each vector Vec::W floats wide.
#include <arm_sve.h>

#include <cstdint>

#include "common/sve_width.hpp"
#include "nn/gelu.hpp"
#include "nn/linear.hpp"

namespace sdpa::nn::SDPA_SVE_NAMESPACE {

#include "attention/simd_sve.hpp"  // Vec: the attention kernel's SIMD layer, for the GEMM and the GELU

constexpr int kTileRows = 5;
constexpr int kTileVecs = 4;

#include "nn/linear_kernel.inl"

#include "nn/gelu_kernel.inl"

}  // namespace sdpa::nn::SDPA_SVE_NAMESPACE

namespace sdpa::nn {
void SDPA_SVE_NAMED(gemm_f32)(float* C, i64 ldc, const float* A, i64 a_m, i64 a_k, const float* B, i64 ldb,
                              const float* bias, GemmStart start, i64 M, i64 K, i64 N) {
  SDPA_SVE_NAMESPACE::gemm(C, ldc, A, a_m, a_k, B, ldb, bias, start, M, K, N);
}
void SDPA_SVE_NAMED(gelu_forward_f32)(float* out, const float* x, i64 n) {
  SDPA_SVE_NAMESPACE::gelu_forward_f32(out, x, n);
}
void SDPA_SVE_NAMED(gelu_backward_f32)(float* dx, const float* dout, const float* x, i64 n) {
  SDPA_SVE_NAMESPACE::gelu_backward_f32(dx, dout, x, n);
}
}  // namespace sdpa::nn
