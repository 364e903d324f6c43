// merge.hpp — the one merge of partial attention results over disjoint key sets.
//
// Parts s = 0 … count−1 of one query row, each with its (out_s, lse_s), combine as
//   lse = log Σ_s exp(lse_s)              (computed as m + log Σ_s exp(lse_s − m), m = max_s lse_s)
//   out = Σ_s exp(lse_s − lse) · out_s    summed in the order s = 0, 1, …
// A part with lse_s = −inf saw no key and contributes nothing (its weight is exactly 0 and
// its out_s is not read); a NaN lse_s makes the row NaN, as the unsplit call would.
// Used by the split-KV decoding merge (api.cpp) and by sdpa::merge_partial (blocks.cpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace sdpa::detail {

/// Merges one row. lse_at(s) is part s's lse, out_at(s, e) its out element e; store(e, x)
/// receives the merged out element e after every out_at(·, e) was read. Returns the lse.
template <class LseAt, class OutAt, class Store>
float merge_row(std::int64_t count, std::int64_t dv, LseAt lse_at, OutAt out_at, Store store) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), neg_inf = -std::numeric_limits<float>::infinity();
  float mx = neg_inf;
  bool any_nan = false;
  for (std::int64_t s = 0; s < count; ++s) {
    const float x = lse_at(s);
    any_nan |= std::isnan(x);
    mx = std::max(mx, x);
  }
  float lse = neg_inf;
  if (any_nan) {
    lse = nan;
  } else if (mx != neg_inf) {
    float sum = 0.0f;
    for (std::int64_t s = 0; s < count; ++s) sum += std::exp(lse_at(s) - mx);
    lse = mx + std::log(sum);
  }
  // The weights exp(lse_s − lse), once per part rather than once per element (the same
  // bits: each is the same expression); up to kOnStack parts without an allocation.
  constexpr std::int64_t kOnStack = 16;
  float w_stack[kOnStack] = {};
  std::vector<float> w_heap;
  float* w = w_stack;
  if (count > kOnStack) {
    w_heap.resize(static_cast<std::size_t>(count));
    w = w_heap.data();
  }
  if (!any_nan && lse != neg_inf)
    for (std::int64_t s = 0; s < count; ++s) w[s] = std::exp(lse_at(s) - lse);
  for (std::int64_t e = 0; e < dv; ++e) {
    float acc = 0.0f;
    if (any_nan) {
      acc = nan;
    } else if (lse != neg_inf) {
      for (std::int64_t s = 0; s < count; ++s)
        if (w[s] != 0.0f) acc += w[s] * out_at(s, e);
    }
    store(e, acc);
  }
  return lse;
}

/// One head's ∂L/∂sink = −Σ_r exp(sink − lse_r)·Δ_r over its rows r = 0 … rows−1, Δ_r =
/// dout_r·out_r: the sink is a key whose value is 0, so its dP is 0 and its dS = p_sink·(0 − Δ).
/// Summed in double, rows in order (the same bits for any thread count); 0 for a −inf sink.
/// Used by sdpa::backward (api.cpp) and by sdpa::add_sink_grads (blocks.cpp).
template <class LseAt, class DeltaAt>
double sink_grad(float sink, std::int64_t rows, LseAt lse_at, DeltaAt delta_at) {
  double acc = 0.0;
  if (sink == -std::numeric_limits<float>::infinity()) return acc;
  for (std::int64_t r = 0; r < rows; ++r)
    acc -= std::exp(static_cast<double>(sink) - static_cast<double>(lse_at(r))) * static_cast<double>(delta_at(r));
  return acc;
}

}  // namespace sdpa::detail
