// nn/linear_scalar.cpp — the projections' GEMM for the scalar path: no -m flags, so it
// runs on any CPU the project builds for. Its registers are GCC's generic 4-float vectors
// (SSE2, x86-64's baseline: 16 xmm registers); with no FMA a madd is a multiply and an
// add, so a 4 × 2 tile (8 accumulators, B's two vectors, a broadcast and the product)
// fits without spilling.
#include "nn/linear.hpp"

namespace sdpa::nn::scalar {

struct Lanes {
  typedef float R __attribute__((vector_size(16)));
  static constexpr int W = 4;
  static R zero() { return R{}; }
  static R set1(float x) { return R{x, x, x, x}; }
  static R load(const float* p) {
    R v;
    __builtin_memcpy(&v, p, sizeof v);
    return v;
  }
  static void store(float* p, R x) { __builtin_memcpy(p, &x, sizeof x); }
  static R madd(R a, R b, R acc) { return acc + a * b; }
  static float madd(float a, float b, float acc) { return acc + a * b; }
};
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
