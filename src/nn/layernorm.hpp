// nn/layernorm.hpp — LayerNorm over the last dimension (pre-LN blocks).
#pragma once

#include "nn/common.hpp"

namespace sdpa::nn {

inline constexpr double kLnEps = 1e-5;

/// out = (x - mean) * rstd * w + b, per row; saves mean and rstd for the backward.
///   out, x (R, C)   w, b (C)   mean, rstd (R)
template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* x, const T* w, const T* b, i64 R, i64 C) {
  split(R, [&](i64 r0, i64 r1) {
    for (i64 r = r0; r < r1; ++r) {
      const T* xr = x + r * C;
      T m = 0;
      for (i64 c = 0; c < C; ++c) m += xr[c];
      m /= static_cast<T>(C);
      T v = 0;
      for (i64 c = 0; c < C; ++c) v += (xr[c] - m) * (xr[c] - m);
      v /= static_cast<T>(C);
      const T s = T(1) / std::sqrt(v + static_cast<T>(kLnEps));
      T* o = out + r * C;
      for (i64 c = 0; c < C; ++c) o[c] = (xr[c] - m) * s * w[c] + b[c];
      mean[r] = m;
      rstd[r] = s;
    }
  });
}

/// Inverts `o = xhat * w + b` with xhat = (x - mean) * rstd:
///   dxhat = dout * w;  dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
///   dw += dout * xhat;  db += dout.           dx (R, C) is written (`=`).
template <class T>
void layernorm_backward(T* dx, T* dw, T* db, const T* dout, const T* x, const T* w, const T* mean, const T* rstd, i64 R,
                        i64 C) {
  split(R, [&](i64 r0, i64 r1) {  // dx: rows are independent
    for (i64 r = r0; r < r1; ++r) {
      const T* d = dout + r * C;
      const T* xr = x + r * C;
      const T m = mean[r], s = rstd[r];
      T mean_dxhat = 0, mean_dxhat_xhat = 0;
      for (i64 c = 0; c < C; ++c) {
        const T xhat = (xr[c] - m) * s;
        const T dxhat = d[c] * w[c];
        mean_dxhat += dxhat;
        mean_dxhat_xhat += dxhat * xhat;
      }
      mean_dxhat /= static_cast<T>(C);
      mean_dxhat_xhat /= static_cast<T>(C);
      T* dr = dx + r * C;
      for (i64 c = 0; c < C; ++c) {
        const T xhat = (xr[c] - m) * s;
        const T dxhat = d[c] * w[c];
        dr[c] = s * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat);
      }
    }
  });
  split(C, [&](i64 c0, i64 c1) {  // dw, db: a sum over rows, so split by columns, rows ascending
    for (i64 r = 0; r < R; ++r) {
      const T* d = dout + r * C;
      const T* xr = x + r * C;
      const T m = mean[r], s = rstd[r];
      for (i64 c = c0; c < c1; ++c) {
        dw[c] += d[c] * ((xr[c] - m) * s);
        db[c] += d[c];
      }
    }
  });
}

}  // namespace sdpa::nn
