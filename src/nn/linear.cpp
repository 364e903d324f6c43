// nn/linear.cpp — the fp32 projection blocks and the choice of their GEMM kernel (one per
// ISA, linear_<isa>.cpp). This file has no -m flags.
//
// All three products are one GEMM, C (+)= A·B, B row-major and A through two strides:
//   forward  out = x·W (+ b)    A = x (R, IN)                          B = W (IN, OUT)
//   dx       dx = dout·Wᵀ       A = dout (R, OUT)                      B = Wᵀ (OUT, IN), transposed by the caller
//   dW       dW += xᵀ·dout      A = xᵀ (IN, R): x with strides swapped  B = dout (R, OUT)
#include "nn/linear.hpp"

#include "nn/gelu.hpp"

#include "common/per_isa.hpp"

namespace sdpa::nn {

GemmF32 gemm_f32(Isa isa) {
  static const PerIsa<GemmF32> set{gemm_f32_scalar,
                                   SDPA_X86_ENTRY(gemm_f32_avx2),
                                   SDPA_AVX512_ENTRY(gemm_f32_avx512),
                                   SDPA_ARM_ENTRY(gemm_f32_neon),
                                   SDPA_ARM_ENTRY(gemm_f32_sve256),
                                   SDPA_ARM_ENTRY(gemm_f32_sve512)};
  return per_isa(set, isa, "gemm_f32");
}

void gelu_forward_f32_avx2(float* out, const float* x, i64 n);
void gelu_backward_f32_avx2(float* dx, const float* dout, const float* x, i64 n);
void gelu_forward_f32_avx512(float* out, const float* x, i64 n);
void gelu_backward_f32_avx512(float* dx, const float* dout, const float* x, i64 n);
void gelu_forward_f32_neon(float* out, const float* x, i64 n);
void gelu_backward_f32_neon(float* dx, const float* dout, const float* x, i64 n);
void gelu_forward_f32_sve256(float* out, const float* x, i64 n);
void gelu_backward_f32_sve256(float* dx, const float* dout, const float* x, i64 n);
void gelu_forward_f32_sve512(float* out, const float* x, i64 n);
void gelu_backward_f32_sve512(float* dx, const float* dout, const float* x, i64 n);

GeluF32 gelu_f32(Isa isa) {
  static const PerIsa<GeluF32> set{{nullptr, nullptr},  // the scalar path's GELU is the layer's own loop
                                   SDPA_X86_ENTRY({gelu_forward_f32_avx2, gelu_backward_f32_avx2}),
                                   SDPA_AVX512_ENTRY({gelu_forward_f32_avx512, gelu_backward_f32_avx512}),
                                   SDPA_ARM_ENTRY({gelu_forward_f32_neon, gelu_backward_f32_neon}),
                                   SDPA_ARM_ENTRY({gelu_forward_f32_sve256, gelu_backward_f32_sve256}),
                                   SDPA_ARM_ENTRY({gelu_forward_f32_sve512, gelu_backward_f32_sve512})};
  return per_isa(set, isa, "gelu_f32");
}

void linear_forward_block_f32(GemmF32 gemm, float* out, const float* x, const float* W, const float* b, i64 r0, i64 r1,
                              i64 IN, i64 OUT) {
  gemm(out + r0 * OUT, OUT, x + r0 * IN, IN, 1, W, OUT, b, b ? GemmStart::bias : GemmStart::zero, r1 - r0, IN, OUT);
}

void linear_dx_block_f32(GemmF32 gemm, float* dx, const float* dout, const float* WT, i64 r0, i64 r1, i64 IN, i64 OUT) {
  gemm(dx + r0 * IN, IN, dout + r0 * OUT, OUT, 1, WT, IN, nullptr, GemmStart::zero, r1 - r0, OUT, IN);
}

void linear_dw_block_f32(GemmF32 gemm, float* dW, const float* dout, const float* x, i64 R, i64 c0, i64 c1, i64 IN,
                         i64 OUT) {
  // dW[c0:c1] += xᵀ[c0:c1] · dout: A[m,k] = x[k, c0 + m], read in place.
  gemm(dW + c0 * OUT, OUT, x + c0, 1, IN, dout, OUT, nullptr, GemmStart::accumulate, c1 - c0, R, OUT);
}

}  // namespace sdpa::nn
