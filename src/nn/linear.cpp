// nn/linear.cpp — the fp32 projection loops, cloned per instruction set (see linear.hpp).
#include "nn/linear.hpp"

namespace sdpa::nn {

[[gnu::target_clones("avx512f", "avx2", "default")]]
void linear_forward_block_f32(float* out, const float* x, const float* W, const float* b, i64 r0, i64 r1, i64 IN,
                              i64 OUT) {
  linear_forward_block(out, x, W, b, r0, r1, IN, OUT);
}

[[gnu::target_clones("avx512f", "avx2", "default")]]
void linear_dx_block_f32(float* dx, const float* dout, const float* W, i64 r0, i64 r1, i64 IN, i64 OUT) {
  linear_dx_block(dx, dout, W, r0, r1, IN, OUT);
}

[[gnu::target_clones("avx512f", "avx2", "default")]]
void linear_dw_block_f32(float* dW, const float* dout, const float* x, i64 R, i64 c0, i64 c1, i64 IN, i64 OUT) {
  linear_dw_block(dW, dout, x, R, c0, c1, IN, OUT);
}

}  // namespace sdpa::nn
