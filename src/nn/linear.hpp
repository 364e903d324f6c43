// nn/linear.hpp — the affine map every projection uses: out = x · W + b.
//
// W is stored (IN, OUT), row-major, so the forward's inner loop runs along a row of W
// and vectorises without reassociating any sum. Rows are split across OpenMP threads;
// every output element is summed by one thread in a fixed order, so results do not
// depend on the thread count.
#pragma once

#include "nn/common.hpp"

namespace sdpa::nn {

/// out[r,o] = b[o] + Σ_c x[r,c] · W[c,o]
///   out (R, OUT)   x (R, IN)   W (IN, OUT)   b (OUT) or null
template <class T>
void linear_forward(T* out, const T* x, const T* W, const T* b, i64 R, i64 IN, i64 OUT) {
#pragma omp parallel for schedule(static)
  for (i64 r = 0; r < R; ++r) {
    T* o = out + r * OUT;
    for (i64 j = 0; j < OUT; ++j) o[j] = b ? b[j] : T(0);
    const T* xr = x + r * IN;
    for (i64 c = 0; c < IN; ++c) {
      const T xv = xr[c];
      const T* w = W + c * OUT;
      for (i64 j = 0; j < OUT; ++j) o[j] += xv * w[j];
    }
  }
}

/// Inverts `o[j] += x[r,c] · W[c,j]`:
///   dx[r,c] = Σ_j dout[r,j] · W[c,j]      (=)
///   dW[c,j] += Σ_r x[r,c] · dout[r,j]     db[j] += Σ_r dout[r,j]
///   dx (R, IN) or null   dW (IN, OUT)   db (OUT) or null   dout (R, OUT)
template <class T>
void linear_backward(T* dx, T* dW, T* db, const T* dout, const T* x, const T* W, i64 R, i64 IN, i64 OUT) {
  if (dx) {
#pragma omp parallel for schedule(static)
    for (i64 r = 0; r < R; ++r) {
      const T* d = dout + r * OUT;
      for (i64 c = 0; c < IN; ++c) {
        const T* w = W + c * OUT;
        T s = 0;
#pragma omp simd reduction(+ : s)
        for (i64 j = 0; j < OUT; ++j) s += d[j] * w[j];
        dx[r * IN + c] = s;
      }
    }
  }
#pragma omp parallel for schedule(static)
  for (i64 c = 0; c < IN; ++c) {
    T* dw = dW + c * OUT;
    for (i64 r = 0; r < R; ++r) {
      const T xv = x[r * IN + c];
      const T* d = dout + r * OUT;
      for (i64 j = 0; j < OUT; ++j) dw[j] += xv * d[j];
    }
  }
  if (db)
    for (i64 r = 0; r < R; ++r)
      for (i64 j = 0; j < OUT; ++j) db[j] += dout[r * OUT + j];
}

}  // namespace sdpa::nn
