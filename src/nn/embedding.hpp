// nn/embedding.hpp — token embedding plus learned position embedding.
#pragma once

#include "nn/common.hpp"

namespace sdpa::nn {

/// out[b,t,:] = wte[tok[b,t],:] + wpe[pos0[b] + t,:]
///   out (B, T, C)   tok (B, T)   wte (V, C)   wpe (Tmax, C)   pos0 (B) or null (= 0)
template <class T>
void embedding_forward(T* out, const int* tok, const int* pos0, const T* wte, const T* wpe, i64 B, i64 Tn, i64 C) {
  split(B * Tn, [&](i64 r0, i64 r1) {
    for (i64 r = r0; r < r1; ++r) {
      const i64 b = r / Tn, t = r % Tn;
      T* o = out + r * C;
      const T* e = wte + static_cast<i64>(tok[r]) * C;
      const T* p = wpe + (t + (pos0 ? pos0[b] : 0)) * C;
      for (i64 c = 0; c < C; ++c) o[c] = e[c] + p[c];
    }
  });
}

/// Inverts the forward line `o[c] = e[c] + p[c]`: both tables receive dout (`+=`).
///   dwte (V, C)   dwpe (Tmax, C)   dout (B, T, C)
template <class T>
void embedding_backward(T* dwte, T* dwpe, const T* dout, const int* tok, const int* pos0, i64 B, i64 Tn, i64 C) {
  // Rows may share a token or a position, so split by columns: each element's sum runs
  // over the rows in ascending order on one thread.
  split(C, [&](i64 c0, i64 c1) {
    for (i64 b = 0; b < B; ++b)
      for (i64 t = 0; t < Tn; ++t) {
        const T* d = dout + (b * Tn + t) * C;
        T* e = dwte + static_cast<i64>(tok[b * Tn + t]) * C;
        T* p = dwpe + (t + (pos0 ? pos0[b] : 0)) * C;
        for (i64 c = c0; c < c1; ++c) {
          e[c] += d[c];
          p[c] += d[c];
        }
      }
  });
}

}  // namespace sdpa::nn
