// nn/crossentropy.hpp — softmax cross-entropy over the vocabulary, averaged over the
// positions that carry a target (target < 0: no loss there, e.g. the prompt).
#pragma once

#include <algorithm>
#include <limits>
#include <vector>

#include "nn/common.hpp"

namespace sdpa::nn {

struct CeResult {
  double loss = 0;  // mean −log p(target) over counted positions
  i64 counted = 0;  // positions with a target
  i64 correct = 0;  // of those, argmax == target
};

/// probs = softmax(logits) per row; returns the mean loss over rows with target >= 0.
///   probs, logits (R, V)   target (R)
/// Rows run on all threads; the loss is summed over rows in ascending order afterwards.
template <class T>
CeResult crossentropy_forward(T* probs, const T* logits, const int* target, i64 R, i64 V) {
  // −log p[target] per row (NaN: no target) and whether the argmax hit it; kept per
  // thread between calls so a training step allocates nothing.
  thread_local std::vector<double> row_loss;
  thread_local std::vector<unsigned char> row_hit;
  row_loss.resize(static_cast<std::size_t>(R));
  row_hit.resize(static_cast<std::size_t>(R));
  double* nll = row_loss.data();
  unsigned char* hit = row_hit.data();
  split(R, [&](i64 r0, i64 r1) {
    for (i64 r = r0; r < r1; ++r) {
      const T* l = logits + r * V;
      T* p = probs + r * V;
      T mx = -std::numeric_limits<T>::infinity();
      i64 arg = 0;
      for (i64 j = 0; j < V; ++j)
        if (l[j] > mx) mx = l[j], arg = j;
      T z = 0;
      for (i64 j = 0; j < V; ++j) z += (p[j] = std::exp(l[j] - mx));
      for (i64 j = 0; j < V; ++j) p[j] /= z;
      nll[r] = target[r] >= 0 ? -std::log(static_cast<double>(p[target[r]])) : 0.0;
      hit[r] = target[r] >= 0 && arg == target[r];
    }
  });
  CeResult res;
  double sum = 0;
  for (i64 r = 0; r < R; ++r)
    if (target[r] >= 0) {
      sum += nll[r];
      res.counted++;
      res.correct += hit[r];
    }
  res.loss = res.counted ? sum / static_cast<double>(res.counted) : 0.0;
  return res;
}

/// Inverts `loss = mean_r −log p[r, target_r]`: dlogits = (p − onehot) / counted on rows
/// with a target, 0 elsewhere (=).   dlogits, probs (R, V)
template <class T>
void crossentropy_backward(T* dlogits, const T* probs, const int* target, i64 R, i64 V, i64 counted) {
  const T inv = counted ? T(1) / static_cast<T>(counted) : T(0);
  split(R, [&](i64 r0, i64 r1) {
    for (i64 r = r0; r < r1; ++r) {
      T* d = dlogits + r * V;
      const T* p = probs + r * V;
      if (target[r] < 0) {
        std::fill(d, d + V, T(0));
        continue;
      }
      for (i64 j = 0; j < V; ++j) d[j] = p[j] * inv;
      d[target[r]] -= inv;
    }
  });
}

}  // namespace sdpa::nn
