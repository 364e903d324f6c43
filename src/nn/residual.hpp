// nn/residual.hpp — the residual connection y = x + f(x).
#pragma once

#include "nn/common.hpp"

namespace sdpa::nn {

/// out = a + b, element-wise: the residual's forward, and where two gradient paths meet.
///   out, a, b (N)
template <class T>
void add_into(T* out, const T* a, const T* b, i64 N) {
  split(N, [&](i64 i0, i64 i1) {
    for (i64 i = i0; i < i1; ++i) out[i] = a[i] + b[i];
  });
}

/// out = a + b        out, a, b (N)
template <class T>
void residual_forward(T* out, const T* a, const T* b, i64 N) {
  add_into(out, a, b, N);
}

/// Inverts `out = a + b`: both branches receive dout. Writes (=) da and db.
template <class T>
void residual_backward(T* da, T* db, const T* dout, i64 N) {
  split(N, [&](i64 i0, i64 i1) {
    for (i64 i = i0; i < i1; ++i) {
      da[i] = dout[i];
      db[i] = dout[i];
    }
  });
}

}  // namespace sdpa::nn
