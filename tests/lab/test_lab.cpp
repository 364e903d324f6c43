// test_lab.cpp — the lab's statistics against closed forms at small sizes, and its
// verdicts: every experiment of the registry returns one, and each judge says "fails"
// when handed a table with the deciding number broken. Seeded; tolerances come from the
// estimators' standard errors, so a wrong formula fails.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <set>
#include <string>

#include "lab/experiments.hpp"
#include "lab/probe.hpp"
#include "lab/registry.hpp"
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
  Settings c;
  c.seed = 5;
  c.samples = static_cast<std::int64_t>(n);
  c.dists = {Dist::gaussian, Dist::uniform, Dist::rademacher};
  c.max_dk = 8;
  const Table t = variance(c);
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
  Settings c;
  c.samples = 1000;
  c.max_dk = 1;
  c.dists = {Dist::rademacher};
  const Table t = variance(c);
  EXPECT_NEAR(num(t.rows[0][col(t, "var")]), 1.0, 10.0 / 1000);
  EXPECT_LT(num(t.rows[0][col(t, "var_hi")]) - num(t.rows[0][col(t, "var")]), 10.0 / 1000);
  // whereas a Gaussian product at d_k = 1 has sd(s²) = sqrt(8/1000) = 0.089
  c.dists = {Dist::gaussian};
  const Table g = variance(c);
  EXPECT_GT(num(g.rows[0][col(g, "var_hi")]) - num(g.rows[0][col(g, "var")]), 0.1);
}

TEST(Scaling, SeedExampleIsExact) {
  const Table t = scaling(Settings{});
  EXPECT_NEAR(num(t.rows[0][col(t, "var_before")]), 8.0 / 3.0, 1e-12);
  EXPECT_NEAR(num(t.rows[0][col(t, "var_after")]), 2.0 / 3.0, 1e-12);
  for (const auto& r : t.rows) EXPECT_EQ(std::get<std::string>(r.back()), "holds");
}

TEST(General, EveryCaseMatchesTheFormula) {
  Settings c;
  c.seed = 9;
  const Table t = general(c);
  for (const auto& r : t.rows) {
    const double var = num(r[col(t, "var")]), expected = num(r[col(t, "var_expected")]);
    const double se = (num(r[col(t, "var_hi")]) - var) / 1.959964;
    EXPECT_NEAR(var, expected, 4 * se);
  }
}

TEST(Puzzle, TwoByTwoExpectationIsOnePointFive) {
  Settings c;
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
  Settings c;
  c.samples = 2;
  const Table t = matrix(c);
  EXPECT_NEAR(num(t.rows[0][col(t, "mean")]), 111.0, 3.0);  // sd of one draw ≈ 0.63 (measured)
  EXPECT_NEAR(num(t.rows[1][col(t, "mean")]), 1.0, 0.03);
}

TEST(Softmax, LibraryReproducesTheQuotedValues) {
  const Table t = softmax_numbers(Settings{});
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
  Settings c;
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
  Settings c;
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
  const Table t = alternatives(Settings{});
  for (const auto& r : t.rows) {
    const double d = num(r[col(t, "d_k")]), beta = num(r[col(t, "beta")]);
    if (d < 32) continue;  // small d: ‖q‖ and the 64-sample sd are too variable for 10%
    const bool cosine = std::get<std::string>(r[col(t, "policy")]).rfind("cosine", 0) == 0;
    const double want = cosine ? beta / std::sqrt(d) : beta * std::sqrt(d);
    EXPECT_NEAR(num(r[col(t, "score_std")]), want, 0.1 * want) << std::get<std::string>(r[0]) << " d=" << d;
  }
}

TEST(Projections, ClosedFormsIncludingTheTiedDiagonalMean) {
  const Table t = projections(Settings{});
  for (const auto& r : t.rows) {
    const std::string name = std::get<std::string>(r[0]);
    const double var = num(r[col(t, "var")]), formula = num(r[col(t, "var_formula")]);
    if (name.find("tied") == std::string::npos && name.find("corr") == std::string::npos)
      EXPECT_NEAR(var, formula, 4 * se_of(t, r, "var")) << name;
    if (name == "diagonal (x' = x), W_k = W_q (tied)")  // E[q·k] = d_x d_k sigma_W^2 = 64·64·2/128
      EXPECT_NEAR(num(r[col(t, "mean")]), 64.0, 4 * se_of(t, r, "mean")) << name;
  }
}

TEST(Render, JsonCarriesTheVerdictAndRowObjectsAndCsvHasAHeader) {
  Table t{"x", "t", {"a", "b"}, {}, {}};
  t.add({1.5, std::string("p,\"q\"")});
  t.add({std::int64_t{2}, std::string("r")});
  t.add({std::nan(""), std::string("s")});
  t.verdict = {Outcome::holds_only, "for small a", "a is small", "a ≤ 2", "exact"};
  const auto j = nlohmann::json::parse(render(t, Format::json));
  EXPECT_EQ(j["name"], "x");
  EXPECT_EQ(j["verdict"], "holds only for small a");
  EXPECT_EQ(j["outcome"], "holds only");
  EXPECT_EQ(j["expected"], "a is small");
  EXPECT_EQ(j["measured"], "a ≤ 2");
  EXPECT_EQ(j["tolerance"], "exact");
  EXPECT_EQ(j["columns"], nlohmann::json::array({"a", "b"}));
  EXPECT_EQ(j["rows"][0]["a"], 1.5);
  EXPECT_EQ(j["rows"][0]["b"], "p,\"q\"");
  EXPECT_TRUE(j["rows"][1]["a"].is_number_integer());
  EXPECT_TRUE(j["rows"][2]["a"].is_null());  // NaN has no JSON spelling
  const std::string text = render(t, Format::table);
  EXPECT_NE(text.find("\nverdict: holds only for small a\n"), std::string::npos) << text;
  EXPECT_NE(text.find("tolerance: exact"), std::string::npos) << text;
  EXPECT_EQ(render(t, Format::csv), "a,b\n1.5,\"p,\"\"q\"\"\"\n2,r\nnan,s\n");
  EXPECT_THROW(parse_format("xml"), Error);
}

// ---- the registry and the verdicts ------------------------------------------------------

TEST(Registry, EveryExperimentReturnsAVerdictUnderItsOwnName) {
  std::set<std::string> names;
  for (const Experiment& e : experiments()) {
    EXPECT_TRUE(names.insert(std::string(e.name)).second) << "twice: " << e.name;
    EXPECT_FALSE(e.help.empty() || e.claim.empty() || e.heading.empty() || e.seeds.empty()) << e.name;
    Settings s;
    s.samples = e.name == "matrix" ? 2 : 60;  // small: this checks the plumbing, not the claims
    s.max_dk = 8;
    const Table t = run(e, s);
    EXPECT_EQ(t.name, e.name);
    EXPECT_EQ(t.verdict.expected, e.claim);
    EXPECT_FALSE(t.verdict.measured.empty()) << e.name;
    EXPECT_FALSE(t.verdict.tolerance.empty()) << e.name;
    EXPECT_FALSE(t.rows.empty()) << e.name;
    const auto j = to_json(t);
    EXPECT_EQ(j["verdict"], t.verdict.text());
  }
  EXPECT_EQ(names.size(), 13u);
  EXPECT_EQ(&find_experiment("general"), &experiments()[2]);
  try {
    find_experiment("varience");
    ADD_FAILURE() << "an unknown name must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("known: variance, scaling, general"), std::string::npos) << e.what();
  }
}

// A negative sample or thread count is refused by the library before any work, for run and
// report alike, with the setting named: the CLI and Python pass it through unchecked.
TEST(Registry, SettingsAreCheckedBeforeAnyWork) {
  const auto message = [](auto&& call) {
    try {
      call();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  bool progressed = false;
  Settings s;
  s.samples = -1;
  EXPECT_EQ(message([&] { check(s); }).rfind("samples: must be >= 0", 0), 0u);
  EXPECT_EQ(message([&] { run("softmax", s); }).rfind("samples: must be >= 0", 0), 0u);
  EXPECT_EQ(message([&] {
              report(s, [&](std::size_t, std::size_t, const Experiment&) { progressed = true; });
            }).rfind("samples: must be >= 0", 0),
            0u);
  EXPECT_FALSE(progressed);  // refused before the first experiment started
  s.samples = 0, s.threads = -2;
  EXPECT_EQ(message([&] { run("softmax", s); }).rfind("threads: must be >= 0", 0), 0u);
  s.threads = 0;
  EXPECT_NO_THROW(check(s));
}

// Sets one numeric cell (by column name) of the first row where `where` holds.
void set_cell(Table& t, const std::string& column, double value, const std::function<bool(std::size_t)>& where) {
  for (std::size_t r = 0; r < t.rows.size(); ++r)
    if (where(r)) {
      t.rows[r][t.column(column)] = value;
      return;
    }
  ADD_FAILURE() << "no row to break in " << t.name;
}
void set_text(Table& t, const std::string& column, const std::string& value,
              const std::function<bool(std::size_t)>& where) {
  for (std::size_t r = 0; r < t.rows.size(); ++r)
    if (where(r)) {
      t.rows[r][t.column(column)] = value;
      return;
    }
  ADD_FAILURE() << "no row to break in " << t.name;
}

TEST(Verdicts, RowJudgedTablesFailWithOneRowBroken) {
  Settings s;
  s.samples = 500;
  s.max_dk = 16;
  struct Case {
    Table (*measure)(const Settings&);
    Verdict (*judge)(const Table&);
  };
  for (auto [measure, judge] :
       {Case{variance, judge_variance}, Case{scaling, judge_scaling}, Case{general, judge_general},
        Case{puzzle, judge_puzzle}, Case{softmax_numbers, judge_softmax}}) {
    Table t = measure(s);
    ASSERT_EQ(t.verdict.outcome, Outcome::holds) << t.name << ": " << t.verdict.measured;
    set_text(t, "verdict", "fails", [](std::size_t r) { return r == 1; });
    const Verdict v = judge(t);
    EXPECT_EQ(v.outcome, Outcome::fails) << t.name;
    EXPECT_EQ(v.text(), "fails in 1 of " + std::to_string(t.rows.size()) + " rows") << t.name;
  }
}

TEST(Verdicts, ScalingExampleIsJudgedToRounding) {
  // The worked example's row: [1, 2, 3] against a quarter of [2, 4, 6]'s variance, to
  // kExampleRelTol. One part in 10¹² is far beyond rounding and must fail the row.
  const Table t = scaling(Settings{});
  EXPECT_EQ(t.text(0, "verdict"), "holds");
  EXPECT_LE(std::abs(t.number(0, "var_after") - t.number(0, "expected_after")),
            kExampleRelTol * t.number(0, "expected_after"));
}

TEST(Verdicts, SaturationNeedsBothSides) {
  Settings s;
  s.samples = 200;
  const Table good = saturation(s);
  ASSERT_EQ(good.verdict.outcome, Outcome::holds) << good.verdict.measured;
  const auto unscaled_last = [&](std::size_t r) {
    return good.text(r, "scale") == "1" && good.number(r, "d_k") == 1024;
  };
  // The threshold derived from kSaturatedFraction at N = 64: sqrt(1 − 0.2·63/64) = 0.896.
  EXPECT_NE(good.verdict.tolerance.find("0.896"), std::string::npos) << good.verdict.tolerance;
  Table t = good;
  set_cell(t, "max_weight", 0.85, unscaled_last);  // not saturated: the Jacobian keeps 28% of its trace
  EXPECT_EQ(judge_saturation(t).outcome, Outcome::fails);
  t = good;
  set_cell(t, "entropy", 0.25 * good.number(0, "ln_N"), unscaled_last);
  EXPECT_EQ(judge_saturation(t).outcome, Outcome::fails);
  t = good;  // a scaled row 10 standard errors off the largest d_k's
  const auto scaled16 = [&](std::size_t r) { return good.text(r, "scale") != "1" && good.number(r, "d_k") == 16; };
  for (std::size_t r = 0; r < good.rows.size(); ++r)
    if (scaled16(r)) {
      const double se = (good.number(r, "max_weight_hi") - good.number(r, "max_weight_lo")) / (2 * kZ95);
      set_cell(t, "max_weight", good.number(r, "max_weight") + 10 * se, scaled16);
    }
  const Verdict v = judge_saturation(t);
  EXPECT_EQ(v.outcome, Outcome::fails);
  EXPECT_NE(v.scope.find("scaled side"), std::string::npos) << v.scope;
}

TEST(Verdicts, GradientsNameWhichGradientVanishes) {
  Settings s;
  s.samples = 150;
  const Table good = gradients(s);
  ASSERT_EQ(good.verdict.text(), "holds only for the gradient w.r.t. the logits (and q·k)") << good.verdict.measured;
  const auto unscaled_last = [&](std::size_t r) {
    return good.text(r, "sweep") == "d_k" && good.number(r, "beta") == 1 && good.number(r, "d_k") == 1024;
  };
  double scaled_logits = 0;
  for (std::size_t r = 0; r < good.rows.size(); ++r)
    if (good.text(r, "sweep") == "d_k" && good.number(r, "d_k") == 1024 && good.number(r, "beta") != 1)
      scaled_logits = good.number(r, "grad_logits");
  Table t = good;  // the unscaled logit gradient as large as the scaled one: nothing vanishes
  set_cell(t, "grad_logits", scaled_logits, unscaled_last);
  EXPECT_EQ(judge_gradients(t).outcome, Outcome::fails);
  t = good;  // and with the q gradient tiny too, the claim holds whole
  set_cell(t, "grad_q", 1e-3, unscaled_last);
  EXPECT_EQ(judge_gradients(t).outcome, Outcome::holds);
}

TEST(Verdicts, AlternativesFailOffTheClosedForm) {
  Settings s;
  s.samples = 200;
  const Table good = alternatives(s);
  ASSERT_EQ(good.verdict.outcome, Outcome::holds) << good.verdict.measured;
  // The closed form at d_k = 2, β = 1/√2: E‖q‖/√2 = Γ(3/2) = √π/2, times c₄(64).
  const double c4_64 = std::sqrt(2.0 / 63) * std::exp(std::lgamma(32.0) - std::lgamma(31.5));
  EXPECT_NEAR(good.number(1, "score_std_expected"), std::sqrt(M_PI) / 2 * c4_64, 1e-12);
  Table t = good;
  set_text(t, "verdict", "fails", [&](std::size_t r) { return good.text(r, "policy") == "1/sqrt(d_k)"; });
  EXPECT_EQ(judge_alternatives(t).outcome, Outcome::fails);
}

TEST(Verdicts, ProjectionsScopeFollowsWhichRowsFail) {
  Settings s;
  s.samples = 600;
  const Table good = projections(s);
  ASSERT_EQ(good.verdict.text(), "holds only for independent weights; Xavier only when d_x = d_k")
      << good.verdict.measured;
  const auto named = [&](const char* name) {
    return [&good, name](std::size_t r) { return good.text(r, "case") == name; };
  };
  Table t = good;  // the diagonal with independent weights failing too: distinct tokens join the scope
  set_text(t, "verdict", "fails", named("diagonal (x' = x), independent W"));
  EXPECT_EQ(judge_projections(t).text(),
            "holds only for independent weights and distinct tokens; Xavier only when d_x = d_k");
  t = good;  // a row within every assumption failing: no scope saves the claim
  set_text(t, "verdict", "fails", named("N(0, 0.02^2) weights"));
  EXPECT_EQ(judge_projections(t).outcome, Outcome::fails);
  t = good;  // Xavier at d_x = d_k off by 2x: "Xavier brings it back" fails
  set_cell(t, "var_scaled", 2.0, named("Xavier, d_x = d_k"));
  EXPECT_EQ(judge_projections(t).outcome, Outcome::fails);
  t = good;  // Xavier at d_x = 4 d_k normalising as well: no Xavier restriction left
  set_cell(t, "var_scaled", 1.0, named("Xavier, d_x = 4 d_k"));
  EXPECT_EQ(judge_projections(t).text(), "holds only for independent weights");
}

TEST(Verdicts, PrecisionFailsWhenScalingStopsHelping) {
  const Table good = precision(Settings{});
  ASSERT_EQ(good.verdict.outcome, Outcome::holds) << good.verdict.measured;
  const auto where = [&good](const char* scale, const char* scores) {
    return [&good, scale, scores](std::size_t r) { return good.text(r, "scale") == scale && good.text(r, "scores") == scores; };
  };
  Table t = good;  // a scaled row beyond the bound: the rounding error depends on more than u
  set_cell(t, "err_units", 2 + 2 * kPrecisionScoreMax + 1, where("1/sqrt(d_k)", "dtype"));
  EXPECT_EQ(judge_precision(t).outcome, Outcome::fails);
  t = good;  // unscaled 16-bit scores as accurate as scaled ones at every d_k: no growth
  for (std::size_t r = 0; r < t.rows.size(); ++r)
    if (where("1", "dtype")(r)) t.rows[r][t.column("err_units")] = 1.0;
  EXPECT_EQ(judge_precision(t).outcome, Outcome::fails);
}

TEST(Verdicts, SinksFailWhenASinkCuresOrWithholdsTooLittle) {
  const Table good = sinks(Settings{});
  ASSERT_EQ(good.verdict.outcome, Outcome::holds) << good.verdict.measured;
  const auto where = [&good](const char* scale, double d_k, const char* sink) {
    return [&good, scale, d_k, sink](std::size_t r) {
      return good.text(r, "scale") == scale && good.number(r, "d_k") == d_k && good.text(r, "sink") == sink;
    };
  };
  Table t = good;  // the largest sink leaves most of the mass on the keys
  set_cell(t, "key_mass", 0.5, where("1/sqrt(d_k)", 64, "8"));
  EXPECT_EQ(judge_sinks(t).outcome, Outcome::fails);
  t = good;  // a sink raises the keys' mass
  set_cell(t, "key_mass", 1.0, where("1/sqrt(d_k)", 16, "4"));
  EXPECT_EQ(judge_sinks(t).outcome, Outcome::fails);
  t = good;  // a sink undoes the unscaled saturation
  set_cell(t, "max_weight", 0.5, where("1", 1024, "8"));
  EXPECT_EQ(judge_sinks(t).outcome, Outcome::fails);
}

TEST(Verdicts, KvQuantFailsOffTheoryOrWhenTheTemperatureStopsMattering) {
  const Table good = kvquant(Settings{});
  ASSERT_EQ(good.verdict.outcome, Outcome::holds) << good.verdict.measured;
  const auto where = [&good](const char* format, double d_k, const char* scale) {
    return [&good, format, d_k, scale](std::size_t r) {
      return good.text(r, "format") == format && good.number(r, "d_k") == d_k && good.text(r, "scale") == scale;
    };
  };
  const auto cell = [&good](const std::function<bool(std::size_t)>& at, const char* column) {
    for (std::size_t r = 0; r < good.rows.size(); ++r)
      if (at(r)) return good.number(r, column);
    ADD_FAILURE() << "no such row";
    return 0.0;
  };
  Table t = good;  // one row's error 20 % off β·√(E‖q‖²·E[δk²])
  set_cell(t, "predicted", 1.2 * cell(where("int8", 64, "1/sqrt(d_k)"), "predicted"), where("int8", 64, "1/sqrt(d_k)"));
  EXPECT_EQ(judge_kvquant(t).outcome, Outcome::fails);
  t = good;  // scaled keys' error growing like √d_k (consistent with its own theory column)
  for (const char* column : {"score_err", "predicted"})
    set_cell(t, column, 4 * cell(where("fp8_e4m3", 16, "1/sqrt(d_k)"), column), where("fp8_e4m3", 256, "1/sqrt(d_k)"));
  EXPECT_EQ(judge_kvquant(t).outcome, Outcome::fails);
  t = good;  // unscaled keys' error as flat as the scaled one's
  for (const char* column : {"score_err", "predicted"})
    set_cell(t, column, 1.2 * cell(where("int8", 16, "1"), column), where("int8", 256, "1"));
  EXPECT_EQ(judge_kvquant(t).outcome, Outcome::fails);
}

}  // namespace
}  // namespace sdpa::lab
