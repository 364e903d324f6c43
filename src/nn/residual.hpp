// nn/residual.hpp — the residual connection y = x + f(x).
#pragma once

#include "nn/common.hpp"

namespace sdpa::nn {

/// out = a + b        out, a, b (N)
template <class T>
void residual_forward(T* out, const T* a, const T* b, i64 N) {
  for (i64 i = 0; i < N; ++i) out[i] = a[i] + b[i];
}

/// Inverts `out = a + b`: both branches receive dout. Writes (=) da and db.
template <class T>
void residual_backward(T* da, T* db, const T* dout, i64 N) {
  for (i64 i = 0; i < N; ++i) {
    da[i] = dout[i];
    db[i] = dout[i];
  }
}

}  // namespace sdpa::nn
