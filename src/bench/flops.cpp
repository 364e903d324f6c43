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

// Pairs per head without an explicit mask.
double structure_pairs(const Shape& s, Causal causal) {
  const double nq = double(std::max<i64>(s.Nq, 0)), nk = double(std::max<i64>(s.Nk, 0));
  if (causal == Causal::none) return nq * nk;
  // Query row i sees keys j ≤ i + offset: the rows x ∈ [0, Nq) see clamp(x + offset, 0, Nk).
  const double offset = causal == Causal::bottom_right ? nk - nq : 0.0;
  return ramp_area(nq + offset, nk) - ramp_area(offset, nk);
}

}  // namespace

i64 padded_keys(const Shape& s, i64 b) { return b * s.Nk / (2 * s.B); }

const char* mask_name(ExplicitMask m) { return m == ExplicitMask::padding ? "padding" : "none"; }

ExplicitMask parse_explicit_mask(const std::string& name, const char* what) {
  for (ExplicitMask m : {ExplicitMask::none, ExplicitMask::padding})
    if (name == mask_name(m)) return m;
  throw Error(std::string(what) + ": expected none or padding, got '" + name + "'");
}

double visible_pairs(const Shape& s, Causal causal, ExplicitMask mask) {
  if (mask == ExplicitMask::none) return structure_pairs(s, causal);
  // Item b without its p padded keys: Nk − p keys, and for top-left Nq − p rows (the rows
  // i < p see only padding; row i ≥ p sees keys p … i, the top-left triangle shifted by p).
  double sum = 0;
  for (i64 b = 0; b < s.B; ++b) {
    const i64 p = padded_keys(s, b);
    Shape item = s;
    item.Nk = s.Nk - p;
    if (causal == Causal::top_left) item.Nq = s.Nq - p;
    sum += structure_pairs(item, causal);
  }
  return sum / double(s.B);
}

nlohmann::ordered_json shape_json(const Shape& s) {
  return {{"batch", s.B}, {"heads", s.Hq}, {"kv_heads", s.Hkv}, {"seq", s.Nq},
          {"kv_seq", s.Nk}, {"dim", s.Dk}, {"dim_v", s.Dv}};
}

double flops(const Shape& s, Causal causal, Pass pass, ExplicitMask mask) {
  const double forward =
      2.0 * double(s.Dk + s.Dv) * double(s.B) * double(s.Hq) * visible_pairs(s, causal, mask);
  return pass == Pass::backward ? 2.5 * forward : forward;
}

double kv_bytes(const Shape& s, Dtype t) {
  return (t == Dtype::f32 ? 4.0 : 2.0) * double(s.B) * double(s.Hkv) * double(s.Nk) * double(s.Dk + s.Dv);
}

bool is_decoding(const Shape& s) { return s.Nq <= 16; }

}  // namespace sdpa::bench
