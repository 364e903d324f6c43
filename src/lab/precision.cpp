// precision.cpp — claim 10 (no seed's: they argue about magnitudes, never rounding): what
// dividing by √d_k does to the error of attention computed in fp16 and bf16. Each row runs
// the library's naive 16-bit attention (sdpa::reference::forward_naive: inputs, P and out in
// the dtype; scores kept in fp32 as FlashAttention does, or stored in the dtype as a plain
// `softmax(q @ k.T * scale) @ v` does) against its fp64 reference (Kernel::reference), for
// d_k up to 4096, scaled (β = 1/√d_k) and unscaled (β = 1) on the same draws.
#include <algorithm>
#include <cmath>
#include <string>

#include <fmt/core.h>

#include "lab/common_draw.hpp"
#include "lab/experiments.hpp"
#include "sdpa/error.hpp"
#include "sdpa/reference.hpp"

namespace sdpa::lab {
namespace {

constexpr std::int64_t kKeys = 64, kDv = 64;

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(static_cast<double>(a[i]) - b[i]));
  return m;
}

}  // namespace

Table precision(const Settings& c) {
  Table t{"precision",
          "attention in fp16 and bf16 (the library's naive 16-bit emulation) against fp64, scaled and unscaled, "
          "scores in fp32 or stored in the dtype: max |out error| in units of u·max|v| (u: the dtype's unit roundoff)",
          {"dtype", "d_k", "scale", "scores", "u", "max_v", "err", "err_units"},
          {},
          {}};
  const std::int64_t T = c.samples ? c.samples : 64;  // queries per draw
  for (const Dtype dt : {Dtype::fp16, Dtype::bf16}) {
    for (std::int64_t d = 16; d <= 4096; d *= 4) {
      // One draw per (dtype, d_k), rounded to the dtype: every row of it sees the same inputs.
      std::mt19937_64 rng(c.seed * 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(d) * 131 +
                          static_cast<std::uint64_t>(dt));
      auto q = gaussian(rng, T * d), k = gaussian(rng, kKeys * d), v = gaussian(rng, kKeys * kDv);
      for (auto* x : {&q, &k, &v})
        for (float& e : *x) e = round_to(dt, e);
      double max_v = 0;
      for (float e : v) max_v = std::max(max_v, static_cast<double>(std::abs(e)));
      const auto qv = contiguous<const float>(q.data(), {1, 1, T, d});
      const auto kv = contiguous<const float>(k.data(), {1, 1, kKeys, d});
      const auto vv = contiguous<const float>(v.data(), {1, 1, kKeys, kDv});
      for (const bool scaled : {true, false}) {
        Options opt;
        opt.scale = scaled ? 1.0 / std::sqrt(static_cast<double>(d)) : 1.0;
        opt.threads = c.threads;
        std::vector<float> gold(static_cast<std::size_t>(T * kDv)), out(gold.size());
        Options ref = opt;
        ref.kernel = Kernel::reference;  // fp64 accumulation
        forward(qv, kv, vv, contiguous(gold.data(), {1, 1, T, kDv}), View3<float>{}, ref);
        for (const auto stored : {reference::NaiveScores::fp32, reference::NaiveScores::dtype}) {
          reference::forward_naive(dt, qv, kv, vv, contiguous(out.data(), {1, 1, T, kDv}), View3<float>{}, opt, stored);
          const double err = max_abs_diff(out, gold), u = unit_roundoff(dt);
          t.add({dtype_name(dt), d, scaled ? "1/sqrt(d_k)" : "1", stored == reference::NaiveScores::fp32 ? "fp32" : "dtype",
                 u, max_v, err, err / (u * max_v)});
        }
      }
    }
  }
  t.verdict = judge_precision(t);
  return t;
}

// The bound, in units of u·max|v| (docs/lab.md, "precision"): rounding P costs u·p_ij per weight
// (≤ u·max|v| in out), rounding out u·|out| ≤ u·max|v|; scores stored in the dtype perturb each
// s_ij by at most u·|s_ij| ≤ u·smax, which moves out by Σ_j p_ij (δs_ij − δs̄_i) v_j ≤ 2u·smax·max|v|.
Verdict judge_precision(const Table& t) {
  double worst_bounded = 0;  // over the rows the bound covers: scaled, or scores in fp32
  std::string worst_row;
  struct Growth {
    double first = 0, last = 0, d_first = 0, d_last = 0;
  };
  std::vector<std::pair<std::string, Growth>> growth;  // unscaled, scores in the dtype, per dtype
  for (std::size_t r = 0; r < t.rows.size(); ++r) {
    const double units = t.number(r, "err_units"), d = t.number(r, "d_k");
    const bool unscaled_dtype = t.text(r, "scale") == "1" && t.text(r, "scores") == "dtype";
    if (!unscaled_dtype) {
      if (units > worst_bounded) {
        worst_bounded = units;
        worst_row = fmt::format("{}, d_k = {:g}, β = {}, scores {}", t.text(r, "dtype"), d, t.text(r, "scale"),
                                t.text(r, "scores"));
      }
      continue;
    }
    auto it = std::find_if(growth.begin(), growth.end(), [&](const auto& g) { return g.first == t.text(r, "dtype"); });
    if (it == growth.end()) {
      growth.push_back({t.text(r, "dtype"), {units, units, d, d}});
      continue;
    }
    if (d < it->second.d_first) it->second.first = units, it->second.d_first = d;
    if (d > it->second.d_last) it->second.last = units, it->second.d_last = d;
  }
  if (growth.empty() || worst_row.empty()) throw Error("precision: the table lacks scaled or unscaled rows");
  const double bound = 2 + 2 * kPrecisionScoreMax;
  const bool bounded = worst_bounded <= bound;
  bool grows = true;
  std::string growth_text;
  for (const auto& [name, g] : growth) {
    const bool ok = g.last >= kPrecisionGrowth * g.first && g.last > bound;
    grows = grows && ok;
    growth_text += fmt::format("{}{} {:.1f} → {:.1f} (×{:.1f}, d_k {:g} → {:g})", growth_text.empty() ? "" : "; ",
                               name, g.first, g.last, g.last / g.first, g.d_first, g.d_last);
  }
  Verdict v;
  v.outcome = bounded && grows ? Outcome::holds : Outcome::fails;
  if (!bounded) v.scope = fmt::format("for the bounded rows: {:.1f} units at {}", worst_bounded, worst_row);
  if (!grows) v.scope += std::string(bounded ? "" : "; ") + "for the unscaled rows with 16-bit scores: no growth";
  v.measured = fmt::format(
      "scaled, or scores in fp32: at most {:.2f} units of u·max|v| ({}); unscaled with the scores stored in the "
      "dtype: {}",
      worst_bounded, worst_row, growth_text);
  v.tolerance = fmt::format(
      "scaled rows and fp32-score rows ≤ 2 + 2·smax = {:g} units (P and out rounded: 2; scores rounded: 2·smax with "
      "smax = {:g} bounding the scaled |s|); unscaled 16-bit-score rows: the largest d_k's error ≥ {:g}× the "
      "smallest's (√d_k predicts {:g}× before saturation) and above {:g} units",
      bound, kPrecisionScoreMax, kPrecisionGrowth, std::sqrt(4096.0 / 16.0), bound);
  return v;
}

}  // namespace sdpa::lab
