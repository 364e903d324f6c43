// mask_rows.cpp — MaskRowTable: one pass over the explicit masks' bytes per call.
#include "attention/mask_rows.hpp"

#include <cmath>
#include <cstring>
#include <limits>

namespace sdpa::detail {

MaskRowTable::Layout MaskRowTable::layout(const Problem& p) {
  Layout l;
  const bool keep = !p.keep.empty(), bias = !p.mask.empty();
  if (!keep && !bias) return l;
  const i64 extent[3] = {p.B, p.Hq, p.Nq};
  i64 n[3];
  for (int d = 0; d < 3; ++d) {
    const bool varies = (keep && p.keep.stride[d] != 0) || (bias && p.mask.stride[d] != 0);
    n[d] = varies ? extent[d] : 1;
  }
  l.rows = n[0] * n[1] * n[2];
  l.stride[2] = n[2] > 1 ? 1 : 0;
  l.stride[1] = n[1] > 1 ? n[2] : 0;
  l.stride[0] = n[0] > 1 ? n[1] * n[2] : 0;
  return l;
}

namespace {

// The MaskRow of one mask row: keep (stride ks; null: none) and bias (stride ms; null: none)
// over Nk keys. A key lets the row through unless keep is 0 or the bias is -inf; it is plain
// where keep is set and the bias is ±0 (s + 0 = s: mask_tile's per-key path skips such a
// bias too).
MaskRow scan_row(const std::uint8_t* keep, i64 ks, const float* bias, i64 ms, i64 Nk) {
  constexpr float neg_inf = -std::numeric_limits<float>::infinity();
  const auto through = [&](i64 j) { return (keep == nullptr || keep[j * ks] != 0) && (bias == nullptr || bias[j * ms] != neg_inf); };
  MaskRow r{0, -1, true};
  i64 first = 0;
  while (first < Nk && !through(first)) ++first;
  if (first == Nk) return r;  // nothing gets through: an empty row
  i64 last = Nk - 1;
  while (!through(last)) --last;
  r.first = first, r.last = last;
  // Dense: no key in [first, last] is masked or biased. A contiguous keep row is checked by
  // memchr (the bulk of the pass: the row's visible span).
  if (keep != nullptr) {
    if (ks == 1) {
      r.dense = std::memchr(keep + first, 0, static_cast<std::size_t>(last - first + 1)) == nullptr;
    } else {
      for (i64 j = first; j <= last && r.dense; ++j) r.dense = keep[j * ks] != 0;
    }
  }
  if (bias != nullptr)
    for (i64 j = first; j <= last && r.dense; ++j) r.dense = bias[j * ms] == 0.0f;
  return r;
}

}  // namespace

void MaskRowTable::attach(Problem& p, int workers) {
  const Layout l = layout(p);
  if (l.rows == 0) return;
  rows_.resize(static_cast<std::size_t>(l.rows));
  // Row index x back to (b, h, i) along the dimensions the table holds (stride 0: index 0).
  const i64 n_i = l.stride[2] != 0 ? p.Nq : 1, n_h = l.stride[1] != 0 ? p.Hq : 1;
  const bool keep = !p.keep.empty(), bias = !p.mask.empty();
  bool dense = true;
#pragma omp parallel for num_threads(workers) schedule(static) reduction(&& : dense)
  for (i64 x = 0; x < l.rows; ++x) {
    const i64 i = x % n_i, h = x / n_i % n_h, b = x / (n_i * n_h);
    const std::uint8_t* keep_row =
        keep ? p.keep.data + b * p.keep.stride[0] + h * p.keep.stride[1] + i * p.keep.stride[2] : nullptr;
    const float* bias_row =
        bias ? p.mask.data + b * p.mask.stride[0] + h * p.mask.stride[1] + i * p.mask.stride[2] : nullptr;
    const MaskRow r = scan_row(keep_row, p.keep.stride[3], bias_row, p.mask.stride[3], p.Nk);
    rows_[static_cast<std::size_t>(x)] = r;
    dense = dense && r.dense;
  }
  p.mask_rows = rows_.data();
  for (int d = 0; d < 3; ++d) p.mask_row_stride[d] = l.stride[d];
  p.mask_rows_dense = dense;
}

}  // namespace sdpa::detail
