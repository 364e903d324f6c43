// matrix.cpp — claims 3 and 4: the variance of the entries of a matrix product,
// at the seeds' 1111×111 size and at the 2×2 size that puzzled one of them.
//
// For A (m×p) and B (p×n) with independent standard normal entries, each entry of AB
// is a sum of p products: mean 0, variance p. Two entries sharing a row (or a column)
// are uncorrelated (E[a_il b_lj a_im b_mk] = 0 unless l = m and j = k), so numpy's
// .var() over the N = m·n entries — a population variance, dividing by N around the
// sample mean — has expectation (1 − 1/N)·p. For 2×2 that is 0.75·2 = 1.5.
#include <algorithm>
#include <cmath>
#include <random>

#include <fmt/core.h>

#include "lab/experiments.hpp"
#include "sdpa/sdpa.hpp"

namespace sdpa::lab {
namespace {

// Entries of C_t = A_t · B_t for T trials, A_t (m×p) row-major in `a`, B_t given
// transposed in `bt` (n×p: row j is column j of B_t). Computed by sdpa::forward with
// one key per head: lse[t, j, i] = β·(row i of A_t)·(column j of B_t), β = `scale`.
std::vector<double> products(const std::vector<float>& a, const std::vector<float>& bt, std::int64_t T, std::int64_t m,
                             std::int64_t p, std::int64_t n, double scale, int threads) {
  std::vector<float> v(static_cast<std::size_t>(T * n), 0.0f), out(static_cast<std::size_t>(T * n * m)),
      lse(static_cast<std::size_t>(T * n * m));
  Options opt;
  opt.scale = scale;
  opt.threads = threads;
  const View4<const float> q{a.data(), {T, n, m, p}, {m * p, 0, p, 1}};  // the same A_t for every head j
  const View4<const float> k{bt.data(), {T, n, 1, p}, {n * p, p, p, 1}};
  forward(q, k, contiguous<const float>(v.data(), {T, n, 1, 1}), contiguous(out.data(), {T, n, m, 1}),
          contiguous(lse.data(), {T, n, m}), opt);
  return {lse.begin(), lse.end()};
}

std::vector<float> normals(std::mt19937_64& rng, std::int64_t count) {
  std::normal_distribution<double> z;
  std::vector<float> x(static_cast<std::size_t>(count));
  for (auto& e : x) e = static_cast<float>(z(rng));
  return x;
}

double quantile(std::vector<double> x, double q) {
  std::sort(x.begin(), x.end());
  const double pos = q * static_cast<double>(x.size() - 1);
  const auto i = static_cast<std::size_t>(pos);
  const double f = pos - static_cast<double>(i);
  return i + 1 < x.size() ? x[i] * (1 - f) + x[i + 1] * f : x[i];
}

}  // namespace

Table matrix(const Settings& c) {
  const std::int64_t m = 1111, p = 111, reps = c.samples ? c.samples : 12;
  Table t{"matrix",
          "A (1111x111) and B (111x1111) standard normal: var(AB) ~ 111 and ~ 1 after dividing by sqrt(111) "
          "(seed 001 printed 110.56 and 0.996)",
          {"statistic", "reps", "mean", "lo", "hi", "sd", "expected", "seed_value", "seed_value_z", "verdict"},
          {},
          {}};
  std::vector<double> var_raw, var_scaled;
  for (std::int64_t r = 0; r < reps; ++r) {
    std::mt19937_64 rng(c.seed * 15485863 + static_cast<std::uint64_t>(r));
    const auto a = normals(rng, m * p), bt = normals(rng, m * p);
    var_raw.push_back(population_variance(products(a, bt, 1, m, p, m, 1.0, c.threads)));
    var_scaled.push_back(population_variance(products(a, bt, 1, m, p, m, 1.0 / std::sqrt(double(p)), c.threads)));
  }
  const double N = double(m) * double(m);
  struct Stat {
    const char* name;
    const std::vector<double>* xs;
    double expected, seed_value;
  };
  for (const Stat& st : {Stat{"var(AB)", &var_raw, (1 - 1 / N) * double(p), 110.5603610976103},
                         Stat{"var(AB/sqrt(111))", &var_scaled, 1 - 1 / N, 0.9960392891676604}}) {
    const auto& [name, xs, expected, seed_value] = st;
    const Estimate e = mean_of(*xs);
    const double sd = std::sqrt(variance_of(*xs).value);
    const double z_seed = (seed_value - e.value) / sd;  // where one draw like the seed's falls among ours
    t.add({std::string(name), reps, e.value, e.lo(), e.hi(), sd, expected, seed_value, z_seed,
           std::abs(e.value - expected) <= kVerdictZ * e.se && std::abs(z_seed) <= kVerdictZ ? "holds" : "fails"});
  }
  t.verdict = judge_matrix(t);
  return t;
}

Verdict judge_matrix(const Table& t) {
  Verdict v = verdict_of_rows(t);
  v.measured = fmt::format(
      "{:.2f} [{:.2f}, {:.2f}] (sd of one draw {:.2f}); scaled {:.4f}; the seed's 110.56 lies {:+.2f} sd from our mean",
      t.number(0, "mean"), t.number(0, "lo"), t.number(0, "hi"), t.number(0, "sd"), t.number(1, "mean"),
      t.number(0, "seed_value_z"));
  v.tolerance = fmt::format("{0:g} standard errors (mean), {0:g} sd (the seed's single draw)", kVerdictZ);
  return v;
}

Table puzzle(const Settings& c) {
  Table t{"puzzle",
          "the 2x2 experiment that printed 1.6: numpy's var() of the n*n entries of A@B over many trials; "
          "expected (1 - 1/n^2)*n, i.e. 1.5 for 2x2 (unscaled), and how the spread shrinks with n",
          {"n", "trials", "mean_var", "mean_lo", "mean_hi", "expected_mean", "sd_var", "relative_sd", "q05", "q50",
           "q95", "fraction_at_or_below_1.6", "verdict"},
          {},
          {}};
  for (std::int64_t n : {2, 4, 8, 16, 32, 64}) {
    const std::int64_t T = c.samples ? c.samples : std::max<std::int64_t>(200, 40000 / (n * n));
    std::mt19937_64 rng(c.seed * 32452843 + static_cast<std::uint64_t>(n));
    const auto a = normals(rng, T * n * n), bt = normals(rng, T * n * n);
    const auto entries = products(a, bt, T, n, n, n, 1.0, c.threads);
    std::vector<double> vars(static_cast<std::size_t>(T));
    for (std::int64_t tr = 0; tr < T; ++tr)
      vars[static_cast<std::size_t>(tr)] =
          population_variance(std::vector<double>(entries.begin() + tr * n * n, entries.begin() + (tr + 1) * n * n));
    const Estimate e = mean_of(vars);
    const double sd = std::sqrt(variance_of(vars).value), expected = (1.0 - 1.0 / double(n * n)) * double(n);
    double below = std::nan("");
    if (n == 2) below = double(std::count_if(vars.begin(), vars.end(), [](double x) { return x <= 1.6; })) / double(T);
    t.add({n, T, e.value, e.lo(), e.hi(), expected, sd, sd / double(n), quantile(vars, 0.05), quantile(vars, 0.5),
           quantile(vars, 0.95), below, std::abs(e.value - expected) <= kVerdictZ * e.se ? "holds" : "fails"});
  }
  t.verdict = judge_puzzle(t);
  return t;
}

Verdict judge_puzzle(const Table& t) {
  Verdict v = verdict_of_rows(t);
  v.measured = fmt::format(
      "over {} draws numpy's var() of the 4 entries has mean {:.3f} (expected {:g}), median {:.2f}, 5–95% range "
      "[{:.2f}, {:.2f}]; {:.0f}% of draws print ≤ 1.6",
      t.number(0, "trials"), t.number(0, "mean_var"), t.number(0, "expected_mean"), t.number(0, "q50"),
      t.number(0, "q05"), t.number(0, "q95"), 100 * t.number(0, "fraction_at_or_below_1.6"));
  v.tolerance = fmt::format("mean of var() within {:g} standard errors of (1 − 1/n²)·n at every n", kVerdictZ);
  return v;
}

}  // namespace sdpa::lab
