// stats.hpp — estimators with their standard errors, and the unit-variance
// distributions the lab samples from.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace sdpa::lab {

/// Verdict band: a measured value "holds" when within kVerdictZ standard errors of the
/// expected one. The report makes about 250 such comparisons; a per-comparison 95% or
/// 99.9% band would call several true claims "fails" by chance in every run. |z| <= 4
/// (two-sided p = 6.3e-5) keeps the chance of any false "fails" in a report near 1.5%
/// (Bonferroni).
inline constexpr double kVerdictZ = 4.0;

/// The two-sided 95% point of the standard normal: the tables' _lo/_hi columns are
/// value ∓ kZ95·se, so a judge reading a table recovers se = (hi − lo)/(2·kZ95).
inline constexpr double kZ95 = 1.959964;

/// A Monte-Carlo estimate with its standard error and a 95% normal-approximation interval.
struct Estimate {
  double value = 0, se = 0;
  double lo() const { return value - kZ95 * se; }
  double hi() const { return value + kZ95 * se; }
};

/// Sample mean; se = s / sqrt(n).
Estimate mean_of(const std::vector<double>& x);
/// Unbiased sample variance; se from the sample fourth central moment,
/// Var(s²) ≈ (m4 − (n−3)/(n−1)·s⁴)/n.
Estimate variance_of(const std::vector<double>& x);
/// Population (ddof = 0) variance of a finite set, as numpy's .var() computes it.
double population_variance(const std::vector<double>& x);

/// Zero-mean, unit-variance distributions.
enum class Dist { gaussian, uniform, rademacher, student_t5 };
const char* dist_name(Dist d);
Dist parse_dist(const std::string& s);  // throws sdpa::Error
/// Fourth moment E[X⁴] of the unit-variance distribution (for closed forms in tests).
double fourth_moment(Dist d);

class Sampler {
 public:
  Sampler(Dist d, std::uint64_t seed) : dist_(d), rng_(seed) {}
  double operator()();
  std::mt19937_64& rng() { return rng_; }

 private:
  Dist dist_;
  std::mt19937_64 rng_;
  std::normal_distribution<double> normal_{0.0, 1.0};
  std::uniform_real_distribution<double> uniform_{-1.7320508075688772, 1.7320508075688772};  // ±√3
  std::student_t_distribution<double> t5_{5.0};
};

}  // namespace sdpa::lab
