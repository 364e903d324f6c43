// nn/gelu.hpp — GELU, tanh approximation: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
#pragma once

#include "nn/common.hpp"

namespace sdpa::nn {

inline constexpr double kGeluA = 0.7978845608028654;  // √(2/π)
inline constexpr double kGeluB = 0.044715;

/// out, x (N)
template <class T>
void gelu_forward(T* out, const T* x, i64 N) {
  for (i64 i = 0; i < N; ++i) {
    const T v = x[i];
    const T u = static_cast<T>(kGeluA) * (v + static_cast<T>(kGeluB) * v * v * v);
    out[i] = T(0.5) * v * (T(1) + std::tanh(u));
  }
}

/// Inverts `out = 0.5·x·(1 + tanh(u))`, u = a(x + b x³):
///   d/dx = 0.5(1 + tanh u) + 0.5·x·(1 - tanh² u)·a(1 + 3 b x²).   dx (N) is written (=).
template <class T>
void gelu_backward(T* dx, const T* dout, const T* x, i64 N) {
  for (i64 i = 0; i < N; ++i) {
    const T v = x[i];
    const T u = static_cast<T>(kGeluA) * (v + static_cast<T>(kGeluB) * v * v * v);
    const T th = std::tanh(u);
    const T du = static_cast<T>(kGeluA) * (T(1) + T(3) * static_cast<T>(kGeluB) * v * v);
    dx[i] = dout[i] * (T(0.5) * (T(1) + th) + T(0.5) * v * (T(1) - th * th) * du);
  }
}

}  // namespace sdpa::nn
