// test_lab.cpp — the lab's statistics against closed forms at small sizes. Seeded;
// tolerances come from the estimators' standard errors, so a wrong formula fails.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "lab/experiments.hpp"
#include "lab/probe.hpp"
#include "sdpa/error.hpp"

namespace sdpa::lab {
namespace {

double num(const Cell& c) {
  if (const auto* d = std::get_if<double>(&c)) return *d;
  return static_cast<double>(std::get<std::int64_t>(c));
}
std::size_t col(const Table& t, const std::string& name) {
  for (std::size_t i = 0; i < t.columns.size(); ++i)
    if (t.columns[i] == name) return i;
  ADD_FAILURE() << "no column " << name;
  return 0;
}

TEST(Stats, VarianceStandardErrorMatchesItsSpread) {
  // 400 seeded repetitions of s² from n = 500 normals: the spread of s² across
  // repetitions must match the standard error each one reports. The spread's own
  // relative error is about 1/sqrt(2·400) = 3.5%; 15% is four of those.
  std::mt19937_64 rng(3);
  std::normal_distribution<double> z;
  std::vector<double> s2, se;
  for (int r = 0; r < 400; ++r) {
    std::vector<double> x(500);
    for (auto& v : x) v = 2.0 * z(rng);
    const Estimate e = variance_of(x);
    s2.push_back(e.value);
    se.push_back(e.se);
  }
  const double spread = std::sqrt(variance_of(s2).value), mean_se = mean_of(se).value;
  EXPECT_NEAR(spread / mean_se, 1.0, 0.15);
  // and the closed form for normals: sd(s²) = σ² sqrt(2/(n-1)) = 4·0.0633
  EXPECT_NEAR(mean_se, 4.0 * std::sqrt(2.0 / 499), 0.1 * 4.0 * std::sqrt(2.0 / 499));
}

TEST(Probe, ScoresAreTheScaledDotProducts) {
  const std::vector<float> q{1, 2, 3, -1, 0.5f, 2}, k{4, -1, 0.5f, 2, 2, -3};
  const auto s = scores(q, k, 2, 3, 0.5);
  EXPECT_NEAR(s[0], 0.5 * (4 - 2 + 1.5), 1e-6);
  EXPECT_NEAR(s[1], 0.5 * (-2 + 1 - 6), 1e-6);
}

TEST(Variance, MatchesClosedFormsWithTheirStandardErrors) {
  // For X = q·k with iid zero-mean unit-variance entries of fourth moment m4:
  //   Var X = d,  E X⁴ = d·m4² + 3d(d−1),  so sd(s²) ≈ sqrt((E X⁴ − d²)/n),
  // to first order: terms of order 1/n from estimating the mean are neglected, hence
  // the absolute slack of 8/n. The reported se is itself an estimate whose relative sd
  // is about ½·sd(m4_hat)/(E X⁴ − d²); worst here is Gaussian d = 1 (E X⁸ = 105²):
  // ½·sqrt((11025 − 81)/n)/8 = 3.3% at n = 40000, so 15% is about 4.5 of those.
  constexpr double n = 40000;
  Common c;
  c.seed = 5;
  c.samples = static_cast<std::int64_t>(n);
  const Table t = variance(c, {Dist::gaussian, Dist::uniform, Dist::rademacher}, 8);
  ASSERT_EQ(t.rows.size(), 12u);
  for (const auto& row : t.rows) {
    const Dist dist = parse_dist(std::get<std::string>(row[col(t, "dist")]));
    const double d = num(row[col(t, "d_k")]), var = num(row[col(t, "var")]);
    const double m4 = fourth_moment(dist), ex4 = d * m4 * m4 + 3 * d * (d - 1);
    const double se = std::sqrt((ex4 - d * d) / n);
    const double reported_se = (num(row[col(t, "var_hi")]) - var) / 1.959964;
    EXPECT_NEAR(var, d, 4 * se + 8 / n) << dist_name(dist) << " d=" << d;
    EXPECT_NEAR(reported_se, se, 0.15 * se + 8 / n) << dist_name(dist) << " d=" << d;
    EXPECT_NEAR(num(row[col(t, "var_scaled")]), var / d, 1e-4 * var / d);
  }
}

TEST(Variance, RademacherAtDk1HasZeroSpread) {
  // q·k = ±1 exactly: the population variance is 1 with no spread; what remains in the
  // estimate is the order-1/n effect of estimating the mean (a few units of 1/n).
  Common c;
  c.samples = 1000;
  const Table t = variance(c, {Dist::rademacher}, 1);
  EXPECT_NEAR(num(t.rows[0][col(t, "var")]), 1.0, 10.0 / 1000);
  EXPECT_LT(num(t.rows[0][col(t, "var_hi")]) - num(t.rows[0][col(t, "var")]), 10.0 / 1000);
  // whereas a Gaussian product at d_k = 1 has sd(s²) = sqrt(8/1000) = 0.089
  const Table g = variance(c, {Dist::gaussian}, 1);
  EXPECT_GT(num(g.rows[0][col(g, "var_hi")]) - num(g.rows[0][col(g, "var")]), 0.1);
}

TEST(Scaling, SeedExampleIsExact) {
  const Table t = scaling(Common{});
  EXPECT_NEAR(num(t.rows[0][col(t, "var_before")]), 8.0 / 3.0, 1e-12);
  EXPECT_NEAR(num(t.rows[0][col(t, "var_after")]), 2.0 / 3.0, 1e-12);
  for (const auto& r : t.rows) EXPECT_EQ(std::get<std::string>(r.back()), "holds");
}

TEST(General, EveryCaseMatchesTheFormula) {
  Common c;
  c.seed = 9;
  const Table t = general_formula(c);
  for (const auto& r : t.rows) {
    const double var = num(r[col(t, "var")]), expected = num(r[col(t, "var_expected")]);
    const double se = (num(r[col(t, "var_hi")]) - var) / 1.959964;
    EXPECT_NEAR(var, expected, 4 * se);
  }
}

TEST(Puzzle, TwoByTwoExpectationIsOnePointFive) {
  Common c;
  c.seed = 2;
  c.samples = 20000;
  const Table t = puzzle(c);
  const auto& r = t.rows[0];
  ASSERT_EQ(num(r[col(t, "n")]), 2);
  const double mean = num(r[col(t, "mean_var")]), se = (num(r[col(t, "mean_hi")]) - mean) / 1.959964;
  EXPECT_NEAR(mean, 1.5, 4 * se);
  // relative spread falls roughly like 1/n (entries ~ n, sd of their variance ~ constant)
  EXPECT_GT(num(t.rows[0][col(t, "relative_sd")]), 4 * num(t.rows[3][col(t, "relative_sd")]));
}

TEST(Matrix, SeedSizeGivesP) {
  Common c;
  c.samples = 2;
  const Table t = matrix(c);
  EXPECT_NEAR(num(t.rows[0][col(t, "mean")]), 111.0, 3.0);  // sd of one draw ≈ 0.63 (measured)
  EXPECT_NEAR(num(t.rows[1][col(t, "mean")]), 1.0, 0.03);
}

TEST(Softmax, LibraryReproducesTheQuotedValues) {
  const Table t = softmax_numbers();
  ASSERT_EQ(t.rows.size(), 16u);
  for (const auto& r : t.rows) EXPECT_EQ(std::get<std::string>(r.back()), "holds") << std::get<std::string>(r[1]);
}

std::vector<const std::vector<Cell>*> rows_where(const Table& t, const std::string& column, const std::string& value) {
  std::vector<const std::vector<Cell>*> out;
  for (const auto& r : t.rows)
    if (std::get<std::string>(r[col(t, column)]) == value) out.push_back(&r);
  return out;
}
double se_of(const Table& t, const std::vector<Cell>& r, const std::string& name) {
  return (num(r[col(t, name + "_hi")]) - num(r[col(t, name)])) / 1.959964;
}

TEST(Saturation, BoundsAndTheDk1Identity) {
  Common c;
  c.samples = 200;
  const Table t = saturation(c);
  // At d_k = 1, beta = 1 and beta = 1/sqrt(1) are the same experiment on the same draw.
  EXPECT_EQ(num(t.rows[0][col(t, "max_weight")]), num(t.rows[1][col(t, "max_weight")]));
  for (const auto& r : t.rows) {
    EXPECT_LE(num(r[col(t, "entropy")]), num(r[col(t, "ln_N")]) + 1e-9);  // entropy of N outcomes <= ln N
    EXPECT_GE(num(r[col(t, "max_weight")]), 1.0 / num(r[col(t, "N")]) - 1e-9);
  }
  // E[max of N standard normals] < sqrt(2 ln N) for every N (scaled rows, d_k = 64: scores close to N(0,1)).
  for (const auto* r : rows_where(t, "sweep", "N"))
    EXPECT_LT(num((*r)[col(t, "max_score")]), num((*r)[col(t, "sqrt_2lnN")]));
}

TEST(Gradients, NearlyUniformSoftmaxMatchesItsJacobian) {
  // At logit scale 0.01, p ≈ 1/N and J ≈ (I − 11ᵀ/N)/N; with u = V g (u_j ~ N(0, dv = 16))
  // ‖J u‖ ≈ ‖(I − 11ᵀ/N) u‖/N, whose mean is 4·E[χ_63]/64 ≈ 4·sqrt(62.5)/64 = 0.494.
  Common c;
  c.samples = 400;
  const Table t = gradients(c);
  const auto ls = rows_where(t, "sweep", "logit_scale");
  const auto& r = *ls.front();
  ASSERT_NEAR(num(r[col(t, "logit_std")]), 0.01, 1e-12);
  EXPECT_NEAR(num(r[col(t, "grad_logits")]), 4.0 * std::sqrt(62.5) / 64.0, 4 * se_of(t, r, "grad_logits") + 0.005);
  // dL/dq = beta * sum_j dL/ds_j k_j: at that scale it is ~100x smaller than at scale 1
  EXPECT_LT(num(r[col(t, "grad_q")]) * 50, num((*ls[3])[col(t, "grad_q")]));
}

TEST(Alternatives, ScoreStdIsBetaTimesSqrtDk) {
  // Given q, the N scores beta q·k_j have sd beta·‖q‖ ≈ beta·sqrt(d_k) (cosine: tau/sqrt(d_k)).
  const Table t = alternatives(Common{});
  for (const auto& r : t.rows) {
    const double d = num(r[col(t, "d_k")]), beta = num(r[col(t, "beta")]);
    if (d < 32) continue;  // small d: ‖q‖ and the 64-sample sd are too variable for 10%
    const bool cosine = std::get<std::string>(r[col(t, "policy")]).rfind("cosine", 0) == 0;
    const double want = cosine ? beta / std::sqrt(d) : beta * std::sqrt(d);
    EXPECT_NEAR(num(r[col(t, "score_std")]), want, 0.1 * want) << std::get<std::string>(r[0]) << " d=" << d;
  }
}

TEST(Projections, ClosedFormsIncludingTheTiedDiagonalMean) {
  const Table t = projections(Common{});
  for (const auto& r : t.rows) {
    const std::string name = std::get<std::string>(r[0]);
    const double var = num(r[col(t, "var")]), formula = num(r[col(t, "var_formula")]);
    if (name.find("tied") == std::string::npos && name.find("corr") == std::string::npos)
      EXPECT_NEAR(var, formula, 4 * se_of(t, r, "var")) << name;
    if (name == "diagonal (x' = x), W_k = W_q (tied)")  // E[q·k] = d_x d_k sigma_W^2 = 64·64·2/128
      EXPECT_NEAR(num(r[col(t, "mean")]), 64.0, 4 * se_of(t, r, "mean")) << name;
  }
}

TEST(Render, JsonIsAListOfRowObjectsAndCsvHasAHeader) {
  Table t{"x", "t", {"a", "b"}, {}};
  t.add({1.5, std::string("p,q")});
  t.add({std::int64_t{2}, std::string("r")});
  EXPECT_EQ(render(t, Format::json), "[{\"a\": 1.5, \"b\": \"p,q\"},\n {\"a\": 2, \"b\": \"r\"}]\n");
  EXPECT_EQ(render(t, Format::csv), "a,b\n1.5,\"p,q\"\n2,r\n");
  EXPECT_THROW(parse_format("xml"), Error);
}

}  // namespace
}  // namespace sdpa::lab
