// variance.cpp — claims 1 and 2: the variance of a dot product, and what dividing does.
#include <cmath>
#include <string>

#include <fmt/core.h>

#include "lab/experiments.hpp"
#include "lab/probe.hpp"
#include "sdpa/error.hpp"

namespace sdpa::lab {
namespace {

std::string verdict(double measured, double expected, double se) {
  return std::abs(measured - expected) <= kVerdictZ * se ? "holds" : "fails";
}

// n pairs of d-vectors, entries mu + sigma·X with X from `dist`.
void draw(Sampler& s, std::int64_t n, std::int64_t d, double mu, double sigma, std::vector<float>& out) {
  out.resize(static_cast<std::size_t>(n * d));
  for (auto& x : out) x = static_cast<float>(mu + sigma * s());
}

}  // namespace

Table variance(const Settings& c) {
  const std::int64_t max_dk = c.max_dk;
  if (max_dk < 1) throw Error("--max-dk: must be >= 1, got " + std::to_string(max_dk));
  const std::int64_t n = c.samples ? c.samples : 4000;
  if (n < 10) throw Error("--samples: need at least 10, got " + std::to_string(n));
  Table t{"variance",
          "q, k with independent zero-mean unit-variance entries: E[q.k] = 0, Var(q.k) = d_k, and 1 after dividing by "
          "sqrt(d_k) (95% CIs; verdict at |z| <= 4)",
          {"dist", "d_k", "samples", "mean", "mean_lo", "mean_hi", "var", "var_lo", "var_hi", "var_expected",
           "var_scaled", "var_scaled_lo", "var_scaled_hi", "z", "verdict"},
          {},
          {}};
  std::uint64_t stream = 0;
  if (c.dists.empty()) throw Error("--dist: give at least one distribution");
  for (Dist dist : c.dists)
    for (std::int64_t d = 1; d <= max_dk; d *= 2) {
      Sampler s(dist, c.seed * 1000003 + stream++);
      std::vector<float> q, k;
      draw(s, n, d, 0, 1, q);
      draw(s, n, d, 0, 1, k);
      const Estimate mean = mean_of(scores(q, k, n, d, 1.0, c.threads));
      const Estimate var = variance_of(scores(q, k, n, d, 1.0, c.threads));
      const Estimate scaled = variance_of(scores(q, k, n, d, 1.0 / std::sqrt(double(d)), c.threads));
      const double z = (var.value - double(d)) / var.se;
      const bool ok = verdict(var.value, double(d), var.se) == "holds" && verdict(mean.value, 0, mean.se) == "holds" &&
                      verdict(scaled.value, 1.0, scaled.se) == "holds";
      t.add({dist_name(dist), d, n, mean.value, mean.lo(), mean.hi(), var.value, var.lo(), var.hi(), double(d),
             scaled.value, scaled.lo(), scaled.hi(), z, ok ? "holds" : "fails"});
    }
  t.verdict = judge_variance(t);
  return t;
}

Verdict judge_variance(const Table& t) {
  Verdict v = verdict_of_rows(t);
  std::size_t big = 0;  // the largest d_k, first distribution
  for (std::size_t r = 0; r < t.rows.size(); ++r)
    if (t.number(r, "d_k") > t.number(big, "d_k")) big = r;
  v.measured = fmt::format(
      "{} of {} (distribution, d_k) rows agree; e.g. d_k = {}: Var = {:.4g} [{:.4g}, {:.4g}], scaled {:.3f}",
      rows_holding(t), t.rows.size(), t.number(big, "d_k"), t.number(big, "var"), t.number(big, "var_lo"),
      t.number(big, "var_hi"), t.number(big, "var_scaled"));
  v.tolerance = fmt::format(
      "every row: |measured − expected| ≤ {:g} standard errors for Var(q·k), E[q·k] and Var(q·k/√d_k) "
      "(family-wise ≈1.5% over the report)",
      kVerdictZ);
  return v;
}

Table scaling(const Settings& c) {
  Table t{"scaling",
          "dividing scores by c divides their variance by c^2 (seed 003's [2, 4, 6] example, then q.k at d_k = 64)",
          {"case", "c", "var_before", "var_after", "var_after_lo", "var_after_hi", "expected_after", "verdict"},
          {},
          {}};
  // The worked example: population variance of [2, 4, 6] and of [1, 2, 3].
  const double before = population_variance({2, 4, 6}), after = population_variance({1, 2, 3});
  t.add({"[2,4,6] / 2", 2.0, before, after, after, after, before / 4,
         std::abs(after - before / 4) <= kExampleRelTol * (before / 4) ? "holds" : "fails"});
  const std::int64_t n = c.samples ? c.samples : 20000, d = 64;
  Sampler s(Dist::gaussian, c.seed * 7919 + 1);
  std::vector<float> q, k;
  draw(s, n, d, 0, 1, q);
  draw(s, n, d, 0, 1, k);
  for (double cc : {1.0, 2.0, 8.0, 64.0}) {
    const Estimate v = variance_of(scores(q, k, n, d, 1.0 / cc, c.threads));
    t.add({fmt::format("q.k / {} at d_k = 64", cc), cc, variance_of(scores(q, k, n, d, 1.0, c.threads)).value, v.value,
           v.lo(), v.hi(), 64.0 / (cc * cc), verdict(v.value, 64.0 / (cc * cc), v.se)});
  }
  t.verdict = judge_scaling(t);
  return t;
}

Verdict judge_scaling(const Table& t) {
  Verdict v = verdict_of_rows(t);
  std::size_t by8 = 0;
  for (std::size_t r = 1; r < t.rows.size(); ++r)
    if (t.number(r, "c") == 8) by8 = r;
  v.measured =
      fmt::format("[2, 4, 6]: {:.4f} → {:.4f}; at d_k = 64, /8: {:.3f} (expected {:g})", t.number(0, "var_before"),
                  t.number(0, "var_after"), t.number(by8, "var_after"), t.number(by8, "expected_after"));
  v.tolerance =
      fmt::format("the worked example to {:.0f} units of 2⁻⁵³ (rounding only); sampled rows {:g} standard errors",
                  kExampleRelTol / 0x1p-53, kVerdictZ);
  return v;
}

Table general(const Settings& c) {
  const std::int64_t n = c.samples ? c.samples : 20000, d = 64;
  Table t{"general",
          "entries with means and other variances: Var(q.k) = d_k [(sx^2+mx^2)(sy^2+my^2) - mx^2 my^2], "
          "and how far 1/sqrt(d_k) then is from normalising (d_k = 64)",
          {"mu_x", "sigma_x", "mu_y", "sigma_y", "mean", "mean_expected", "var", "var_lo", "var_hi", "var_expected",
           "var_scaled", "var_scaled_expected", "verdict"},
          {},
          {}};
  const double cases[][4] = {{0, 1, 0, 1}, {1, 1, 0, 1},    {0.5, 1, 0.5, 1}, {0, 2, 0, 0.5},
                             {0, 2, 0, 2}, {1, 0.5, -1, 2}, {2, 1, 2, 1}};
  std::uint64_t stream = 0;
  for (const auto& cs : cases) {
    const double mx = cs[0], sx = cs[1], my = cs[2], sy = cs[3];
    Sampler s(Dist::gaussian, c.seed * 104729 + stream++);
    std::vector<float> q, k;
    draw(s, n, d, mx, sx, q);
    draw(s, n, d, my, sy, k);
    const Estimate mean = mean_of(scores(q, k, n, d, 1.0, c.threads));
    const Estimate var = variance_of(scores(q, k, n, d, 1.0, c.threads));
    const double per_term = (sx * sx + mx * mx) * (sy * sy + my * my) - mx * mx * my * my;
    const double expected = double(d) * per_term;
    const Estimate scaled = variance_of(scores(q, k, n, d, 1.0 / std::sqrt(double(d)), c.threads));
    const bool ok =
        verdict(var.value, expected, var.se) == "holds" && verdict(mean.value, d * mx * my, mean.se) == "holds";
    t.add({mx, sx, my, sy, mean.value, double(d) * mx * my, var.value, var.lo(), var.hi(), expected, scaled.value,
           per_term, ok ? "holds" : "fails"});
  }
  t.verdict = judge_general(t);
  return t;
}

Verdict judge_general(const Table& t) {
  Verdict v = verdict_of_rows(t);
  std::size_t worst = 0;  // the case 1/sqrt(d_k) normalises least
  for (std::size_t r = 0; r < t.rows.size(); ++r)
    if (t.number(r, "var_scaled_expected") > t.number(worst, "var_scaled_expected")) worst = r;
  v.measured = fmt::format(
      "{} of {} cases match; with μ = ({:g}, {:g}), σ = ({:g}, {:g}) the scaled variance is {:.2f} (formula {:.2f}), "
      "not 1",
      rows_holding(t), t.rows.size(), t.number(worst, "mu_x"), t.number(worst, "mu_y"), t.number(worst, "sigma_x"),
      t.number(worst, "sigma_y"), t.number(worst, "var_scaled"), t.number(worst, "var_scaled_expected"));
  v.tolerance = fmt::format("every case: Var(q·k) and E[q·k] within {:g} standard errors of the formula", kVerdictZ);
  return v;
}

}  // namespace sdpa::lab
