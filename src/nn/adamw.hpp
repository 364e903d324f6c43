// nn/adamw.hpp — AdamW (Loshchilov & Hutter 2019), global-norm gradient clipping,
// and the learning-rate schedule (linear warm-up, then cosine decay to 10%).
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "nn/common.hpp"

namespace sdpa::nn {

struct AdamW {
  double lr = 3e-3, beta1 = 0.9, beta2 = 0.98, eps = 1e-8, weight_decay = 0.1;
};

/// One update of n parameters at step t (1-based). decay (n) says which ones are
/// decayed (matrices; not gains, biases or temperatures).
///   m ← β1 m + (1−β1) g;  v ← β2 v + (1−β2) g²
///   p ← p − lr·( m̂/(√v̂ + ε) + wd·p )
template <class T>
void adamw_update(T* p, const T* g, T* m, T* v, const unsigned char* decay, i64 n, const AdamW& a, double lr, i64 t) {
  // The bias corrections as factors: a division per element is what bounds this loop.
  const double inv_c1 = 1.0 / (1.0 - std::pow(a.beta1, static_cast<double>(t)));
  const double inv_c2 = 1.0 / (1.0 - std::pow(a.beta2, static_cast<double>(t)));
  split(n, [&](i64 i0, i64 i1) {  // element-wise: any split, any vector width gives the same bits
#pragma omp simd
    for (i64 i = i0; i < i1; ++i) {
      m[i] = static_cast<T>(a.beta1 * m[i] + (1.0 - a.beta1) * g[i]);
      v[i] = static_cast<T>(a.beta2 * v[i] + (1.0 - a.beta2) * g[i] * g[i]);
      const double mh = m[i] * inv_c1, vh = v[i] * inv_c2;
      const double wd = decay[i] ? a.weight_decay * p[i] : 0.0;
      p[i] = static_cast<T>(p[i] - lr * (mh / (std::sqrt(vh) + a.eps) + wd));
    }
  });
}

/// Elements per block of the gradient norm's sum: the blocks are fixed by n alone, so
/// the sum's order does not depend on the thread count.
inline constexpr i64 kNormBlock = 4096;

/// Scales g so that its global L2 norm is at most max_norm (if max_norm > 0).
/// Returns the norm before clipping. The squares are summed in fp64 per block of
/// kNormBlock elements (one sum each, ascending), the blocks' sums then in block order.
template <class T>
double clip_grad_norm(T* g, i64 n, double max_norm) {
  const i64 blocks = (n + kNormBlock - 1) / kNormBlock;
  thread_local std::vector<double> partial;  // kept between calls: a step allocates nothing
  partial.resize(static_cast<std::size_t>(blocks));
  double* part = partial.data();
  split(blocks, [&](i64 b0, i64 b1) {
    for (i64 b = b0; b < b1; ++b) {
      double s = 0;
      for (i64 i = b * kNormBlock; i < std::min(n, (b + 1) * kNormBlock); ++i) s += static_cast<double>(g[i]) * g[i];
      part[b] = s;
    }
  });
  double s = 0;
  for (i64 b = 0; b < blocks; ++b) s += part[b];
  const double norm = std::sqrt(s);
  if (max_norm > 0 && norm > max_norm) {
    const T f = static_cast<T>(max_norm / norm);
    split(n, [&](i64 i0, i64 i1) {
      for (i64 i = i0; i < i1; ++i) g[i] *= f;
    });
  }
  return norm;
}

/// Learning rate at step t (1-based) of `total`: linear warm-up over `warmup` steps,
/// then cosine from lr down to lr/10.
inline double lr_at(double lr, i64 t, i64 warmup, i64 total) {
  if (warmup > 0 && t <= warmup) return lr * static_cast<double>(t) / static_cast<double>(warmup);
  if (total <= warmup) return lr;
  const double x = static_cast<double>(t - warmup) / static_cast<double>(total - warmup);
  return lr * (0.1 + 0.9 * 0.5 * (1.0 + std::cos(3.141592653589793 * std::min(1.0, x))));
}

}  // namespace sdpa::nn
