// flops.cpp — see flops.hpp.
#include "bench/flops.hpp"

#include <algorithm>

namespace sdpa::bench {
namespace {

// ∫ from −∞ to u of clamp(t, 0, nk) dt: the visible area of the rows up to u, where a row
// at position t sees clamp(t, 0, nk) keys.
double ramp_area(double u, double nk) {
  if (u <= 0) return 0.0;
  if (u <= nk) return 0.5 * u * u;
  return 0.5 * nk * nk + nk * (u - nk);
}

}  // namespace

double visible_pairs(const Shape& s, Causal causal) {
  const double nq = double(s.Nq), nk = double(s.Nk);
  if (causal == Causal::none) return nq * nk;
  // Query row i sees keys j ≤ i + offset: the rows x ∈ [0, Nq) see clamp(x + offset, 0, Nk).
  const double offset = causal == Causal::bottom_right ? nk - nq : 0.0;
  return ramp_area(nq + offset, nk) - ramp_area(offset, nk);
}

double flops(const Shape& s, Causal causal, Pass pass) {
  const double forward = 2.0 * double(s.Dk + s.Dv) * double(s.B) * double(s.Hq) * visible_pairs(s, causal);
  return pass == Pass::backward ? 2.5 * forward : forward;
}

double kv_bytes(const Shape& s, Dtype t) {
  return (t == Dtype::f32 ? 4.0 : 2.0) * double(s.B) * double(s.Hkv) * double(s.Nk) * double(s.Dk + s.Dv);
}

bool is_decoding(const Shape& s) { return s.Nq <= 16; }

}  // namespace sdpa::bench
