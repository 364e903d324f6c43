// nn/gelu.hpp — GELU, tanh approximation: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
#pragma once

#include <type_traits>

#include "nn/common.hpp"
#include "sdpa/attention.hpp"  // Isa

namespace sdpa::nn {

inline constexpr double kGeluA = 0.7978845608028654;  // √(2/π)
inline constexpr double kGeluB = 0.044715;

/// tanh u = 1 − 2/(1 + e^{2u}): one exp instead of libm's tanh (a third of a training
/// step went into tanhf); absolute error a few ulps of 1, which is what GELU needs
/// (it multiplies 1 + tanh u by x/2). Saturates cleanly: e^{2u} = inf gives 1, 0 gives −1.
template <class T>
T tanh_via_exp(T u) {
  return T(1) - T(2) / (T(1) + std::exp(T(2) * u));
}

/// fp32 GELU on vector registers (nn/gelu_kernel.inl, compiled per ISA in linear_<isa>.cpp).
struct GeluF32 {
  void (*forward)(float* out, const float* x, i64 n);
  void (*backward)(float* dx, const float* dout, const float* x, i64 n);
};
/// The kernels of `isa` (Isa::automatic: sdpa::active_isa()); both null for the scalar
/// path, which runs the templates below. Throws sdpa::Error for an ISA this CPU lacks.
GeluF32 gelu_f32(Isa isa = Isa::automatic);

/// out, x (N)
template <class T>
void gelu_forward(T* out, const T* x, i64 N) {
  if constexpr (std::is_same_v<T, float>) {
    if (const auto k = gelu_f32().forward) return split(N, [&](i64 i0, i64 i1) { k(out + i0, x + i0, i1 - i0); });
  }
  split(N, [&](i64 i0, i64 i1) {
    for (i64 i = i0; i < i1; ++i) {
      const T v = x[i];
      const T u = static_cast<T>(kGeluA) * (v + static_cast<T>(kGeluB) * v * v * v);
      out[i] = T(0.5) * v * (T(1) + tanh_via_exp(u));
    }
  });
}

/// Inverts `out = 0.5·x·(1 + tanh(u))`, u = a(x + b x³):
///   d/dx = 0.5(1 + tanh u) + 0.5·x·(1 - tanh² u)·a(1 + 3 b x²).   dx (N) is written (=).
template <class T>
void gelu_backward(T* dx, const T* dout, const T* x, i64 N) {
  if constexpr (std::is_same_v<T, float>) {
    if (const auto k = gelu_f32().backward)
      return split(N, [&](i64 i0, i64 i1) { k(dx + i0, dout + i0, x + i0, i1 - i0); });
  }
  split(N, [&](i64 i0, i64 i1) {
    for (i64 i = i0; i < i1; ++i) {
      const T v = x[i];
      const T u = static_cast<T>(kGeluA) * (v + static_cast<T>(kGeluB) * v * v * v);
      const T th = tanh_via_exp(u);
      const T du = static_cast<T>(kGeluA) * (T(1) + T(3) * static_cast<T>(kGeluB) * v * v);
      dx[i] = dout[i] * (T(0.5) * (T(1) + th) + T(0.5) * v * (T(1) - th * th) * du);
    }
  });
}

}  // namespace sdpa::nn
