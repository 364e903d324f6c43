// saturation.cpp — claim 6: as d_k grows, unscaled attention's largest weight tends to 1
// and its entropy to 0, while scaled attention stays put; and against the number of keys N,
// the largest of N unit-variance scores grows like sqrt(2 ln N), so even scaled attention
// sharpens with sequence length.
#include <algorithm>
#include <cmath>
#include <string>

#include <fmt/core.h>

#include "lab/common_draw.hpp"
#include "lab/experiments.hpp"
#include "lab/probe.hpp"
#include "sdpa/error.hpp"

namespace sdpa::lab {

Table saturation(const Settings& c) {
  Table t{"saturation",
          "random q and N keys (standard normal): largest attention weight and entropy (nats; uniform = ln N) "
          "against d_k (N = 64) and against N (d_k = 64, scaled); max score against sqrt(2 ln N)",
          {"sweep", "d_k", "N", "scale", "max_weight", "max_weight_lo", "max_weight_hi", "entropy", "entropy_lo",
           "entropy_hi", "ln_N", "max_score", "sqrt_2lnN"},
          {},
          {}};
  const std::int64_t T0 = c.samples ? c.samples : 400;
  auto row = [&](const char* sweep, std::int64_t d, std::int64_t N, bool scaled) {
    const std::int64_t T = std::max<std::int64_t>(50, T0 * 64 / std::max<std::int64_t>(N, 64));  // bounded memory
    // One draw per (d_k, N): both temperatures see the same q and k (a paired comparison).
    std::mt19937_64 rng(c.seed * 2654435761u + static_cast<std::uint64_t>(d) * 1000003u +
                        static_cast<std::uint64_t>(N));
    const auto q = gaussian(rng, T * d), k = gaussian(rng, T * N * d);
    const double beta = scaled ? 1.0 / std::sqrt(double(d)) : 1.0;
    std::vector<double> maxw, ent;
    max_and_entropy(weights(q, k, T, N, d, beta, c.threads), T, N, maxw, ent);
    const auto s = scores_all(q, k, T, N, d, beta, c.threads);
    std::vector<double> smax(static_cast<std::size_t>(T), -INFINITY);
    for (std::int64_t i = 0; i < T * N; ++i)
      smax[static_cast<std::size_t>(i / N)] =
          std::max(smax[static_cast<std::size_t>(i / N)], s[static_cast<std::size_t>(i)]);
    const Estimate mw = mean_of(maxw), h = mean_of(ent), ms = mean_of(smax);
    t.add({sweep, d, N, scaled ? "1/sqrt(d_k)" : "1", mw.value, mw.lo(), mw.hi(), h.value, h.lo(), h.hi(),
           std::log(double(N)), ms.value, std::sqrt(2 * std::log(double(N)))});
  };
  for (std::int64_t d : {1, 4, 16, 64, 256, 1024})
    for (bool scaled : {false, true}) row("d_k", d, 64, scaled);
  for (std::int64_t N : {4, 16, 64, 256, 1024, 4096}) row("N", 64, N, true);
  t.verdict = judge_saturation(t);
  return t;
}

// Saturated, for a mean largest weight p̄ and mean entropy H over N keys: the softmax
// Jacobian J = diag(p) − ppᵀ is positive semi-definite with trace 1 − Σp² ≤ 1 − p_max²,
// so E[tr J] ≤ 1 − p̄² (Jensen). Uniform attention has tr J = 1 − 1/N and H = ln N.
// Saturated: both at most kSaturatedFraction of their uniform values.
Verdict judge_saturation(const Table& t) {
  std::vector<std::size_t> unscaled, scaled, by_n;
  for (std::size_t r = 0; r < t.rows.size(); ++r) {
    if (t.text(r, "sweep") == "N")
      by_n.push_back(r);
    else
      (t.text(r, "scale") == "1" ? unscaled : scaled).push_back(r);
  }
  if (unscaled.empty() || scaled.empty() || by_n.empty()) throw Error("saturation: the table lacks a sweep");
  const auto largest_dk = [&](const std::vector<std::size_t>& rs) {
    return *std::max_element(rs.begin(), rs.end(),
                             [&](std::size_t a, std::size_t b) { return t.number(a, "d_k") < t.number(b, "d_k"); });
  };
  const std::size_t u = largest_dk(unscaled), ref = largest_dk(scaled);
  const double n_keys = t.number(u, "N"), ln_n = t.number(u, "ln_N");
  const double min_max_weight = std::sqrt(1 - kSaturatedFraction * (1 - 1 / n_keys));
  const bool saturated =
      t.number(u, "max_weight") >= min_max_weight && t.number(u, "entropy") <= kSaturatedFraction * ln_n;

  // Scaled rows from kSaturationMinDk up against the largest d_k's, both estimates with their SEs
  // (independent draws: the standard errors combine in quadrature).
  const auto se = [&](std::size_t r, const char* col) {
    return (t.number(r, std::string(col) + "_hi") - t.number(r, std::string(col) + "_lo")) / (2 * kZ95);
  };
  double worst_z = 0, lo = INFINITY, hi = 0;
  for (std::size_t r : scaled) {
    if (t.number(r, "d_k") < kSaturationMinDk) continue;
    lo = std::min(lo, t.number(r, "max_weight"));
    hi = std::max(hi, t.number(r, "max_weight"));
    for (const char* col : {"max_weight", "entropy"})
      worst_z =
          std::max(worst_z, std::abs(t.number(r, col) - t.number(ref, col)) / std::hypot(se(r, col), se(ref, col)));
  }
  const bool steady = worst_z <= kVerdictZ;

  Verdict v;
  v.outcome = saturated && steady ? Outcome::holds : Outcome::fails;
  if (!saturated) v.scope = fmt::format("for the unscaled side: not saturated at d_k = {:g}", t.number(u, "d_k"));
  if (!steady)
    v.scope += fmt::format("{}for the scaled side: it depends on d_k (|z| = {:.1f})", saturated ? "" : "; ", worst_z);
  const double ratio_first = t.number(by_n.front(), "max_score") / t.number(by_n.front(), "sqrt_2lnN");
  const double ratio_last = t.number(by_n.back(), "max_score") / t.number(by_n.back(), "sqrt_2lnN");
  v.measured = fmt::format(
      "unscaled at d_k = {:g}: max weight {:.3f}, entropy {:.3f} (uniform {:.2f}); scaled max weight stays within "
      "{:.0f}% for d_k ≥ {} (largest |z| against d_k = {:g}: {:.1f}); max score / √(2 ln N) rises {:.2f} → {:.2f} from "
      "N = {:g} to {:g}",
      t.number(u, "d_k"), t.number(u, "max_weight"), t.number(u, "entropy"), ln_n, 100 * (hi - lo) / lo,
      kSaturationMinDk, t.number(ref, "d_k"), worst_z, ratio_first, ratio_last, t.number(by_n.front(), "N"),
      t.number(by_n.back(), "N"));
  v.tolerance = fmt::format(
      "unscaled, largest d_k: entropy ≤ {0:g}·ln N and max weight ≥ √(1 − {0:g}(1 − 1/N)) = {1:.3f} (softmax "
      "Jacobian trace ≤ {0:g} of uniform's); scaled, d_k ≥ {2}: max weight and entropy within {3:g} standard errors "
      "of the largest d_k's; the N sweep is shown, not judged",
      kSaturatedFraction, min_max_weight, kSaturationMinDk, kVerdictZ);
  return v;
}

}  // namespace sdpa::lab
