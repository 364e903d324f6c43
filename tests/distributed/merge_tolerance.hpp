// merge_tolerance.hpp — how far attention computed block by block (S key blocks per query
// row, merged by lse in fp32) may be from the fp64 reference: the single-call rule
// (common/tolerance.hpp: 2 × naive fp32 error + floor) plus the merge's own rounding.
// The derivation is docs/scaling.md, "The merge's error bound"; in short, with
//   L  = smax + log Nk         bounds |lse| of the whole row and of every part
//   Gq = 2|β| dpmax max|k|     bounds Σ_blocks |dq partial|   (Σ_j p_ij = 1, |dP − delta| <= 2 dpmax)
//   Gk = 2|β| dpmax max|q| C   bounds Σ_shards |dk partial|   (C = max_j Σ_i p_ij, the column mass)
//   Gv = max|dout| C           bounds Σ_shards |dv partial|
//   out: + 2 floor_lse max|v| + (S−1) eps max|v| (4L + 20)
//   lse: + (S−1) eps (L + 4)
//   dX:  + (S−1) eps (L + 5) G_X
// With attention sinks the sink is one more part of every row (S + 1 parts), its lse the
// sink's logit: L = max(smax, max|sink|) + log(Nk + 1).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/tolerance.hpp"

namespace sdpa::test {

struct MergeExtra {
  double out = 0, lse = 0, dq = 0, dk = 0, dv = 0;
};

/// The merge's extra terms. parts = S, the number of key blocks merged per query row.
/// column_mass = C above (pass 0 when no backward is checked). sink_max: max |finite sink|, or
/// a negative number without sinks.
inline MergeExtra merge_extra(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                              const std::vector<float>& dout, std::int64_t Dk, std::int64_t Dv, std::int64_t Nk,
                              double beta, double softcap, std::int64_t parts, double floor_lse, double column_mass,
                              double mask_max = 0.0, double sink_max = -1.0) {
  using tolerance::kEps32;
  double smax = beta * tolerance::max_row_norm(q, Dk) * tolerance::max_row_norm(k, Dk);
  if (softcap > 0) smax = std::min(smax, softcap);
  smax += mask_max;  // an additive mask moves every score by at most max|mask| (tolerance.hpp)
  const bool sinks = sink_max >= 0.0;
  const double L = std::max(smax, sink_max) + std::log(static_cast<double>(Nk + (sinks ? 1 : 0)));
  parts += sinks ? 1 : 0;
  const double dpmax = tolerance::max_row_norm(dout, Dv) * tolerance::max_row_norm(v, Dv);
  const double s1 = static_cast<double>(parts - 1) * kEps32;
  const double vmax = tolerance::max_abs(v);
  MergeExtra m;
  m.out = 2.0 * floor_lse * vmax + s1 * vmax * (4.0 * L + 20.0);
  m.lse = s1 * (L + 4.0);
  m.dq = s1 * (L + 5.0) * 2.0 * beta * dpmax * tolerance::max_abs(k);
  m.dk = s1 * (L + 5.0) * 2.0 * beta * dpmax * tolerance::max_abs(q) * column_mass;
  m.dv = s1 * (L + 5.0) * tolerance::max_abs(dout) * column_mass;
  return m;
}

}  // namespace sdpa::test
